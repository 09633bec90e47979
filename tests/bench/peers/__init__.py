"""Runners for the peer systems the benchmark compares against."""

from __future__ import annotations

from dataclasses import dataclass


class PeerUnavailable(Exception):
    """The peer cannot run here; the message says why (one line)."""


@dataclass
class PeerResult:
    rankings: list[list[str]]
    latencies_ms: list[float]
    build_s: float
    version: str
    how: str = ""
    #: Peak resident memory of the process that ran the peer, when the runner measures it.
    peak_rss_mb: float | None = None

"""Runners for the peer systems the benchmark compares against."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
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


def time_queries(
    one: Callable[[str], list[str]], queries: Sequence[str], warmup: int
) -> tuple[list[list[str]], list[float]]:
    """Rank every query with ``one``, timing each call, after ``warmup`` untimed calls."""
    for query in queries[:warmup]:
        one(query)
    rankings: list[list[str]] = []
    latencies: list[float] = []
    for query in queries:
        started = time.perf_counter()
        rankings.append(one(query))
        latencies.append((time.perf_counter() - started) * 1000.0)
    return rankings, latencies

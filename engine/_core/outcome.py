"""How a result came about: judged normally, degraded, failed open, or skipped."""

from __future__ import annotations

import enum


class Outcome(enum.StrEnum):
    """One enum for every result toolroute returns.

    - ``applied``: judged normally.
    - ``degraded``: a stage failed and the result came from the stages that worked
      (for example keyword-only recall when the embedder failed).
    - ``failed_open``: no judgement could be made; the fallback set was returned.
    - ``skipped``: nothing to judge (an empty query, say).
    """

    APPLIED = "applied"
    DEGRADED = "degraded"
    FAILED_OPEN = "failed_open"
    SKIPPED = "skipped"

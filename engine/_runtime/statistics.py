"""``Engine.statistics()``: one frozen snapshot of what every service has counted."""

from __future__ import annotations

import attrs

from .._decisions.actor import DecisionStatistics
from .hub import EventStatistics
from .recall import RecallStatistics


@attrs.frozen(kw_only=True)
class SessionStatistics:
    """Sessions, as the session store and the step actor see them now.

    Attributes:
        sessions: sessions the session store keeps.
        stepping: sessions with a step queued or running in the step actor.
        queued_steps: steps queued or running, over every session.
    """

    sessions: int
    stepping: int
    queued_steps: int


@attrs.frozen(kw_only=True)
class EngineStatistics:
    """Counters of one engine, read at one moment.

    Attributes:
        recall: query-cache hits and misses, and how many requests each recall path answered.
        sessions: sessions held and steps queued.
        decisions: decision jobs submitted, in flight and unanswered.
        events: subscribers, events published and events dropped by full buffers.
    """

    recall: RecallStatistics
    sessions: SessionStatistics
    decisions: DecisionStatistics
    events: EventStatistics

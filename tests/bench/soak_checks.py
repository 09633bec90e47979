"""Invariants the soak benchmark checks on every result, and its tally.

Pure functions over public result types: each returns the broken rules' names (empty when
the result is sound), so the workload can count them and keep the first examples.
"""

from __future__ import annotations

import math
import random
from collections import Counter, deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from toolroute import Outcome, RoutingOutcome, Selection, StepSelection
from toolroute.decisions import DecisionRequest, DecisionResult

#: Outcomes that must say why.
NEEDS_REASON = frozenset({Outcome.DEGRADED, Outcome.FAILED_OPEN})

#: Event types the engine documents.
EVENT_TYPES = frozenset(
    {
        "warmup.progress",
        "warmup.finished",
        "selection.finished",
        "step.finished",
        "routing.finished",
        "decision.finished",
        "fail_open",
        "service.restarted",
        "catalog.updated",
        "subscription.started",
        "events.dropped",
    }
)


class Snapshots:
    """The catalogue's tool-id and server-id sets, numbered, as the soak's updater made them.

    The updater pushes a version before it calls ``update``, so a call that starts at
    version ``start`` may still read ``start - 1``; a result read between then and ``end``
    must come from one of those versions: an update swaps the whole snapshot, so no result
    mixes two.
    """

    def __init__(self, ids: Iterable[str], servers: Iterable[str], keep: int = 8) -> None:
        self._sets: deque[tuple[frozenset[str], frozenset[str]]] = deque(maxlen=keep)
        self.version = -1  # number of the newest set
        self.push(ids, servers)

    @property
    def current(self) -> frozenset[str]:
        return self._sets[-1][0]

    def push(self, ids: Iterable[str], servers: Iterable[str]) -> None:
        self._sets.append((frozenset(ids), frozenset(servers)))
        self.version += 1

    def _between(self, start: int, end: int) -> list[tuple[frozenset[str], frozenset[str]]]:
        oldest = self.version - len(self._sets) + 1
        return [self._sets[v - oldest] for v in range(max(start - 1, oldest), end + 1)]

    def ids(self, start: int, end: int) -> list[frozenset[str]]:
        return [ids for ids, _ in self._between(start, end)]

    def servers(self, start: int, end: int) -> list[frozenset[str]]:
        return [servers for _, servers in self._between(start, end)]


def _within(ids: Collection[str], snapshots: list[frozenset[str]]) -> bool:
    return any(snapshot.issuperset(ids) for snapshot in snapshots)


def check_outcome(outcome: object, reason: str) -> list[str]:
    broken = []
    if not isinstance(outcome, Outcome):
        broken.append("outcome is not an Outcome")
    elif outcome in NEEDS_REASON and not reason.strip():
        broken.append(f"{outcome.value} without a reason")
    return broken


def check_selection(
    selection: object,
    snapshots: list[frozenset[str]],
    *,
    at_most: int,
    keyword_only: bool,
) -> list[str]:
    if not isinstance(selection, Selection):
        return [f"select returned {type(selection).__name__}"]
    broken = check_outcome(selection.outcome, selection.reason)
    ids = selection.tool_ids
    if len(set(ids)) != len(ids):
        broken.append("select: duplicate tool ids")
    if not _within(ids, snapshots):
        broken.append("select: tool id outside the catalogue")
    if len(ids) > at_most:
        broken.append("select: more tools than max_tools allows")
    if len(selection.scores) != len(ids):
        broken.append("select: scores and tool ids differ in length")
    if any(s is not None and not math.isfinite(s) for s in selection.scores):
        broken.append("select: a score is not finite")
    if keyword_only and selection.outcome in NEEDS_REASON:
        broken.append("select: a keyword-only engine degraded")
    return broken


def check_step(
    step: object, snapshots: list[frozenset[str]], set_names: frozenset[str]
) -> list[str]:
    if not isinstance(step, StepSelection):
        return [f"prepare_step returned {type(step).__name__}"]
    broken = check_outcome(step.outcome, step.reason)
    if step.page not in (0, 1, 2):
        broken.append(f"prepare_step: page {step.page}")
    if step.tool_ids is not None:
        if len(set(step.tool_ids)) != len(step.tool_ids):
            broken.append("prepare_step: duplicate tool ids")
        if not _within(step.tool_ids, snapshots):
            broken.append("prepare_step: tool id outside the catalogue")
    if not set_names.issuperset(step.active_sets):
        broken.append("prepare_step: unknown active set")
    return broken


def check_routing(
    routing: object, servers: frozenset[str] | None, server_sets: list[frozenset[str]]
) -> list[str]:
    """``servers``: the ids passed to the call, or ``None`` for the catalogue's own."""
    if not isinstance(routing, RoutingOutcome):
        return [f"route_servers returned {type(routing).__name__}"]
    broken = check_outcome(routing.outcome, routing.reason)
    selected, excluded = set(routing.selected), set(routing.excluded)
    if selected & excluded:
        broken.append("route_servers: a server both kept and excluded")
    candidates = [servers] if servers is not None else server_sets
    if not any(selected | excluded == c for c in candidates):
        broken.append("route_servers: kept + excluded differ from the servers asked about")
    if routing.outcome in (Outcome.FAILED_OPEN, Outcome.SKIPPED) and excluded:
        broken.append(f"route_servers: {routing.outcome.value} excluded a server")
    return broken


def check_decision(result: object, request: DecisionRequest) -> list[str]:
    if not isinstance(result, DecisionResult):
        return [f"decide returned {type(result).__name__}"]
    if not set(request.questions).issuperset(result.answers):
        return ["decide: an answer to a question not asked"]
    return []


@dataclass
class Tally:
    """What one phase of the soak saw."""

    ops: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    cancelled: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # expected errors, by kind
    events: Counter[str] = field(default_factory=Counter)
    violations: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    dropped_events: int = 0
    # Worst time past a deadline (the caller's, or the engine's own), per operation.
    max_overshoot_s: dict[str, float] = field(default_factory=dict)
    latencies_s: list[float] = field(default_factory=list)  # a reservoir, for percentiles
    latencies_seen: int = 0

    def violated(self, rules: Iterable[str], context: str = "") -> None:
        for rule in rules:
            self.violations[rule] += 1
            if self.violations[rule] <= 3 and len(self.examples) < 25:  # a few of each
                self.examples.append(f"{rule} ({context})" if context else rule)

    def sample_latency(self, elapsed: float, rng: random.Random, keep: int = 4096) -> None:
        """Keep a uniform sample of at most ``keep`` latencies: the tally's memory stays flat."""
        self.latencies_seen += 1
        if len(self.latencies_s) < keep:
            self.latencies_s.append(elapsed)
        elif (slot := rng.randrange(self.latencies_seen)) < keep:
            self.latencies_s[slot] = elapsed

    def overshoot(self, elapsed: float, bound: float, slack: float, what: str) -> None:
        late = elapsed - bound
        self.max_overshoot_s[what] = max(self.max_overshoot_s.get(what, late), late)
        if late > slack:
            self.violated([f"{what}: finished past its deadline + slack"], f"{late:.2f} s late")

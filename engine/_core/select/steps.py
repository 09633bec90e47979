"""The per-step planner: which tools one agent step shows, as plain functions.

A step reads the conversation (its request text and how many steps went by without a tool
call), then either needs no ranking (no request text; every tool after two idle steps) or
reads one page of a ranking. The runtime's shell (``toolroute._runtime.steps``) does the
awaiting: session holding, routing and recall; everything it decides comes from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import attrs

from ..outcome import Outcome
from .plan import anchored_sets, overfetched
from .policy import Policy, select
from .selection import Ranking
from .toolsets import ToolSet

if TYPE_CHECKING:
    from ..catalog.catalog import Catalog


@attrs.frozen(kw_only=True)
class StepPick:
    """What one step shows, before the shell adds latency, prompts and routing
    (``StepSelection`` has the meaning of each field)."""

    tool_ids: tuple[str, ...] | None
    query: str
    page: int
    outcome: Outcome
    reason: str = ""
    active_sets: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class StepInput:
    """What one step starts from, once its session (if any) has been read.

    Attributes:
        query: the request text extracted from the conversation.
        page: 0, 1 or 2 (idle steps, capped).
        forced: tool sets forced on this step.
        found: tools found with ``search_tools`` since the last step, shown once.
        always: ``always_active`` ids as served (representatives for removed tools).
        hidden: tools of the servers routing dropped.
        sets: the served tool sets.
    """

    query: str
    page: int
    forced: tuple[str, ...] = ()
    found: tuple[str, ...] = ()
    always: tuple[str, ...] = ()
    hidden: frozenset[str] = frozenset()
    sets: tuple[ToolSet, ...] = ()


@attrs.frozen(kw_only=True)
class RankingWindow:
    """The page a ranked step shows: ``count`` tools from position ``start``, out of a
    ranking of ``wanted`` (more than the page when tool-set anchors may rank just below)."""

    start: int
    count: int
    wanted: int


def step_without_ranking(
    step: StepInput, catalog: Catalog, *, all_tools_ceiling: int
) -> StepPick | None:
    """What the step shows when it needs no ranking, else ``None``.

    No request text: the always-active tools, the tools found by search and the forced sets'
    members (``skipped``). Two idle steps on a catalogue within ``all_tools_ceiling``: every
    tool (``None``, or every tool routing kept).
    """
    if not step.query.strip():
        members = (m for s in step.sets if s.name in step.forced for m in s.members)
        shown = tuple(dict.fromkeys((*step.always, *step.found, *members)))
        return StepPick(
            tool_ids=shown or None,
            query="",
            page=step.page,
            outcome=Outcome.SKIPPED,
            reason="no request text",
            active_sets=step.forced,
        )
    if step.page >= 2 and len(catalog) - len(step.hidden) <= all_tools_ceiling:
        hidden = step.hidden
        every = tuple(t.id for t in catalog if t.id not in hidden) if hidden else None
        return StepPick(
            tool_ids=every,
            query=step.query,
            page=step.page,
            outcome=Outcome.APPLIED,
            active_sets=step.forced,
        )
    return None


def ranking_window(step: StepInput, *, max_tools: int, all_tools_ceiling: int) -> RankingWindow:
    """Which part of the ranking a ranked step shows, and how much of it to rank."""
    if step.page >= 2:
        wanted = all_tools_ceiling + len(step.hidden)
        return RankingWindow(start=0, count=all_tools_ceiling, wanted=wanted)
    start = step.page * max_tools
    return RankingWindow(
        start=start,
        count=max_tools,
        wanted=start + overfetched(max_tools, tool_sets=bool(step.sets)) + len(step.hidden),
    )


def ranked_step(
    step: StepInput, window: RankingWindow, ranking: Ranking, started: float
) -> tuple[StepPick, tuple[str, ...]]:
    """What the step shows from ``ranking``, and the sets an anchor activated (to make
    sticky on the session)."""
    if step.hidden:
        ranking = ranking.only(i for i in ranking.tool_ids if i not in step.hidden)
    activated = anchored_sets(ranking, step.sets)
    policy = Policy(
        max_tools=window.count,
        adaptive=False,
        always_active=(*step.always, *step.found),
        tool_sets=step.sets,
        forced_sets=(*step.forced, *activated),
    )
    this_page = attrs.evolve(
        ranking,
        tool_ids=ranking.tool_ids[window.start :],
        scores=ranking.scores[window.start :],
    )
    chosen = select(this_page, policy, started)
    selection = StepPick(
        tool_ids=chosen.tool_ids,
        query=step.query,
        page=step.page,
        outcome=ranking.outcome,
        reason=ranking.reason,
        active_sets=chosen.active_sets,
    )
    return selection, activated


def served_ids(ids: Iterable[str], representative: Mapping[str, str]) -> tuple[str, ...]:
    """``ids`` with every tool dedup removed replaced by its representative."""
    return tuple(dict.fromkeys(representative.get(i, i) for i in ids))

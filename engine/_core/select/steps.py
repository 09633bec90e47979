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
from ..text import has_words
from .access import OPEN, ToolAccess, recall_depth
from .explain import ExplainRequest, Explanation, unranked_explanations
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
    explanations: tuple[Explanation, ...] = ()


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
        access: the allow- and deny-lists of this step (``OPEN``: none).
        explain: the tools to explain (``None``: no explanations).
        explained: explanations of asked-about tools that rules before ranking removed.
    """

    query: str
    page: int
    forced: tuple[str, ...] = ()
    found: tuple[str, ...] = ()
    always: tuple[str, ...] = ()
    hidden: frozenset[str] = frozenset()
    sets: tuple[ToolSet, ...] = ()
    access: ToolAccess = OPEN
    explain: ExplainRequest | None = None
    explained: Mapping[str, Explanation] = attrs.field(factory=dict, hash=False)


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

    No request text, or none with a word in it: the always-active tools, the tools found by
    search and the forced sets' members (``skipped``). Two idle steps on a catalogue within
    ``all_tools_ceiling``: every tool (``None``, or every tool routing kept).
    """
    if not has_words(step.query):
        members = tuple(m for s in step.sets if s.name in step.forced for m in s.members)
        shown = step.access.only(dict.fromkeys((*step.always, *step.found, *members)))
        explained: tuple[Explanation, ...] = ()
        if step.explain is not None:
            why = {
                **dict.fromkeys(members, "tool_set"),
                **dict.fromkeys(step.found, "found"),
                **dict.fromkeys(step.always, "always_active"),
            }
            explained = unranked_explanations(
                step.explain.ask,
                [(i, why[i]) for i in shown],
                step.explained,
                hidden_reason="skipped",
            )
        # Nothing pinned shows every tool: every permitted one when lists keep some out.
        every = step.access.only(catalog.ids) if step.access.restricts else None
        return StepPick(
            tool_ids=shown or every,
            query=step.query.strip(),
            page=step.page,
            outcome=Outcome.SKIPPED,
            reason="no words in the request" if step.query.strip() else "no request text",
            active_sets=step.forced,
            explanations=explained,
        )
    if step.page >= 2 and len(catalog) - len(step.hidden) <= all_tools_ceiling:
        hidden, access = step.hidden, step.access
        every = None  # "every tool", unless something keeps tools out
        if hidden or access.restricts:
            every = tuple(t.id for t in catalog if t.id not in hidden and access.permits(t.id))
        explained = ()
        if step.explain is not None:
            explained = unranked_explanations(
                step.explain.ask,
                [
                    (t.id, "all_tools")
                    for t in catalog
                    if t.id not in hidden and access.permits(t.id)
                ],
                step.explained,
                hidden_reason="routing",
            )
        return StepPick(
            tool_ids=every,
            query=step.query,
            page=step.page,
            outcome=Outcome.APPLIED,
            active_sets=step.forced,
            explanations=explained,
        )
    return None


def ranking_window(
    step: StepInput, *, max_tools: int, all_tools_ceiling: int, catalog_size: int | None = None
) -> RankingWindow:
    """Which part of the ranking a ranked step shows, and how much of it to rank (an
    allow-list ranks the whole ``catalog_size``: see ``recall_depth``)."""
    if step.page >= 2:
        wanted = all_tools_ceiling + len(step.hidden) + len(step.access.deny)
        if step.access.allow is not None:
            wanted = max(wanted, len(step.access.allow) + len(step.hidden))
        return RankingWindow(start=0, count=all_tools_ceiling, wanted=wanted)
    start = step.page * max_tools
    wanted = start + overfetched(max_tools, tool_sets=bool(step.sets)) + len(step.hidden)
    return RankingWindow(
        start=start,
        count=max_tools,
        wanted=recall_depth(wanted, step.access, catalog_size or wanted),
    )


def ranked_step(
    step: StepInput, window: RankingWindow, ranking: Ranking, started: float
) -> tuple[StepPick, tuple[str, ...]]:
    """What the step shows from ``ranking``, and the sets an anchor activated (to make
    sticky on the session)."""
    if step.hidden or step.access.restricts:
        access = step.access
        ranking = ranking.only(
            i for i in ranking.tool_ids if i not in step.hidden and access.permits(i)
        )
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
    explained = dict(step.explained)
    if step.explain is not None:
        # Tools ranked above this page were shown by an earlier step.
        for rank, tool_id in enumerate(ranking.tool_ids[: window.start], 1):
            if tool_id in step.explain.ask and tool_id not in explained:
                explained[tool_id] = Explanation(
                    tool_id=tool_id,
                    shown=False,
                    reason="earlier_page",
                    rank=rank,
                    score=ranking.scores[rank - 1],
                )
    chosen = select(
        this_page, policy, started, explain=step.explain, hidden=explained, access=step.access
    )
    selection = StepPick(
        tool_ids=chosen.tool_ids,
        query=step.query,
        page=step.page,
        outcome=ranking.outcome,
        reason=ranking.reason,
        active_sets=chosen.active_sets,
        explanations=chosen.explanations,
    )
    return selection, activated


def served_ids(ids: Iterable[str], representative: Mapping[str, str]) -> tuple[str, ...]:
    """``ids`` with every tool dedup removed replaced by its representative."""
    return tuple(dict.fromkeys(representative.get(i, i) for i in ids))

"""A selection told "no tool needed" (the decider's confident no, read by
``_core.decide.no_tool``): what it still shows and how it explains the rest."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from .access import ToolAccess
from .explain import Explanation
from .selection import Selection
from .steps import StepPick


def no_tool_selection(selection: Selection, reason: str) -> Selection:
    """``selection`` told "no tool needed": only its ``always_active`` tools remain (the
    host pinned them for every request), explained as pinned."""
    keep = [i for i, s in enumerate(selection.sources) if s == "always_active"]
    ids = tuple(selection.tool_ids[i] for i in keep)
    return attrs.evolve(
        selection,
        tool_ids=ids,
        scores=tuple(selection.scores[i] for i in keep),
        sources=tuple(selection.sources[i] for i in keep),
        explanations=_explained(selection.explanations, ids),
        no_tool_needed=True,
        reason=_joined(selection.reason, reason),
    )


def no_tool_step(
    pick: StepPick, always: Sequence[str], access: ToolAccess, reason: str
) -> StepPick:
    """``pick`` told "no tool needed": only the ``always_active`` tools the step may show."""
    ids = access.only(always)
    return attrs.evolve(
        pick,
        tool_ids=ids,
        explanations=_explained(pick.explanations, ids),
        reason=_joined(pick.reason, reason),
    )


def _joined(before: str, reason: str) -> str:
    # A degraded selection keeps saying why it degraded.
    return f"{before}; {reason}" if before else reason


def _explained(
    explanations: Sequence[Explanation], shown: Sequence[str]
) -> tuple[Explanation, ...]:
    """The shown tools' explanations first, then the tools the verdict hid (``no_tool``),
    then those hidden before."""
    kept = [e for e in explanations if e.shown and e.tool_id in shown]
    hid = [
        attrs.evolve(e, shown=False, reason="no_tool")
        for e in explanations
        if e.shown and e.tool_id not in shown
    ]
    return (*kept, *hid, *(e for e in explanations if not e.shown))

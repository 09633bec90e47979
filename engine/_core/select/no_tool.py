""" "Does this request need any tool?": the question, and the rule that reads its answer.

A selection (``select``, ``prepare_step``) may end in *no tool needed* when the engine's
decider answers this question with a confident ``false``. The fail-open rule is the one
server routing keeps: only a confident ``false`` counts; a missing, malformed, near-coin-flip
or late answer, or a decider that failed, leaves the selection as recall made it.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ..catalog.tool import Tool
from ..decide.types import (
    BooleanGate,
    BooleanQuestion,
    DecisionRequest,
    DecisionResult,
    gate_boolean,
    read_boolean,
)
from ..text import bounded
from .access import ToolAccess
from .explain import Explanation
from .selection import Selection
from .steps import StepPick

#: The question's key in the decision request.
KEY = "needs_tool"

#: The wording the local decider's calibration was fitted with (``fit_local_decider.py``):
#: change it only together with a refit.
NEEDS_TOOL = BooleanQuestion(
    "The request needs one of available_tools to be carried out.",
    true="A tool in available_tools does what the request asks.",
    false="No tool in available_tools is needed; the request is answered without tools.",
)

#: Tools the question lists at most: the best-ranked ones. The local decider reads the best
#: match among them, which recall already ranked first; a vendor pays per listed tool.
MAX_LISTED = 256

#: Characters of one tool description in the question's state.
MAX_DESCRIPTION_CHARS = 500


def needs_tool_request(query: str, tools: Sequence[Tool], *, timeout_s: float) -> DecisionRequest:
    """The decision request asking whether ``query`` needs any of ``tools`` (best first;
    the first :data:`MAX_LISTED` are listed)."""
    listed = [
        {"name": t.name, "description": bounded(t.description, MAX_DESCRIPTION_CHARS)}
        for t in tools[:MAX_LISTED]
    ]
    return DecisionRequest(
        state={"request": query, "available_tools": listed},
        questions={KEY: NEEDS_TOOL},
        timeout_s=timeout_s,
    )


@attrs.frozen(kw_only=True)
class NoToolVerdict:
    """What the answer says: ``no_tool`` only on a confident ``false``.

    Attributes:
        no_tool: the request needs none of the listed tools, confidently.
        probability: the decider's probability that a tool is needed; ``None`` unanswered.
        reason: for the selection's ``reason`` when ``no_tool``; why it was not judged else.
    """

    no_tool: bool
    probability: float | None
    reason: str


def read_verdict(result: DecisionResult | None, min_confidence: float) -> NoToolVerdict:
    """The verdict of ``result`` (``None``: the decider failed or none is configured)."""
    if result is None:
        return NoToolVerdict(no_tool=False, probability=None, reason="no-tool: no answer")
    probability = read_boolean(result.answers, KEY)
    if probability is None:
        return NoToolVerdict(no_tool=False, probability=None, reason="no-tool: no answer")
    gate = BooleanGate(min_confidence=min_confidence)
    no_tool = gate_boolean(result.answers, KEY, gate) is False
    said = "no tool needed" if no_tool else "a tool may be needed"
    return NoToolVerdict(
        no_tool=no_tool,
        probability=probability,
        reason=f"{said} (p(tool)={probability:.3f}, {result.provider})",
    )


def no_tool_selection(selection: Selection, verdict: NoToolVerdict) -> Selection:
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
        reason=_joined(selection.reason, verdict.reason),
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

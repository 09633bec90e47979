""" "Does this request need any tool?": the question, and the rule that reads its answer.

A selection (``select``, ``prepare_step``) may end in *no tool needed* when the engine's
decider answers this question with a confident ``false``. The fail-open rule is the one
server routing keeps: only a confident ``false`` counts; a missing, malformed, near-coin-flip
or late answer, or a decider that failed, leaves the selection as recall made it.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ..text import bounded
from .types import (
    BooleanGate,
    BooleanQuestion,
    DecisionRequest,
    DecisionResult,
    gate_boolean,
    read_boolean,
)

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


def needs_tool_request(
    query: str, tools: Sequence[tuple[str, str]], *, timeout_s: float
) -> DecisionRequest:
    """The decision request asking whether ``query`` needs any of ``tools`` (``(name,
    description)`` pairs, best first; the first :data:`MAX_LISTED` are listed)."""
    listed = [
        {"name": name, "description": bounded(about, MAX_DESCRIPTION_CHARS)}
        for name, about in tools[:MAX_LISTED]
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

"""Reading decision answers off the wire, strictly.

The converter's defaults would coerce ``"no"`` to ``True`` and ``"0.9"`` to a
float; here a probability must be a real number in [0, 1] and a label a
string. A malformed answer is dropped with a logged warning, never the call.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import cattrs

from .types import (
    Answer,
    BooleanAnswer,
    BooleanQuestion,
    ChoiceAnswer,
    ChoiceQuestion,
    Question,
    ScoreAnswer,
    Usage,
)

logger = logging.getLogger("toolroute.decisions")

#: Answer ``type`` values that mean "boolean" in some vendor's vocabulary.
BOOLEAN_TYPES = frozenset({"noul", "boolean", "predicate"})


class MalformedAnswer(ValueError):
    """An answer that does not have the shape its question asks for."""


class Misaligned(ValueError):
    """A reply whose answers cannot be matched to the questions asked with certainty."""


@attrs.frozen
class _Choice:
    choice: str
    probabilities: dict[str, float]
    confidence: float | None = None


@attrs.frozen
class _Score:
    score: float
    legend: dict[str, str]
    probabilities: dict[str, float]
    confidence: float | None = None


def _number(value: Any, _type: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedAnswer(f"expected a number, got {value!r}")
    return float(value)


def _string(value: Any, _type: Any) -> str:
    if not isinstance(value, str):
        raise MalformedAnswer(f"expected a string, got {value!r}")
    return value


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter()
    converter.register_structure_hook(float, _number)
    converter.register_structure_hook(str, _string)
    return converter


_converter = _make_converter()


def _structure(raw: object, cls: type[Any]) -> Any:
    try:
        return _converter.structure(raw, cls)
    except cattrs.BaseValidationError as exc:
        reasons = "; ".join(cattrs.transform_error(exc))
        raise MalformedAnswer(reasons) from None


def read_answer(raw: object, question: Question, *, confidence: float | None = None) -> Answer:
    """The typed answer to ``question`` in ``raw`` (one vendor answer object).

    Args:
        raw: the answer as decoded JSON.
        question: the question it answers; the answer must be of its type.
        confidence: a confidence the vendor reports elsewhere (the AI Gateway).

    Raises:
        MalformedAnswer: wrong type, missing field, or a value that is not a
            probability (string, bool, NaN, outside [0, 1]).
    """
    if not isinstance(raw, Mapping):
        raise MalformedAnswer(f"expected an answer object, got {raw!r}")
    kind = raw.get("type")
    try:
        if isinstance(question, BooleanQuestion):
            if kind not in BOOLEAN_TYPES:
                raise MalformedAnswer(f"expected a boolean answer, got type {kind!r}")
            value = raw["noul"] if "noul" in raw else raw.get("probability")
            return BooleanAnswer(_number(value, float))
        if isinstance(question, ChoiceQuestion):
            if kind != "choice":
                raise MalformedAnswer(f"expected a choice answer, got type {kind!r}")
            choice = _structure(raw, _Choice)
            return ChoiceAnswer(
                choice.choice,
                choice.probabilities,
                _confidence(choice.confidence, confidence, choice.probabilities),
            )
        if kind != "score":
            raise MalformedAnswer(f"expected a score answer, got type {kind!r}")
        score = _structure(raw, _Score)
        return ScoreAnswer(
            score.score,
            score.legend,
            score.probabilities,
            _confidence(score.confidence, confidence, score.probabilities),
        )
    except (TypeError, ValueError) as exc:
        # attrs validators (range, NaN) raise ValueError; keep one exception type.
        raise MalformedAnswer(str(exc)) from None


def _confidence(
    own: float | None, reported: float | None, probabilities: Mapping[str, float]
) -> float:
    # max(probabilities) is not a calibrated confidence, only the last resort.
    if own is not None:
        return own
    if reported is not None:
        return reported
    return max(probabilities.values())


def read_answers(
    raw_answers: Mapping[str, object],
    questions: Mapping[str, Question],
    *,
    vendor: str,
    confidences: Mapping[str, object] | None = None,
    redact: Callable[[str], str] = str,
) -> dict[str, Answer]:
    """The well-formed answers to ``questions``, in question order.

    Malformed answers are dropped with a warning on the ``toolroute.decision``
    logger; a missing one leaves its question unanswered.

    Raises:
        Misaligned: an answer is filed under an id that was not asked. The
            vendor renamed or shifted the ids, so no answer of the reply can be
            trusted to belong to the question its id names.
    """
    stray = [key for key in raw_answers if key not in questions]
    if stray:
        shown = ", ".join(repr(k[:40]) for k in stray[:5]) + (" …" if len(stray) > 5 else "")
        raise Misaligned(f"{len(stray)} answers under ids that were not asked: {shown}")
    answers: dict[str, Answer] = {}
    for key, question in questions.items():
        if key not in raw_answers:
            continue
        reported = (confidences or {}).get(key)
        try:
            if reported is not None:
                reported = _number(reported, float)
            answers[key] = read_answer(raw_answers[key], question, confidence=reported)
        except MalformedAnswer as exc:
            logger.warning(
                redact(f"{vendor}: dropped the answer to question {key!r}: {exc}"),
            )
    return answers


def read_usage(raw: object) -> Usage:
    """Token usage from ``{input_tokens|inputTokens, output_tokens|outputTokens}``; 0 when absent."""
    if not isinstance(raw, Mapping):
        return Usage()

    def count(*names: str) -> int:
        for name in names:
            value = raw.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
            if isinstance(value, float) and math.isfinite(value) and value >= 0:
                return int(value)
        return 0

    return Usage(
        input_tokens=count("input_tokens", "inputTokens"),
        output_tokens=count("output_tokens", "outputTokens"),
    )

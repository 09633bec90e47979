"""The ``decide`` inference type: typed questions about one state, answered with probabilities.

Pure data and rules; the vendors live in ``toolroute.providers`` and the
batching in :mod:`._decide`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias, TypeGuard

import attrs

from ..errors import ConfigError
from ..outcome import Outcome
from ..validators import is_number, rule

#: A JSON value: what a state, a criterion or a legend may hold.
JSON: TypeAlias = Any

#: An image or video: raw bytes, a local path, or a ``data:`` URL.
Media: TypeAlias = bytes | str | os.PathLike[str]


_text = rule(lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty string")


@attrs.frozen
class BooleanQuestion:
    """Is the statement in ``instructions`` true of the state?

    ``true`` and ``false`` optionally describe what each answer means; never
    invert them (a ``true`` criterion that means "no" confuses the model).
    """

    instructions: str = attrs.field(validator=_text)
    true: JSON = None
    false: JSON = None


@attrs.frozen
class ChoiceQuestion:
    """Which of the named ``options`` fits; values describe the options (or ``None``)."""

    instructions: str = attrs.field(validator=_text)
    options: Mapping[str, JSON] = attrs.field(converter=dict)

    @options.validator
    def _check(self, _attribute: attrs.Attribute[Any], value: Mapping[str, JSON]) -> None:
        if len(value) < 2 or not all(isinstance(k, str) and k for k in value):
            raise ConfigError(
                f"a choice needs at least 2 named options, got {sorted(map(str, value))!r}"
            )


@attrs.frozen
class ScoreQuestion:
    """Where on the ordered ``levels`` (at least 2) the state sits; answers are 0-based."""

    instructions: str = attrs.field(validator=_text)
    levels: tuple[JSON, ...] = attrs.field(converter=tuple)

    @levels.validator
    def _check(self, _attribute: attrs.Attribute[Any], value: tuple[JSON, ...]) -> None:
        if len(value) < 2:
            raise ConfigError(f"a score needs at least 2 levels, got {len(value)}")


Question: TypeAlias = BooleanQuestion | ChoiceQuestion | ScoreQuestion


def is_probability(value: object) -> TypeGuard[float]:
    """A real number (not a bool, not NaN) in [0, 1]."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and 0.0 <= value <= 1.0
    )


def _probability(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not is_probability(value):
        raise ValueError(f"{attribute.name} must be a probability in [0, 1], got {value!r}")


def _distribution(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Mapping) or not value:
        raise ValueError(f"{attribute.name} must be a non-empty mapping, got {value!r}")
    for key, p in value.items():
        if not isinstance(key, str):
            raise ValueError(f"{attribute.name} keys must be strings, got {key!r}")
        _probability(None, attribute, p)


@attrs.frozen
class BooleanAnswer:
    probability: float = attrs.field(validator=_probability)


@attrs.frozen
class ChoiceAnswer:
    """The chosen option, the whole distribution, and the model's confidence."""

    choice: str = attrs.field(validator=attrs.validators.instance_of(str))
    probabilities: Mapping[str, float] = attrs.field(validator=_distribution)
    confidence: float = attrs.field(validator=_probability)


@attrs.frozen
class ScoreAnswer:
    """``score`` is the probability-weighted level index; ``legend`` names the levels."""

    score: float = attrs.field()
    legend: Mapping[str, str] = attrs.field()
    probabilities: Mapping[str, float] = attrs.field(validator=_distribution)
    confidence: float = attrs.field(validator=_probability)

    @score.validator
    def _check_score(self, _attribute: attrs.Attribute[Any], value: object) -> None:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(f"score must be a finite number, got {value!r}")

    @legend.validator
    def _check_legend(self, _attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ValueError(f"legend must map level strings to labels, got {value!r}")


Answer: TypeAlias = BooleanAnswer | ChoiceAnswer | ScoreAnswer


def _questions(value: Mapping[str, Question]) -> dict[str, Question]:
    questions = dict(value)
    for key, question in questions.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"question ids must be non-empty strings, got {key!r}")
        if not isinstance(question, BooleanQuestion | ChoiceQuestion | ScoreQuestion):
            raise ConfigError(
                f"question {key!r} must be a BooleanQuestion, ChoiceQuestion or ScoreQuestion,"
                f" got {type(question).__name__}"
            )
    return questions


# Not ``""``: providers read ``request.model or <their default>``, so an empty name would
# silently become the default model.
_model = rule(
    lambda v: v is None or (isinstance(v, str) and bool(v.strip())), "a non-empty string or None"
)
_timeout = rule(lambda v: v is None or (is_number(v) and v > 0), "a positive number of seconds")


@attrs.frozen(kw_only=True)
class DecisionRequest:
    """One state and the questions asked about it, in order.

    Attributes:
        state: a string or any JSON value the questions are about.
        questions: ids (caller-chosen) to questions; order is kept.
        images: images as bytes, local paths or ``data:`` URLs.
        video: one video, likewise.
        model: a model other than the provider's default.
        timeout_s: the whole call's budget, retries included; the provider's default otherwise.
    """

    state: JSON
    questions: Mapping[str, Question] = attrs.field(converter=_questions)
    images: tuple[Media, ...] = attrs.field(default=(), converter=tuple)
    video: Media | None = None
    model: str | None = attrs.field(default=None, validator=_model)
    timeout_s: float | None = attrs.field(default=None, validator=_timeout)

    def with_questions(self, questions: Mapping[str, Question]) -> DecisionRequest:
        """The same state and media with other questions (one batch of this request)."""
        return attrs.evolve(self, questions=questions)


@attrs.frozen(kw_only=True)
class Usage:
    """Tokens a provider read and wrote."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


@attrs.frozen(kw_only=True)
class DecisionResult:
    """What a provider answered.

    Attributes:
        model: the model that answered, as the provider resolved it (``jev-1.13.0``).
        provider: the provider's canonical name.
        answers: question ids to answers; malformed answers are missing, not fatal.
        usage: tokens read and written.
        request_id: the provider's request id (batches joined with ``,``).
        latency_ms: client-side time for the call.
        upstream_ms: the server's own time, when it reports one.
        media_bytes: bytes of media sent, as data URLs.
    """

    model: str
    provider: str
    answers: Mapping[str, Answer]
    usage: Usage = Usage()
    request_id: str | None = None
    latency_ms: float = 0.0
    upstream_ms: float | None = None
    media_bytes: int = 0


# Readers. They accept any answers mapping and never raise: a missing answer or
# one of another type reads as ``None``, which callers treat as "no judgement".


def read_boolean(answers: Mapping[str, Answer], key: str) -> float | None:
    """The probability of a boolean answer; ``None`` when missing or of another type."""
    answer = answers.get(key)
    return answer.probability if isinstance(answer, BooleanAnswer) else None


@attrs.frozen(kw_only=True)
class ChoiceReading:
    """A choice answer with ``ranked``: (option, probability), most likely first."""

    choice: str
    confidence: float
    probabilities: Mapping[str, float]
    ranked: tuple[tuple[str, float], ...]


def read_choice(answers: Mapping[str, Answer], key: str) -> ChoiceReading | None:
    """A choice answer with its options ranked; ties keep the provider's order."""
    answer = answers.get(key)
    if not isinstance(answer, ChoiceAnswer):
        return None
    ranked = tuple(sorted(answer.probabilities.items(), key=lambda item: -item[1]))
    return ChoiceReading(
        choice=answer.choice,
        confidence=answer.confidence,
        probabilities=answer.probabilities,
        ranked=ranked,
    )


def read_score(answers: Mapping[str, Answer], key: str) -> ScoreAnswer | None:
    """A score answer; ``None`` when missing or of another type."""
    answer = answers.get(key)
    return answer if isinstance(answer, ScoreAnswer) else None


def boolean_confidence(probability: float) -> float:
    """How far from a coin toss: ``|p - 0.5| * 2`` (0.5 → 0, 0 and 1 → 1)."""
    return abs(probability - 0.5) * 2.0


@attrs.frozen(kw_only=True)
class BooleanGate:
    """When a boolean answer counts: confident enough, then true at ``min_probability``."""

    min_probability: float = attrs.field(default=0.5, validator=_probability)
    min_confidence: float = attrs.field(default=0.4, validator=_probability)


def gate_boolean(
    answers: Mapping[str, Answer], key: str, gate: BooleanGate = BooleanGate()
) -> bool | None:
    """``True``/``False`` for a confident answer, ``None`` for no judgement.

    With the default gate any probability in (0.3, 0.7) is ``None``.
    """
    probability = read_boolean(answers, key)
    if probability is None or boolean_confidence(probability) < gate.min_confidence:
        return None
    return probability >= gate.min_probability


def decision_key(namespace: str, index: int) -> str:
    """Question id ``<namespace>__<index>``: questions are keyed by position, never by name."""
    return f"{namespace}__{index}"


def split_questions(
    questions: Mapping[str, Question], cap: int | None
) -> list[dict[str, Question]]:
    """Cut ``questions``, in order, into chunks of at most ``cap`` (all in one when ``None``)."""
    items = list(questions.items())
    if cap is None or len(items) <= cap:
        return [dict(items)]
    return [dict(items[i : i + cap]) for i in range(0, len(items), cap)]


def merge_results(results: Sequence[DecisionResult]) -> DecisionResult:
    """One result from the results of a request's batches, in batch order.

    Answers are united in order, usage and media bytes summed, latencies the
    maximum, request ids joined with ``,``; model and provider from the first.
    """
    if not results:
        raise ValueError("merge_results needs at least one result")
    first = results[0]
    answers: dict[str, Answer] = {}
    usage = Usage()
    for result in results:
        answers.update(result.answers)
        usage = usage + result.usage
    ids = [r.request_id for r in results if r.request_id]
    upstream = [r.upstream_ms for r in results if r.upstream_ms is not None]
    return DecisionResult(
        model=first.model,
        provider=first.provider,
        answers=answers,
        usage=usage,
        request_id=",".join(ids) or None,
        latency_ms=max(r.latency_ms for r in results),
        upstream_ms=max(upstream) if upstream else None,
        media_bytes=sum(r.media_bytes for r in results),
    )


def reply_outcome(asked: int, answered: int) -> Outcome:
    """The one rule for how a decision reply went, used by routing and the engine's events.

    Every question answered is ``applied``; some but not all (a failed batch, a
    missing, malformed or out-of-range answer) is ``degraded``; none is
    ``failed_open``. The reason to go with it is :func:`answered_reason`.
    """
    if answered <= 0:
        return Outcome.FAILED_OPEN
    return Outcome.APPLIED if answered >= asked else Outcome.DEGRADED


def answered_reason(asked: int, answered: int) -> str:
    """``"5 of 6 answered"``: how much of a decision reply could be used."""
    return f"{answered} of {asked} answered"

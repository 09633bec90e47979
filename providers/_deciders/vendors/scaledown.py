"""ScaleDown's classifier, one ``POST /classify`` per question.

Only the legacy classifier endpoint is documented (``wire-formats.md`` §8)::

    POST {base}/classify   x-api-key: <key>
    {"text", "labels": [{"name", "rubric"}]}
    200 {"top_label", "scores": {label: p}, "labels": [{"label", "score", "rubric"}]}

It answers one question per call, so the decider is a
:class:`~..per_question.PerQuestionDecider`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Unpack

import attrs

from ...._core.decide.limits import DecisionLimits
from ...._core.decide.types import (
    Answer,
    BooleanAnswer,
    BooleanQuestion,
    ChoiceQuestion,
    DecisionRequest,
    Question,
    ScoreQuestion,
    Usage,
    is_probability,
)
from ...._core.decide.wire import MalformedAnswer, logger, read_answer, read_usage
from ...._core.errors import DecisionError
from ..._http.async_driver import LoopOptions
from ..._http.retry import Reply
from ..codec import QuestionReply, VendorSpec
from ..per_question import PerQuestionDecider
from ..wire import Kind, Wire, envelope_message, json_text, status_kind
from .media_readers import MEDIA_READERS


def _rubric(instructions: str, answer: str, description: object) -> str:
    line = f"Answer: {answer}"
    if description is not None:
        line += f" — {json_text(description, vendor=SPEC.vendor, what='criteria')}"
    return f"{instructions}\n{line}"


def _scores(payload: object, names: list[str]) -> dict[str, float]:
    """The score of every label in ``names``, from ``scores`` or else the ``labels`` list."""
    if not isinstance(payload, Mapping):
        raise MalformedAnswer(f"expected a classification object, got {payload!r}")
    raw = payload.get("scores")
    if not isinstance(raw, Mapping):
        listed = payload.get("labels")
        if not isinstance(listed, list):
            raise MalformedAnswer("the reply has neither a scores map nor a labels list")
        raw = {
            str(entry.get("label")): entry.get("score")
            for entry in listed
            if isinstance(entry, Mapping)
        }
    stray = [label for label in raw if label not in names]
    if stray:
        # Scores for labels that were not sent: the reply may be another request's,
        # so none of it is matched to this question.
        shown = ", ".join(repr(str(label)[:40]) for label in stray[:3])
        raise MalformedAnswer(f"the reply scores labels that were not offered ({shown})")
    scores: dict[str, float] = {}
    for name in names:
        value = raw.get(name)
        if not is_probability(value):
            raise MalformedAnswer(f"expected a score in [0, 1] for label {name!r}, got {value!r}")
        scores[name] = float(value)
    total = math.fsum(scores.values())
    if total <= 0.0:
        raise MalformedAnswer("every label scored 0")
    return {name: value / total for name, value in scores.items()}


_SCALEDOWN_KINDS = {
    401: Kind.AUTHENTICATION,
    403: Kind.AUTHENTICATION,
    402: Kind.INVALID_REQUEST,
    413: Kind.MAX_TOKENS_EXCEEDED,
    422: Kind.INVALID_REQUEST,
    429: Kind.RATE_LIMIT,
    503: Kind.OVERLOADED,
}


SPEC = VendorSpec(
    name="scaledown",
    vendor="ScaleDown",
    default_model="classify-1",
    default_base_url="https://api.scaledown.xyz",
    key_env="SCALEDOWN_API_KEY",
    limits=DecisionLimits(max_questions=16, timeout_s=5.0, per_question_s=0.5),
    strip_v1=True,
    media_hint=MEDIA_READERS,
)


@attrs.frozen
class ScaleDownCodec:
    """One classification per question (see :class:`ScaleDownDecider` for the mapping)."""

    spec: VendorSpec = SPEC

    def headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key} if api_key else {}

    def path(self, model: str) -> str:
        return "/classify"

    def model_for(self, request: DecisionRequest, default: str) -> str:
        if request.model is not None and request.model != self.spec.default_model:
            raise DecisionError(
                Kind.INVALID_REQUEST,
                f"{self.spec.vendor}'s /classify endpoint has no model choice; it answers with"
                f" {self.spec.default_model!r}, not {request.model!r}.",
            )
        return self.spec.default_model

    def check_question(self, key: str, question: Question) -> None:
        """Every question type is a classification."""

    def question_body(self, text: str, question: Question, model: str) -> object:
        return {"text": text, "labels": [{"name": n, "rubric": r} for n, r in _labels(question)]}

    def read_reply(
        self, payload: object, key: str, question: Question, model: str, wire: Wire
    ) -> QuestionReply:
        usage = read_usage(payload.get("usage")) if isinstance(payload, Mapping) else Usage()
        try:
            answer = _classified(payload, question)
        except MalformedAnswer as exc:
            logger.warning(
                wire.redact(f"{wire.vendor}: dropped the answer to question {key!r}: {exc}")
            )
            return QuestionReply(None, usage)
        return QuestionReply(answer, usage)

    def error(self, reply: Reply, wire: Wire) -> DecisionError:
        payload = reply.json()
        message = envelope_message(payload)
        detail = payload.get("detail") if isinstance(payload, Mapping) else None
        if isinstance(detail, list):
            entries = [
                f"{'.'.join(map(str, e.get('loc', [])))}: {e.get('msg', '')}"
                for e in detail[:5]
                if isinstance(e, Mapping)
            ]
            message = "Request failed validation — " + "; ".join(entries)
        return wire.refusal(status_kind(reply.status, _SCALEDOWN_KINDS), reply, message)

    def request_id(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("x-request-id")


class ScaleDownDecider(PerQuestionDecider):
    """ScaleDown's classifier (``classify-1``), one ``POST /classify`` per question; text only.

    Every question type becomes a classification of the state over labels,
    each label with a *rubric*. The text is the state alone (compact JSON
    when it is not a string), so the classifier reads nothing but the state;
    the question's instructions open every rubric, so they frame each label
    without favouring one. Each rubric is ``"<instructions>\\nAnswer: <answer>"``,
    followed by ``" — <description>"`` when there is one (compact JSON when
    not a string):

    - **choice** → one label per option (``name`` = the option); ``<answer>`` is
      the option, the description its criterion. ``probabilities`` are the
      option scores normalised to sum to 1; ``choice`` is the most likely
      option (the first on a tie), ``confidence`` its probability (the
      uncalibrated fallback: the endpoint reports none).
    - **boolean** → labels ``"true"`` (``<answer>`` = ``yes``, described by the
      ``true`` criterion) and ``"false"`` (``no``, the ``false`` criterion);
      probability = ``scores["true"] / (scores["true"] + scores["false"])``.
    - **score** → labels ``"0"`` … ``"n-1"``; ``<answer>`` is ``level i of 0–(n-1)``,
      described by the level. ``score`` = Σ i·pᵢ over the normalised scores,
      ``legend`` the level texts (the index for a ``None`` level).

    Scores come from ``scores`` (or, failing that, the ``labels`` list); a
    missing or non-probability score for any label leaves that question
    unanswered (logged), as does a total of 0 or a score for a label that was
    not sent (the reply cannot be matched to this question with certainty).

    The endpoint takes no model: results name ``classify-1``, and a request
    naming another model is refused. At most 16 questions per request — each
    costs its own call — at most 4 calls at once; the default timeout is 5 s
    + 0.5 s per question. Errors: 401/403 ``authentication`` (latches); 402
    (budget) and 422 ``invalid_request`` without latching; 413
    ``max_tokens_exceeded``; 429 ``rate_limit``; 5xx ``server`` (503
    ``overloaded``).

    Args:
        api_key: ``SCALEDOWN_API_KEY``, sent as ``x-api-key``.
        base_url: ``https://api.scaledown.xyz``; a trailing ``/v1`` is dropped.
    """

    name = SPEC.name
    vendor = SPEC.vendor
    limits = SPEC.limits

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None = None,
        **options: Unpack[LoopOptions],
    ) -> None:
        super().__init__(ScaleDownCodec(), api_key=api_key, base_url=base_url, **options)


def _level_text(level: object, index: int) -> str:
    if level is None:
        return str(index)
    return json_text(level, vendor=SPEC.vendor, what="score levels")


def _labels(question: Question) -> list[tuple[str, str]]:
    """(name, rubric) of every label the question becomes, in order."""
    text = question.instructions
    if isinstance(question, BooleanQuestion):
        return [
            ("true", _rubric(text, "yes", question.true)),
            ("false", _rubric(text, "no", question.false)),
        ]
    if isinstance(question, ChoiceQuestion):
        return [(option, _rubric(text, option, d)) for option, d in question.options.items()]
    top = len(question.levels) - 1
    return [
        (str(i), _rubric(text, f"level {i} of 0–{top}", level))
        for i, level in enumerate(question.levels)
    ]


def _classified(payload: object, question: Question) -> Answer:
    names = [name for name, _rubric in _labels(question)]
    probabilities = _scores(payload, names)
    if isinstance(question, BooleanQuestion):
        return BooleanAnswer(probabilities["true"])
    best = max(names, key=lambda name: probabilities[name])  # first on a tie
    raw: dict[str, Any]
    if isinstance(question, ChoiceQuestion):
        raw = {"type": "choice", "choice": best, "probabilities": probabilities}
    else:
        assert isinstance(question, ScoreQuestion)
        raw = {
            "type": "score",
            "score": math.fsum(int(name) * p for name, p in probabilities.items()),
            "legend": {str(i): _level_text(lv, i) for i, lv in enumerate(question.levels)},
            "probabilities": probabilities,
        }
    return read_answer(raw, question)

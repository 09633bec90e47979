"""OpenAI Decisions (public beta): ``POST {base}/v1/decisions``, questions as an ordered array.

Wire format from ``wire-formats.md`` §7 (promptfoo and gproxy-protocol; no reply
from the live endpoint is on record). Unlike the System One family the
questions go as an *array* and the answers come back in the *same positions*,
so answers are matched to questions by position, and only when the reply
aligns with certainty: as many answers as questions, and each echoed ``name``
(optional on the wire) equal to the one sent at that position. Anything else
is no reply (``server``), never a guess.

This module also holds the OpenAI error envelope (:func:`openai_error`), which
the logprob decider shares.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

import attrs

from ...._core.decide.limits import DecisionLimits, MediaLimits
from ...._core.decide.media import PreparedMedia
from ...._core.decide.types import (
    JSON,
    Answer,
    BooleanQuestion,
    ChoiceAnswer,
    ChoiceQuestion,
    DecisionRequest,
    Question,
    ScoreQuestion,
)
from ...._core.decide.wire import MalformedAnswer, logger, read_answer, read_usage
from ...._core.errors import ConfigError, DecisionError
from ..._http.async_driver import LoopOptions
from ..._http.retry import Reply
from ..codec import VendorSpec, bearer_headers
from ..loop import HttpDecider
from ..wire import Decoded, Kind, Wire, envelope_message, json_text, misaligned, state_text
from .media_readers import MEDIA_READERS

#: Longest ``safety_identifier`` OpenAI accepts.
MAX_SAFETY_IDENTIFIER = 128
#: Bounds on one question's ``choices`` and ``levels`` (wire-formats §7).
MAX_CHOICES = 255
MAX_LEVELS = 10
#: A score level shorter than this (one line) is sent as its own ``label``.
MAX_LABEL_CHARS = 64

_CONTEXT = re.compile(
    r"context[_ ]length|maximum context|too many tokens|prompt is too long"
    r"|(too long|exceeds?).{0,40}(context|tokens)",
    re.IGNORECASE,
)


def openai_error(wire: Wire, reply: Reply) -> DecisionError:
    """The error an OpenAI-shaped reply stands for: ``{"error": {message, type, code, param}}``.

    - 401 → ``authentication`` (latches the provider);
    - 403 → ``invalid_request``, *no latch*: OpenAI sends 403 for a region or a
      model the key may not use (``unsupported_country_region_territory``), where
      the key itself is valid and another model or endpoint may still work;
    - 413, or a context-length code or message on a 4xx → ``max_tokens_exceeded``;
    - 429 → ``rate_limit``, retryable except ``insufficient_quota`` (the bill,
      not the rate: retrying cannot help);
    - 408 → ``timeout`` (retryable); 503 → ``overloaded``; other 5xx → ``server``;
    - any other status → ``invalid_request``.
    """
    payload = reply.json()
    error = payload.get("error") if isinstance(payload, Mapping) else None
    error = error if isinstance(error, Mapping) else {}
    code, error_type, param = error.get("code"), error.get("type"), error.get("param")
    message = envelope_message(payload)
    if message:
        if isinstance(code, str) and code:
            message += f" (code {code})"
        if isinstance(param, str) and param:
            message += f" (field: `{param}`)"
    status = reply.status
    retryable: bool | None = None
    if status == 401:
        kind = Kind.AUTHENTICATION
    elif status == 413 or (
        400 <= status < 500
        and status != 429
        and (code == "context_length_exceeded" or _CONTEXT.search(message or ""))
    ):
        kind = Kind.MAX_TOKENS_EXCEEDED
    elif status == 429:
        kind = Kind.RATE_LIMIT
        retryable = "insufficient_quota" not in (code, error_type)
    elif status == 408:
        kind, retryable = Kind.TIMEOUT, True
    elif status == 503:
        kind = Kind.OVERLOADED
    elif status >= 500:
        kind = Kind.SERVER
    else:
        kind = Kind.INVALID_REQUEST
    return wire.refusal(kind, reply, message, retryable=retryable)


def _score_labels(levels: Sequence[JSON], *, vendor: str) -> tuple[list[dict[str, str]], list[str]]:
    """The ``levels`` array of a score question and the legend of its answer.

    When every level is a distinct one-line string shorter than
    :data:`MAX_LABEL_CHARS`, each level *is* its label (``{"label": "calm"}``).
    Otherwise every label is the level's index (``"0"``, ``"1"`` …) and the
    level's text (compact JSON if not a string) is its ``description``; a
    ``None`` level has no description. Never mixed within one question, so an
    index label can never be read as a level's name.
    """
    short = [
        level
        for level in levels
        if isinstance(level, str)
        and level.strip()
        and len(level) <= MAX_LABEL_CHARS
        and "\n" not in level
    ]
    if len(short) == len(levels) and len(set(short)) == len(short):
        return [{"label": level} for level in short], list(short)
    encoded: list[dict[str, str]] = []
    legend: list[str] = []
    for index, level in enumerate(levels):
        entry = {"label": str(index)}
        if level is not None:
            entry["description"] = json_text(level, vendor=vendor, what="score levels")
        encoded.append(entry)
        legend.append(entry.get("description", str(index)))
    return encoded, legend


def encode_decision_question(name: str, question: Question, *, vendor: str) -> dict[str, Any]:
    """One question in the OpenAI Decisions vocabulary (see :class:`OpenAIDecisionsDecider`)."""
    if isinstance(question, BooleanQuestion):
        lines = [question.instructions]
        for label, criterion in (("True", question.true), ("False", question.false)):
            if criterion is not None:
                lines.append(
                    f"{label} means: {json_text(criterion, vendor=vendor, what='criteria')}"
                )
        return {"name": name, "type": "predicate", "instructions": "\n".join(lines)}
    if isinstance(question, ChoiceQuestion):
        if len(question.options) > MAX_CHOICES:
            raise DecisionError(
                Kind.INVALID_REQUEST,
                f"Question {name!r} has {len(question.options)} options; {vendor} accepts at"
                f" most {MAX_CHOICES}.",
            )
        choices: list[dict[str, str]] = []
        for option, description in question.options.items():
            choice = {"value": option}
            if description is not None:
                choice["description"] = json_text(description, vendor=vendor, what="criteria")
            choices.append(choice)
        return {
            "name": name,
            "type": "choice",
            "instructions": question.instructions,
            "choices": choices,
        }
    if len(question.levels) > MAX_LEVELS:
        raise DecisionError(
            Kind.INVALID_REQUEST,
            f"Question {name!r} has {len(question.levels)} levels; {vendor} accepts at most"
            f" {MAX_LEVELS}.",
        )
    levels, _legend = _score_labels(question.levels, vendor=vendor)
    return {
        "name": name,
        "type": "score",
        "instructions": question.instructions,
        "levels": levels,
    }


def _probability_list(raw: object) -> list[tuple[object, object]]:
    if not isinstance(raw, list):
        raise MalformedAnswer(f"expected a list of probabilities, got {raw!r}")
    entries: list[tuple[object, object]] = []
    for entry in raw:
        if not isinstance(entry, Mapping) or "value" not in entry:
            raise MalformedAnswer(f"expected a {{value, probability}} entry, got {entry!r}")
        entries.append((entry["value"], entry.get("probability")))
    return entries


def _choice_answer(raw: Mapping[str, Any], question: ChoiceQuestion) -> Answer:
    converted = dict(raw)
    probabilities = raw.get("probabilities")
    if isinstance(probabilities, list):
        mapping: dict[str, object] = {}
        for value, probability in _probability_list(probabilities):
            if not isinstance(value, str) or value in mapping:
                raise MalformedAnswer(f"expected distinct option names, got {value!r}")
            mapping[value] = probability
        converted["probabilities"] = mapping
    answer = read_answer(converted, question)
    if not isinstance(answer, ChoiceAnswer):  # pragma: no cover - read_answer keeps the type
        raise MalformedAnswer("expected a choice answer")
    stray = [k for k in answer.probabilities if k not in question.options]
    if answer.choice not in question.options or stray:
        raise MalformedAnswer(
            f"the answer names options that were not offered ({answer.choice!r}, {stray!r})"
        )
    return answer


def _score_answer(raw: Mapping[str, Any], question: ScoreQuestion, legend: Sequence[str]) -> Answer:
    converted = dict(raw)
    probabilities = raw.get("probabilities")
    if isinstance(probabilities, list):
        mapping: dict[str, object] = {}
        for value, probability in _probability_list(probabilities):
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 0 <= value < len(question.levels)
                or str(value) in mapping
            ):
                raise MalformedAnswer(f"expected distinct level indices, got {value!r}")
            mapping[str(value)] = probability
        converted["probabilities"] = mapping
        numbers = {
            int(k): float(p)
            for k, p in mapping.items()
            if isinstance(p, int | float) and not isinstance(p, bool)
        }
        if "score" not in converted and len(numbers) == len(mapping):
            # The probability-weighted index, as the System One family reports it.
            converted["score"] = math.fsum(i * p for i, p in numbers.items())
    # The legend says what each level means as the question defines it; wire
    # labels are not trusted (they may be the index labels this provider sent).
    converted["legend"] = {str(i): text for i, text in enumerate(legend)}
    return read_answer(converted, question)


SPEC = VendorSpec(
    name="openai-decisions",
    vendor="OpenAI Decisions",
    default_model="gpt-6-luna",
    default_base_url="https://api.openai.com",
    key_env="OPENAI_API_KEY (explicit selection only)",
    limits=DecisionLimits(
        max_questions=200,
        media=MediaLimits(max_images=128, video=False, max_request_bytes=32 * 1024 * 1024),
        timeout_s=10.0,
        per_question_s=0.05,
    ),
    strip_v1=True,
    media_hint=MEDIA_READERS,
)


@attrs.frozen
class OpenAIDecisionsCodec:
    """OpenAI's decisions format: questions as an ordered array, answers read by position.

    Attributes:
        safety_identifier: sent with every request when set.
    """

    safety_identifier: str | None = None
    spec: VendorSpec = SPEC

    def headers(self, api_key: str) -> dict[str, str]:
        return bearer_headers(api_key)

    def path(self, model: str) -> str:
        return "/v1/decisions"

    def encode(self, request: DecisionRequest, model: str, media: PreparedMedia) -> object:
        text = state_text(request.state, vendor=self.spec.vendor)
        input_: object = text
        if media.images:
            content: list[dict[str, str]] = []
            if text:
                content.append({"type": "input_text", "text": text})
            content.extend({"type": "input_image", "image_url": url} for url in media.images)
            input_ = [{"type": "message", "role": "user", "content": content}]
        body: dict[str, Any] = {
            "model": model,
            "input": input_,
            "questions": [
                encode_decision_question(key, question, vendor=self.spec.vendor)
                for key, question in request.questions.items()
            ],
        }
        if self.safety_identifier is not None:
            body["safety_identifier"] = self.safety_identifier
        return body

    def decode(self, payload: object, request: DecisionRequest, model: str, wire: Wire) -> Decoded:
        raw_answers = payload.get("answers") if isinstance(payload, Mapping) else None
        if not isinstance(raw_answers, list):
            raise DecisionError(
                Kind.SERVER, f"{wire.vendor} returned a response without an answers array."
            )
        assert isinstance(payload, Mapping)
        questions = list(request.questions.items())
        if len(raw_answers) != len(questions):
            raise misaligned(wire, f"{len(raw_answers)} answers for {len(questions)} questions")
        for index, ((key, _question), raw) in enumerate(zip(questions, raw_answers, strict=True)):
            echoed = raw.get("name") if isinstance(raw, Mapping) else None
            if echoed is not None and echoed != key:
                shown = repr(echoed[:40]) if isinstance(echoed, str) else type(echoed).__name__
                raise misaligned(
                    wire,
                    f"answer {index} is named {shown}, but question {key!r} was sent there",
                )
        answers: dict[str, Answer] = {}
        for (key, question), raw in zip(questions, raw_answers, strict=True):
            if isinstance(raw, Mapping) and raw.get("type") == "refusal":
                logger.warning("%s refused to answer question %r.", wire.vendor, key)
                continue
            try:
                answers[key] = self._read(raw, question)
            except MalformedAnswer as exc:
                logger.warning(
                    wire.redact(f"{wire.vendor}: dropped the answer to question {key!r}: {exc}")
                )
        resolved = payload.get("model")
        return Decoded(
            answers,
            read_usage(payload.get("usage")),
            resolved if isinstance(resolved, str) and resolved else model,
        )

    def _read(self, raw: object, question: Question) -> Answer:
        if not isinstance(raw, Mapping):
            raise MalformedAnswer(f"expected an answer object, got {raw!r}")
        if isinstance(question, ChoiceQuestion):
            return _choice_answer(raw, question)
        if isinstance(question, ScoreQuestion):
            _levels, legend = _score_labels(question.levels, vendor=self.spec.vendor)
            return _score_answer(raw, question, legend)
        return read_answer(raw, question)

    def error(self, reply: Reply, wire: Wire) -> DecisionError:
        return openai_error(wire, reply)

    def request_id(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("x-request-id")


class OpenAIDecisionsDecider(HttpDecider):
    """OpenAI Decisions: ``POST {base}/v1/decisions`` (public beta), images included.

    Mapping of the three question types (``wire-formats.md`` §7):

    - **boolean** → ``{"name", "type": "predicate", "instructions"}``. A predicate has
      no outcome descriptions, so the criteria are folded into the instructions
      as text: ``"<instructions>\\nTrue means: <true>\\nFalse means: <false>"``; a
      line is left out when its criterion is ``None``; a non-string criterion is
      compact JSON.
    - **choice** → ``choices: [{"value": option, "description"?}]`` in option order;
      a ``None`` description is left out, a non-string one is compact JSON.
    - **score** → ``levels``: when every level is a distinct one-line string of at
      most 64 characters, ``[{"label": level}]``; otherwise
      ``[{"label": "0", "description": level}, …]`` (index labels, the level's
      text as description, none for a ``None`` level). The answer's ``legend``
      is built from the question (the label, or the level's text), not from the
      labels echoed on the wire.

    ``input`` is the state as a string (compact JSON when the state is not one);
    with images it is one user message whose content is the state's
    ``input_text`` followed by one ``input_image`` per image (a ``data:`` URL).

    Answers are read **by position**, and only from a reply that aligns with
    certainty: exactly one answer per question, each echoed ``name`` (when
    present) equal to the name sent at that position. A reply with more or
    fewer answers, or a name that differs, is no reply (``server``; nothing of
    it is used). ``{"type": "refusal"}`` leaves that question unanswered
    (logged), as does a malformed answer. Choice and score ``probabilities``
    arrive as lists and are turned into ``{option: p}`` / ``{"0": p}``; a choice
    naming an option that was not offered is dropped.

    Errors: see :func:`openai_error` (401 latches, 403 does not).

    Limits: 200 questions (OpenRouter's listing), 128 images, no video. The
    32 MiB body ceiling, the 10 s (+ 50 ms per question) default timeout and
    the absence of a local state window are assumptions: OpenAI publishes none.

    Args:
        api_key: ``OPENAI_API_KEY``; used only when this provider is chosen
            explicitly (a plain OpenAI key never starts paying for decisions).
        base_url: ``https://api.openai.com``; a trailing ``/v1`` is dropped.
        model: ``gpt-6-luna`` by default.
        safety_identifier: a stable, privacy-preserving id of the end user
            (OpenAI suggests a hash), 1–128 characters; sent with every request.
    """

    name = SPEC.name
    vendor = SPEC.vendor
    limits = SPEC.limits

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None = None,
        model: str | None = None,
        safety_identifier: str | None = None,
        **options: Unpack[LoopOptions],
    ) -> None:
        if safety_identifier is not None and (
            not isinstance(safety_identifier, str)
            or not safety_identifier.strip()
            or len(safety_identifier) > MAX_SAFETY_IDENTIFIER
            or not safety_identifier.isprintable()
        ):
            raise ConfigError(
                f"safety_identifier must be 1–{MAX_SAFETY_IDENTIFIER} printable characters"
            )
        self.safety_identifier = safety_identifier
        super().__init__(
            OpenAIDecisionsCodec(safety_identifier),
            api_key=api_key,
            base_url=base_url,
            model=model,
            **options,
        )

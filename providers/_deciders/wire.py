"""What decision codecs share: error kinds by status, envelopes, the System One question
shape, and reading answers under the alignment rule.

Plain functions over values: none of them holds a client or reads a decider; what a codec
needs to word an error (vendor name, redactor, request-id reader) comes in a :class:`Wire`.

**Alignment rule.** A reply whose answers cannot be matched to the questions
asked with certainty (a different count, or an id or echoed name that differs
from the one sent at that position) is no reply: the call fails with
``server`` and no answer of it is used, so nothing is decided on an answer
that may belong to another question.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..._core.decide.types import (
    JSON,
    Answer,
    BooleanQuestion,
    ChoiceQuestion,
    Question,
    Usage,
)
from ..._core.decide.wire import Misaligned, read_answers
from ..._core.errors import DecisionError, DecisionErrorKind
from .._http.retry import Redactor, Reply
from .._http.rules import RETRYABLE_STATUSES

Kind = DecisionErrorKind

#: Kind of an HTTP status when the vendor's envelope says nothing more specific: the
#: table most System One vendors share (529 is not in it: a vendor that reads 529 as
#: ``overloaded`` passes its own table).
_STATUS_KINDS: dict[int, Kind] = {
    401: Kind.AUTHENTICATION,
    403: Kind.AUTHENTICATION,
    413: Kind.MAX_TOKENS_EXCEEDED,
    429: Kind.RATE_LIMIT,
    503: Kind.OVERLOADED,
}
#: Kinds worth another attempt; 408 and 409 are retried too, whatever their kind.
_RETRYABLE = frozenset({Kind.RATE_LIMIT, Kind.OVERLOADED, Kind.SERVER, Kind.TIMEOUT})
#: Request timeout and conflict: retried by every SDK, whatever kind a vendor gives them.
_ALWAYS_RETRIED = RETRYABLE_STATUSES - {429}


def status_kind(status: int, table: Mapping[int, Kind] = _STATUS_KINDS) -> Kind:
    """The error kind of ``status``: the table, then ``server`` for 5xx, else ``invalid_request``."""
    if status in table:
        return table[status]
    return Kind.SERVER if status >= 500 else Kind.INVALID_REQUEST


def envelope_message(payload: object) -> str | None:
    """The message in the common error envelopes (``{"error": {"message"}}``,
    ``{"error": "…"}``, ``{"detail": "…"}``, ``{"message": "…"}``)."""
    if not isinstance(payload, Mapping):
        return None
    error = payload.get("error")
    if isinstance(error, Mapping) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    detail = payload.get("detail")
    if isinstance(detail, str):
        return detail
    if isinstance(detail, Mapping) and isinstance(detail.get("message"), str):
        return str(detail["message"])
    message = payload.get("message")
    return message if isinstance(message, str) else None


@attrs.frozen
class Decoded:
    """A successful reply, read: answers under the request's ids, usage and model."""

    answers: Mapping[str, Answer]
    usage: Usage
    model: str


@attrs.frozen
class Wire:
    """What a vendor's codec needs from its decider to word an error: no client, no loop.

    Attributes:
        vendor: the human name in messages.
        redact: hides the decider's key and the generic credential patterns.
        request_id: reads the vendor's request id from response headers.
    """

    vendor: str
    redact: Redactor
    request_id: Callable[[Mapping[str, str]], str | None]

    def refusal(
        self, kind: Kind, reply: Reply, message: str | None, *, retryable: bool | None = None
    ) -> DecisionError:
        """The error of a non-2xx ``reply``: ``kind``, the vendor's ``message`` (or an
        excerpt of the body), retryable by kind and status unless ``retryable`` says."""
        text = message.strip() if message and message.strip() else reply.excerpt()
        if retryable is None:
            retryable = kind in _RETRYABLE or reply.status in _ALWAYS_RETRIED
        return DecisionError(
            kind,
            self.redact(f"{self.vendor} returned HTTP {reply.status}: {text}"),
            status=reply.status,
            request_id=self.request_id(reply.headers),
            retryable=retryable,
        )


def encode_question(question: Question, boolean_type: str) -> dict[str, Any]:
    """A question in the System One shape, booleans named ``boolean_type``."""
    if isinstance(question, BooleanQuestion):
        encoded: dict[str, Any] = {"type": boolean_type, "instructions": question.instructions}
        criteria = {
            k: v for k, v in (("true", question.true), ("false", question.false)) if v is not None
        }
        if criteria:
            encoded["criteria"] = criteria
        return encoded
    if isinstance(question, ChoiceQuestion):
        return {
            "type": "choice",
            "instructions": question.instructions,
            "criteria": dict(question.options),
        }
    return {
        "type": "score",
        "instructions": question.instructions,
        "criteria": list(question.levels),
    }


#: Image types the System One vendors with images read.
PNG_JPEG_WEBP = frozenset({"image/png", "image/jpeg", "image/webp"})


def read_answer_map(
    wire: Wire,
    raw_answers: Mapping[str, object],
    questions: Mapping[str, Question],
    *,
    confidences: Mapping[str, object] | None = None,
) -> dict[str, Answer]:
    """The answers of an id-keyed reply, under the alignment rule.

    Raises:
        DecisionError: ``server`` when the reply carries an answer under an id
            that was not asked: it cannot be matched to the questions with
            certainty, so none of it is used.
    """
    try:
        return read_answers(
            raw_answers,
            questions,
            vendor=wire.vendor,
            confidences=confidences,
            redact=wire.redact,
        )
    except Misaligned as exc:
        raise misaligned(wire, str(exc)) from None


def misaligned(wire: Wire, detail: str) -> DecisionError:
    """The error of a reply that cannot be matched to its questions with certainty."""
    return DecisionError(
        Kind.SERVER,
        wire.redact(
            f"{wire.vendor} returned answers that cannot be matched to the questions"
            f" asked ({detail}); none of them is used."
        ),
    )


def json_text(value: JSON, *, vendor: str, what: str) -> str:
    """``value`` as text: a string as is, anything else as compact JSON.

    Raises:
        DecisionError: ``invalid_request`` when ``value`` is not JSON.
    """
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise DecisionError(
            Kind.INVALID_REQUEST,
            f"{vendor} reads {what} as text; it is not JSON-serialisable ({type(exc).__name__}).",
        ) from None


def state_text(state: JSON, *, vendor: str) -> str:
    """The state as the text a text-only endpoint reads (compact JSON unless a string)."""
    return json_text(state, vendor=vendor, what="the state")


def litellm_message(message: str | None) -> str | None:
    """A LiteLLM proxy message without the key it echoes (``Received API Key = …``)."""
    if message is None:
        return None
    return message.split(" Received API Key", 1)[0].strip()


def dig(value: object, *keys: str) -> object:
    """``value[k1][k2]…``, or ``None`` as soon as a level is not a mapping."""
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value

"""The protocol a decision vendor implements, and the System One defaults it composes from.

A vendor is a codec, composed into the decision loop (:class:`~.loop.HttpDecider`) the way httpx
composes a transport into a client: the loop owns the local checks, the deadline, the retries
and the latch; the codec only knows the vendor's wire format.

- :class:`VendorSpec`: who the vendor is (names, default model and endpoint, limits);
- :class:`DecisionCodec`: build the request (:meth:`~DecisionCodec.encode`), read a 2xx reply
  (:meth:`~DecisionCodec.decode`), map a refusal to an error (:meth:`~DecisionCodec.error`);
- :class:`QuestionCodec`: the same for endpoints that answer one question per call
  (:class:`~.per_question.PerQuestionDecider`).

Codecs hold no client and no loop; what they need to word an error comes in a
:class:`~.wire.Wire`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from ..._core.decide.limits import DecisionLimits
from ..._core.decide.media import PreparedMedia
from ..._core.decide.types import Answer, DecisionRequest, Question, Usage
from ..._core.decide.wire import read_usage
from ..._core.errors import DecisionError
from .._http.retry import Reply
from .wire import (
    Decoded,
    Kind,
    Wire,
    encode_question,
    envelope_message,
    read_answer_map,
    status_kind,
)


@attrs.frozen(kw_only=True)
class VendorSpec:
    """Who a decision vendor is.

    Attributes:
        name: canonical provider name, used in results and events.
        vendor: human name in messages.
        default_model: the model asked when neither the request nor the decider names one.
        key_env: where the key comes from, for the missing-key message.
        limits: what the vendor accepts, checked before any network call.
        default_base_url: the public endpoint, or ``None`` when the caller must name one.
        requires_key: whether a call without a key is refused locally (local servers may
            need none).
        strip_v1: the endpoint paths carry ``/v1`` already, so a base URL ending in ``/v1``
            loses it.
        media_hint: the providers that do read media, named when this one refuses media.
    """

    name: str
    vendor: str
    default_model: str
    key_env: str
    limits: DecisionLimits = attrs.field(factory=DecisionLimits)
    default_base_url: str | None = None
    requires_key: bool = True
    strip_v1: bool = False
    media_hint: str = ""

    def base_url(self, url: str) -> str:
        """``url`` as the endpoint paths expect it."""
        return url.rstrip("/").removesuffix("/v1") if self.strip_v1 else url


class VendorCodec(Protocol):
    """What both decision loops need from a vendor: who it is, its headers and refusals."""

    @property
    def spec(self) -> VendorSpec:
        """Who the vendor is."""
        ...

    def headers(self, api_key: str) -> dict[str, str]:
        """The headers of every request (credentials included); ``api_key`` may be empty."""
        ...

    def error(self, reply: Reply, wire: Wire) -> DecisionError:
        """The error a non-2xx reply stands for: kind from the vendor's table, the vendor's
        message, ``retryable`` as its reference says (``wire.refusal`` builds it)."""
        ...

    def request_id(self, headers: Mapping[str, str]) -> str | None:
        """The vendor's request id in response headers, if any."""
        ...


class DecisionCodec(VendorCodec, Protocol):
    """A vendor that answers every question of a request in one call."""

    def path(self, model: str) -> str:
        """The endpoint, relative to the base URL."""
        ...

    def encode(self, request: DecisionRequest, model: str, media: PreparedMedia) -> object:
        """The JSON body; raise ``invalid_request`` for what the vendor cannot take."""
        ...

    def decode(self, payload: object, request: DecisionRequest, model: str, wire: Wire) -> Decoded:
        """The answers of a 2xx reply, under the request's ids and the alignment rule."""
        ...


@attrs.frozen
class QuestionReply:
    """One call's reading: the answer (``None`` when unanswered), usage and model."""

    answer: Answer | None
    usage: Usage = attrs.field(factory=Usage)
    model: str | None = None


class QuestionCodec(VendorCodec, Protocol):
    """A vendor whose endpoint answers one question per call."""

    def path(self, model: str) -> str:
        """The endpoint, relative to the base URL."""
        ...

    def model_for(self, request: DecisionRequest, default: str) -> str:
        """The model a request asks (``default`` is the decider's)."""
        ...

    def check_question(self, key: str, question: Question) -> None:
        """Raise ``invalid_request`` for a question this endpoint cannot answer."""
        ...

    def question_body(self, text: str, question: Question, model: str) -> object:
        """The JSON body of one question's call, the state as ``text``."""
        ...

    def read_reply(
        self, payload: object, key: str, question: Question, model: str, wire: Wire
    ) -> QuestionReply:
        """One call's 2xx reply, read."""
        ...


# -- the System One defaults, composed by the vendors that share the format ------------------


def bearer_headers(api_key: str) -> dict[str, str]:
    """``Authorization: Bearer <key>``, or nothing without a key."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def system_one_body(request: DecisionRequest, model: str, media: PreparedMedia) -> dict[str, Any]:
    """The request body in the System One (``noul``) vocabulary."""
    body: dict[str, Any] = {
        "model": model,
        "state": request.state,
        "questions": {k: encode_question(q, "noul") for k, q in request.questions.items()},
    }
    if media.images:
        body["images"] = list(media.images)
    if media.video:
        body["video"] = media.video
    return body


def read_system_one(payload: object, request: DecisionRequest, model: str, wire: Wire) -> Decoded:
    """Read a System One reply: ``{"model", "answers": {id: …}, "usage"}``."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get("answers"), Mapping):
        raise DecisionError(
            Kind.SERVER, f"{wire.vendor} returned a response without an answers map."
        )
    answers = read_answer_map(wire, payload["answers"], request.questions)
    resolved = payload.get("model")
    return Decoded(
        answers,
        read_usage(payload.get("usage")),
        resolved if isinstance(resolved, str) else model,
    )


def status_error(reply: Reply, wire: Wire) -> DecisionError:
    """The error of a refusal read by status alone (kind from the shared table, message from
    the common envelopes)."""
    return wire.refusal(status_kind(reply.status), reply, envelope_message(reply.json()))

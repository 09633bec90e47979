"""The decision codec base: what every HTTP decision provider shares on the one loop.

One call: local checks (key, auth latch, limits, JSON, media, body size)
before any network traffic, then the shared :class:`~._loop.ProviderLoop`
(retries, one deadline, ``Retry-After``, the latch). Vendors override the
codec hooks; each keeps its own status → kind table, since the vendors'
references disagree (529 is ``overloaded`` for TypeSafe only).

**Alignment rule.** A reply whose answers cannot be matched to the questions
asked with certainty (a different count, or an id or echoed name that differs
from the one sent at that position) is no reply: the call fails with
``server`` and no answer of it is used, so nothing is decided on an answer
that may belong to another question.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, ClassVar, Unpack

import attrs
import trio

from ..._core.decision import (
    JSON,
    Answer,
    BooleanQuestion,
    ChoiceQuestion,
    DecisionRequest,
    DecisionResult,
    Question,
    Usage,
)
from ..._core.decision_limits import DecisionLimits, check_request
from ..._core.decision_wire import Misaligned, read_answers, read_usage
from ..._core.errors import ConfigError, DecisionError, DecisionErrorKind, ProviderError
from ..._core.media import PreparedMedia, prepare_media
from .._http.async_driver import LoopOptions, ProviderLoop
from .._http.rules import RETRYABLE_STATUSES, RetryPolicy
from .._http.transport import Reply

#: One retry; the first waits 0.25–0.5 s (NeuroLink's ``2^n·250 + rand·250`` ms).
DECISION_RETRY = RetryPolicy(retries=1, backoff_s=0.5, max_backoff_s=4.0, jitter=0.5)

Kind = DecisionErrorKind

#: Kind of an HTTP status when the vendor's envelope says nothing more specific
#: (Laya's table, which XOR, Perplexity and Clef share for these statuses; 529 is
#: not in it: only TypeSafe's reference maps 529 to ``overloaded``).
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


class HttpDecider:
    """Base of every HTTP decision provider.

    Subclasses set the class attributes and override the codec hooks
    (``_path``, ``_headers``, ``_encode``, ``_decode``, ``_error``,
    ``_request_id``); the loop in :meth:`decide` is shared.

    Args:
        api_key: the vendor key; missing or blank fails each call as
            ``authentication`` without a network call.
        base_url: https, or http on loopback; never echoed in messages.
        model: the model asked when a request does not name one.
        options: the loop options (:class:`~._loop.LoopOptions`): ``timeout_s``
            (default budget of one call, retries included; the provider's own
            default, which may grow with the request, otherwise), ``retry``,
            ``transport`` and ``rng``.

    Raises:
        ConfigError: a bad base URL, or a header value that is not printable ASCII.
    """

    #: Canonical provider name, used in results and events.
    name: str
    #: Human name in messages.
    vendor: ClassVar[str]
    default_model: ClassVar[str]
    default_base_url: ClassVar[str | None] = None
    #: Where the key comes from, for the missing-key message.
    key_env: ClassVar[str]
    limits: DecisionLimits = DecisionLimits()
    #: Local servers (the logprob decider's) may need no key.
    requires_key: ClassVar[bool] = True
    #: The endpoint paths carry ``/v1`` already, so a base URL ending in ``/v1`` loses it.
    strip_v1: ClassVar[bool] = False
    #: Media types accepted by some provider, for the "does not accept media" message.
    media_hint: ClassVar[str] = "XOR, Perplexity Decisions, Cloudflare Clef, OpenAI Decisions"

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None = None,
        model: str | None = None,
        **options: Unpack[LoopOptions],
    ) -> None:
        self._api_key = (api_key or "").strip()
        url = base_url or self.default_base_url
        if not url:
            raise ConfigError(f"{self.vendor} needs base_url (no public default endpoint)")
        self.model = model or self.default_model
        self._timeout_s = options.get("timeout_s")
        self._loop = ProviderLoop.connect(
            self._normalise_base_url(url),
            self,
            headers=self._headers(),
            secret=self._api_key,
            options=options,
            retry=DECISION_RETRY,
        )
        self._client = self._loop.client

    # -- codec hooks -------------------------------------------------------

    @classmethod
    def _normalise_base_url(cls, url: str) -> str:
        if cls.strip_v1:
            url = url.rstrip("/")
            return url.removesuffix("/v1")
        return url

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _path(self, model: str) -> str:
        raise NotImplementedError

    def _encode(self, request: DecisionRequest, model: str, media: PreparedMedia) -> object:
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

    def _decode(self, payload: object, request: DecisionRequest, model: str) -> Decoded:
        """Read a System One reply: ``{"model", "answers": {id: …}, "usage"}``."""
        if not isinstance(payload, Mapping) or not isinstance(payload.get("answers"), Mapping):
            raise DecisionError(
                Kind.SERVER, f"{self.vendor} returned a response without an answers map."
            )
        answers = read_answer_map(self, payload["answers"], request.questions)
        resolved = payload.get("model")
        return Decoded(
            answers,
            read_usage(payload.get("usage")),
            resolved if isinstance(resolved, str) else model,
        )

    def _error(self, reply: Reply) -> DecisionError:
        """The error a non-2xx reply stands for (kind from the status, message from the body)."""
        kind = status_kind(reply.status)
        return self._make_error(kind, reply, envelope_message(reply.json()))

    def _request_id(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("x-request-id")

    # -- the loop ----------------------------------------------------------

    def _make_error(
        self, kind: Kind, reply: Reply, message: str | None, *, retryable: bool | None = None
    ) -> DecisionError:
        text = message.strip() if message and message.strip() else reply.excerpt()
        if retryable is None:
            retryable = kind in _RETRYABLE or reply.status in _ALWAYS_RETRIED
        return DecisionError(
            kind,
            self._client.redact(f"{self.vendor} returned HTTP {reply.status}: {text}"),
            status=reply.status,
            request_id=self._request_id(reply.headers),
            retryable=retryable,
        )

    # -- the loop's codec (LoopCodec) ---------------------------------------

    def refused(self, reply: Reply) -> ProviderError:
        return self._error(reply)

    def is_auth_failure(self, error: ProviderError) -> bool:
        return isinstance(error, DecisionError) and error.kind is Kind.AUTHENTICATION

    def latched(self, cause: ProviderError) -> ProviderError:
        return DecisionError(
            Kind.AUTHENTICATION,
            f"{self.vendor} rejected this API key earlier; not retrying. Fix the key and"
            " construct a new provider.",
            status=cause.status,
        )

    def unreachable(self, message: str) -> ProviderError:
        return DecisionError(Kind.NETWORK, message, retryable=True)

    def too_late(self, budget_s: float, last: ProviderError | None) -> ProviderError:
        after = f" (last failure: {last})" if last is not None else ""
        return DecisionError(
            Kind.TIMEOUT,
            self._client.redact(
                f"{self.vendor} did not answer within the {budget_s:.3g} s deadline.{after}"
            ),
            retryable=True,
        )

    def given_up(self, error: ProviderError, reason: str) -> ProviderError:
        assert isinstance(error, DecisionError)  # refused/unreachable make only these
        return DecisionError(
            error.kind,
            f"{error}; {reason}",
            status=error.status,
            request_id=error.request_id,
            retryable=True,
        )

    def _prepare(self, request: DecisionRequest) -> PreparedMedia:
        return prepare_media(
            request.images,
            request.video,
            self.limits.media,
            vendor=self.vendor,
            accepted=self.media_hint,
        )

    async def aclose(self) -> None:
        """Release the connection pool."""
        await self._client.aclose()

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        """Send ``request`` as one call on the shared loop.

        Args:
            request: the state, questions and media; ``timeout_s`` bounds the call.

        Returns:
            The answers under the request's ids; a malformed answer is missing
            (and logged), not fatal.

        Raises:
            DecisionError: with ``kind`` and ``retryable``. Over-limit, keyless,
                latched and malformed requests (a state that is not JSON
                included) fail as ``invalid_request``, ``max_tokens_exceeded`` or
                ``authentication`` before any network call; a reply that cannot
                be matched to the questions with certainty is ``server``.

        **Cancellation:** one deadline (``request.timeout_s``, the provider's
        ``timeout_s``, else the limits' default) covers every attempt and wait;
        a caller's cancel scope still cancels it.

        **Fail-open:** none here: this is the strict call that ``try_decide``
        and routing build on.
        """
        self._check_credentials()
        model = request.model or self.model
        state_tokens = check_request(request, self.limits, vendor=self.vendor, model=model)
        media = self._prepare(request)
        body = self._encode(request, model, media)
        self._check_size(body)
        timeout = self._budget_s(request, state_tokens)
        started = trio.current_time()
        reply = await self._send(self._path(model), body, started + timeout, timeout)
        decoded = self._decode(self._payload(reply), request, model)
        return DecisionResult(
            model=decoded.model,
            provider=self.name,
            answers=decoded.answers,
            usage=decoded.usage,
            request_id=self._request_id(reply.headers),
            latency_ms=(trio.current_time() - started) * 1000.0,
            upstream_ms=_milliseconds(reply.headers.get("x-envoy-upstream-service-time")),
            media_bytes=media.media_bytes,
        )

    def _check_credentials(self) -> None:
        """Refuse, before any network call, when there is no key or the key was rejected."""
        if self.requires_key and not self._api_key:
            raise DecisionError(
                Kind.AUTHENTICATION,
                f"{self.vendor} has no API key. Set {self.key_env} or pass api_key=.",
            )
        self._loop.check_latch()

    def _budget_s(self, request: DecisionRequest, state_tokens: int) -> float:
        """The call's deadline: the request's, the provider's, or the limits' default."""
        return (
            request.timeout_s
            or self._timeout_s
            or self.limits.default_timeout_s(len(request.questions), state_tokens)
        )

    def _payload(self, reply: Reply) -> object:
        """The decoded JSON of a 2xx reply.

        Raises:
            DecisionError: ``server``, when the body is not JSON.
        """
        payload = reply.json()
        if payload is None:
            raise DecisionError(
                Kind.SERVER,
                self._client.redact(
                    f"{self.vendor} answered HTTP {reply.status} with a body that is not JSON:"
                    f" {reply.excerpt()}"
                ),
                status=reply.status,
                request_id=self._request_id(reply.headers),
            )
        return payload

    def _check_size(self, body: object) -> None:
        """Refuse a body that is not JSON or over the media limits, before any network call."""
        try:
            text = json.dumps(body, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError) as exc:
            # The state is the caller's: NaN, infinity or a non-JSON object is their mistake.
            raise DecisionError(
                Kind.INVALID_REQUEST,
                f"{self.vendor} needs the request as JSON; it is not ({type(exc).__name__}:"
                f" {exc}). Replace NaN and infinite numbers and non-JSON values in the state.",
            ) from None
        media = self.limits.media
        if media is None:
            return
        size = len(text.encode())
        if size > media.max_request_bytes:
            raise DecisionError(
                Kind.INVALID_REQUEST,
                f"The request is {size} bytes; {self.vendor} accepts at most"
                f" {media.max_request_bytes}. Send fewer or smaller images.",
            )

    async def _send(self, path: str, body: object, deadline: float, budget_s: float) -> Reply:
        """One call on the shared loop (retries, deadline, latch)."""
        reply = await self._loop.send(path, body, deadline=deadline, budget_s=budget_s)
        return reply


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


def _milliseconds(value: str | None) -> float | None:
    try:
        number = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


#: Image types the System One vendors with images read.
PNG_JPEG_WEBP = frozenset({"image/png", "image/jpeg", "image/webp"})


def read_answer_map(
    decider: HttpDecider,
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
            vendor=decider.vendor,
            confidences=confidences,
            redact=decider._client.redact,
        )
    except Misaligned as exc:
        raise misaligned(decider, str(exc)) from None


def misaligned(decider: HttpDecider, detail: str) -> DecisionError:
    """The error of a reply that cannot be matched to its questions with certainty."""
    return DecisionError(
        Kind.SERVER,
        decider._client.redact(
            f"{decider.vendor} returned answers that cannot be matched to the questions"
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

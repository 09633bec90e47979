"""The loop every HTTP decision provider shares; vendors are small codecs on it.

One call: local checks (key, auth latch, limits, media, body size) before any
network traffic, then at most ``retry.retries + 1`` attempts inside one
deadline. A ``Retry-After`` is honoured only when it fits what is left of the
deadline; otherwise the call fails at once, so a caller never waits for an
answer that would come too late.
"""

from __future__ import annotations

import functools
import json
import math
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import attrs
import trio

from .._core.decision import (
    Answer,
    BooleanQuestion,
    ChoiceQuestion,
    DecisionRequest,
    DecisionResult,
    Question,
    Usage,
)
from .._core.decision_limits import DecisionLimits, check_request
from .._core.decision_wire import read_answers, read_usage
from .._core.errors import ConfigError, DecisionError, DecisionErrorKind, ProviderError
from .._core.media import PreparedMedia, prepare_media
from ._http import (
    AsyncJsonClient,
    AsyncTransport,
    Reply,
    RetryPolicy,
    TransportError,
    parse_retry_after,
    retry_attempts,
)

#: One retry; the first waits 0.25–0.5 s (NeuroLink's ``2^n·250 + rand·250`` ms).
DECISION_RETRY = RetryPolicy(retries=1, backoff_s=0.5, max_backoff_s=4.0, jitter=0.5)

Kind = DecisionErrorKind

#: Kind of an HTTP status when the vendor's envelope says nothing more specific.
_STATUS_KINDS: dict[int, Kind] = {
    401: Kind.AUTHENTICATION,
    403: Kind.AUTHENTICATION,
    413: Kind.MAX_TOKENS_EXCEEDED,
    429: Kind.RATE_LIMIT,
    503: Kind.OVERLOADED,
    529: Kind.OVERLOADED,
}
_RETRYABLE = frozenset({Kind.RATE_LIMIT, Kind.OVERLOADED, Kind.SERVER})


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
        timeout_s: default budget of one call, retries included; the
            provider's own default (which may grow with the request) otherwise.
        retry: attempts after the first and their back-off.
        transport: an httpx async transport instead of the network (tests).
        rng: jitter source.

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
        timeout_s: float | None = None,
        retry: RetryPolicy = DECISION_RETRY,
        transport: AsyncTransport | None = None,
        rng: Callable[[], float] | None = None,
    ) -> None:
        self._api_key = (api_key or "").strip()
        url = base_url or self.default_base_url
        if not url:
            raise ConfigError(f"{self.vendor} needs base_url (no public default endpoint)")
        self.model = model or self.default_model
        self._timeout_s = timeout_s
        self._retry = retry
        self._rng = rng or random.random
        self._auth_failed = False
        self._client = AsyncJsonClient(
            self._normalise_base_url(url),
            headers=self._headers(),
            secrets=[self._api_key],
            transport=transport,
        )

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
        answers = read_answers(
            payload["answers"], request.questions, vendor=self.vendor, redact=self._client.redact
        )
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
        return DecisionError(
            kind,
            self._client.redact(f"{self.vendor} returned HTTP {reply.status}: {text}"),
            status=reply.status,
            request_id=self._request_id(reply.headers),
            retryable=kind in _RETRYABLE if retryable is None else retryable,
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
        """Send ``request`` as one call.

        Raises:
            DecisionError: with ``kind`` and ``retryable``; over-limit, keyless,
                latched and malformed requests fail before any network call.
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
        if self._auth_failed:
            raise DecisionError(
                Kind.AUTHENTICATION,
                f"{self.vendor} rejected this API key earlier; not retrying. Fix the key and"
                " construct a new provider.",
            )

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
        media = self.limits.media
        if media is None:
            return
        size = len(json.dumps(body, separators=(",", ":")).encode())
        if size > media.max_request_bytes:
            raise DecisionError(
                Kind.INVALID_REQUEST,
                f"The request is {size} bytes; {self.vendor} accepts at most"
                f" {media.max_request_bytes}. Send fewer or smaller images.",
            )

    async def _send(self, path: str, body: object, deadline: float, budget_s: float) -> Reply:
        def give_up(error: ProviderError, reason: str) -> DecisionError:
            assert isinstance(error, DecisionError)
            return DecisionError(
                error.kind,
                f"{error}; {reason}",
                status=error.status,
                request_id=error.request_id,
                retryable=True,
            )

        return await retry_attempts(
            functools.partial(self._attempt, path, body, deadline, budget_s),
            policy=self._retry,
            deadline=deadline,
            rng=self._rng,
            give_up=give_up,
        )

    async def _attempt(
        self, path: str, body: object, deadline: float, budget_s: float
    ) -> Reply | tuple[DecisionError, float | None]:
        """One request: the 2xx reply, or the error with the server's ``Retry-After``."""
        with trio.move_on_after(max(0.0, deadline - trio.current_time())):
            try:
                reply = await self._client.post(path, body)
            except TransportError as exc:
                return DecisionError(Kind.NETWORK, str(exc), retryable=True), None
            if 200 <= reply.status <= 299:
                return reply
            error = self._error(reply)
            if error.kind is Kind.AUTHENTICATION:
                self._auth_failed = True
            return error, parse_retry_after(reply.headers.get("retry-after"), time.time())
        return DecisionError(
            Kind.TIMEOUT,
            f"{self.vendor} did not answer within the {budget_s:.3g} s deadline.",
            retryable=True,
        ), None


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

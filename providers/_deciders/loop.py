"""The decision loop: a vendor's codec composed with the one provider loop.

One call: local checks (key, auth latch, limits, JSON, media, body size) before any network
traffic, then the shared :class:`~.._http.async_driver.ProviderLoop` (retries, one deadline,
``Retry-After``, the latch). The vendor is a :class:`~.codec.DecisionCodec` (path, headers,
body, reading a reply, reading a refusal); each keeps its own status → kind table, since the
vendors' references disagree. The alignment rule is in :mod:`.wire`.
"""

from __future__ import annotations

import json
import math
from typing import Unpack

import trio

from ..._core.decide.limits import DecisionLimits, check_request
from ..._core.decide.media import PreparedMedia, prepare_media
from ..._core.decide.types import DecisionRequest, DecisionResult
from ..._core.errors import ConfigError, DecisionError, ProviderError
from .._http.async_driver import LoopOptions, ProviderLoop
from .._http.retry import Redactor, Reply, TransportError
from .._http.rules import RetryPolicy, clean_api_key
from .codec import DecisionCodec, VendorCodec, VendorSpec
from .wire import Kind, Wire

#: One retry; the first waits 0.25–0.5 s (NeuroLink's ``2^n·250 + rand·250`` ms).
DECISION_RETRY = RetryPolicy(retries=1, backoff_s=0.5, max_backoff_s=4.0, jitter=0.5)


class DecisionErrors:
    """The provider loop's reading of a decider's failures (an
    :class:`~.._http.retry.ErrorCodec`): refusals by the vendor's codec, the rest the same for
    every vendor."""

    def __init__(self, codec: VendorCodec, wire: Wire) -> None:
        self._codec = codec
        self._wire = wire

    def refused(self, reply: Reply) -> ProviderError:
        return self._codec.error(reply, self._wire)

    def is_auth_failure(self, error: ProviderError) -> bool:
        return isinstance(error, DecisionError) and error.kind is Kind.AUTHENTICATION

    def latched(self, cause: ProviderError) -> ProviderError:
        return DecisionError(
            Kind.AUTHENTICATION,
            f"{self._wire.vendor} rejected this API key earlier; not retrying. Fix the key and"
            " construct a new provider.",
            status=cause.status,
        )

    def unreachable(self, failure: TransportError) -> ProviderError:
        return DecisionError(Kind.NETWORK, str(failure), retryable=True)

    def too_late(self, budget_s: float, last: ProviderError | None) -> ProviderError:
        after = f" (last failure: {last})" if last is not None else ""
        return DecisionError(
            Kind.TIMEOUT,
            self._wire.redact(
                f"{self._wire.vendor} did not answer within the {budget_s:.3g} s deadline.{after}"
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


class HttpDecider:
    """An HTTP decision provider: one vendor's codec on the shared loop.

    Each vendor class (``LayaDecider``, ``XorDecider`` …) builds its codec and passes it here;
    a new vendor needs only a codec (see :mod:`.codec`).

    Args:
        codec: the vendor's wire format and its :class:`~.codec.VendorSpec`.
        api_key: the vendor key; missing or blank fails each call as
            ``authentication`` without a network call (unless the vendor needs none).
        base_url: https, or http on loopback; never echoed in messages.
        model: the model asked when a request does not name one.
        options: the loop options (:class:`~.._http.async_driver.LoopOptions`): ``timeout_s``
            (default budget of one call, retries included; the provider's own
            default, which may grow with the request, otherwise), ``retry``,
            ``transport`` and ``rng``.

    Raises:
        ConfigError: a bad base URL, a key with whitespace inside, or a header value
            that is not printable ASCII.
    """

    #: Canonical provider name, used in results and events.
    name: str
    #: Human name in messages.
    vendor: str
    limits: DecisionLimits
    #: The one-call codec (a per-question decider has a question codec instead).
    _calls: DecisionCodec

    def __init__(
        self,
        codec: DecisionCodec,
        *,
        api_key: str | None,
        base_url: str | None = None,
        model: str | None = None,
        **options: Unpack[LoopOptions],
    ) -> None:
        self._calls = codec
        self._connect(codec, api_key, base_url, model, options)

    def _connect(
        self,
        codec: VendorCodec,
        api_key: str | None,
        base_url: str | None,
        model: str | None,
        options: LoopOptions,
    ) -> None:
        """What every decider sets up: names, key, wire, and the loop over a new client."""
        spec: VendorSpec = codec.spec
        self.name, self.vendor, self.limits = spec.name, spec.vendor, spec.limits
        self._spec = spec
        self._api_key = clean_api_key(api_key)
        url = base_url or spec.default_base_url
        if not url:
            raise ConfigError(f"{spec.vendor} needs base_url (no public default endpoint)")
        self.model = model or spec.default_model
        self._timeout_s = options.get("timeout_s")
        headers = codec.headers(self._api_key)
        #: What the codec words its errors with.
        self.wire = Wire(
            spec.vendor, Redactor.for_headers(headers, [self._api_key]), codec.request_id
        )
        self._loop = ProviderLoop.connect(
            spec.base_url(url),
            DecisionErrors(codec, self.wire),
            headers=headers,
            redactor=self.wire.redact,
            options=options,
            retry=DECISION_RETRY,
        )

    def _prepare(self, request: DecisionRequest) -> PreparedMedia:
        return prepare_media(
            request.images,
            request.video,
            self.limits.media,
            vendor=self.vendor,
            accepted=self._spec.media_hint,
        )

    async def aclose(self) -> None:
        """Release the connection pool."""
        await self._loop.aclose()

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
        codec = self._calls
        self._check_credentials()
        model = request.model or self.model
        state_tokens = check_request(request, self.limits, vendor=self.vendor, model=model)
        media = self._prepare(request)
        body = codec.encode(request, model, media)
        self._check_size(body)
        timeout = self._budget_s(request, state_tokens)
        started = trio.current_time()
        reply = await self._send(codec.path(model), body, started + timeout, timeout)
        decoded = codec.decode(self._payload(reply), request, model, self.wire)
        return DecisionResult(
            model=decoded.model,
            provider=self.name,
            answers=decoded.answers,
            usage=decoded.usage,
            request_id=self.wire.request_id(reply.headers),
            latency_ms=(trio.current_time() - started) * 1000.0,
            upstream_ms=_milliseconds(reply.headers.get("x-envoy-upstream-service-time")),
            media_bytes=media.media_bytes,
        )

    def _check_credentials(self) -> None:
        """Refuse, before any network call, when there is no key or the key was rejected."""
        if self._spec.requires_key and not self._api_key:
            raise DecisionError(
                Kind.AUTHENTICATION,
                f"{self.vendor} has no API key. Set {self._spec.key_env} or pass api_key=.",
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
                self.wire.redact(
                    f"{self.vendor} answered HTTP {reply.status} with a body that is not JSON:"
                    f" {reply.excerpt()}"
                ),
                status=reply.status,
                request_id=self.wire.request_id(reply.headers),
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


def _milliseconds(value: str | None) -> float | None:
    try:
        number = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None

"""TypeSafe's Jev models, direct (``/v1/systemone``) or through the Vercel AI Gateway
(``wire-formats.md`` §1–§2); the only vendor whose reference maps 529 to ``overloaded``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Unpack
from urllib.parse import urlsplit

import attrs

from ...._core.decide.limits import DecisionLimits
from ...._core.decide.media import PreparedMedia
from ...._core.decide.types import DecisionRequest
from ...._core.decide.wire import read_usage
from ...._core.errors import ConfigError, DecisionError
from ..._http.async_driver import LoopOptions
from ..._http.retry import Reply
from ..codec import VendorSpec, bearer_headers, read_system_one, system_one_body
from ..loop import HttpDecider
from ..wire import (
    Decoded,
    Kind,
    Wire,
    dig,
    encode_question,
    envelope_message,
    read_answer_map,
    status_kind,
)
from .media_readers import MEDIA_READERS

DIRECT_URL = "https://api.typesafe.ai"
SPEC = VendorSpec(
    name="typesafe",
    vendor="TypeSafe",
    default_model="jev-latest",
    default_base_url=DIRECT_URL,
    key_env="TYPESAFE_API_KEY (or AI_GATEWAY_API_KEY)",
    #: The server enforces 33,000 tokens of state + longest question; not checked here.
    limits=DecisionLimits(max_state_tokens=33_000, advisory=True, timeout_s=5.0),
    media_hint=MEDIA_READERS,
)
GATEWAY_URL = "https://ai-gateway.vercel.sh/v4/ai/evaluation-model"


@attrs.frozen
class TypeSafeCodec:
    """TypeSafe's two wire formats: System One direct, or the Vercel AI Gateway's.

    Attributes:
        route: ``"direct"`` or ``"gateway"``.
        gateway_path: the gateway endpoint's path (the gateway URL is a full endpoint).
    """

    route: Literal["direct", "gateway"]
    gateway_path: str = ""
    spec: VendorSpec = SPEC

    def headers(self, api_key: str) -> dict[str, str]:
        headers = bearer_headers(api_key)
        if self.route == "gateway" and headers:
            headers |= {
                "ai-gateway-auth-method": "api-key",
                "ai-gateway-protocol-version": "0.0.1",
                "ai-model-id": _GATEWAY_MODEL,
                "ai-evaluation-model-specification-version": "4",
            }
        return headers

    def path(self, model: str) -> str:
        return self.gateway_path if self.route == "gateway" else "/v1/systemone"

    def encode(self, request: DecisionRequest, model: str, media: PreparedMedia) -> object:
        if self.route == "direct":
            return system_one_body(request, model, media)
        # The gateway takes no model and calls booleans "boolean".
        return {
            "state": request.state,
            "questions": {k: encode_question(q, "boolean") for k, q in request.questions.items()},
        }

    def decode(self, payload: object, request: DecisionRequest, model: str, wire: Wire) -> Decoded:
        if self.route == "direct":
            return read_system_one(payload, request, model, wire)
        if not isinstance(payload, Mapping) or not isinstance(payload.get("answers"), Mapping):
            raise DecisionError(
                Kind.SERVER, f"{wire.vendor} returned a response without an answers map."
            )
        confidences = dig(payload, "providerMetadata", "typesafe", "confidence")
        answers = read_answer_map(
            wire,
            payload["answers"],
            request.questions,
            confidences=confidences if isinstance(confidences, Mapping) else None,
        )
        # The gateway names no model; the one that answered is the ai-model-id header's.
        return Decoded(answers, read_usage(payload.get("usage")), _GATEWAY_MODEL)

    def error(self, reply: Reply, wire: Wire) -> DecisionError:
        payload = reply.json()
        if self.route == "gateway":
            error = payload.get("error") if isinstance(payload, Mapping) else None
            kind = (
                _GATEWAY_KINDS.get(str(error.get("type"))) if isinstance(error, Mapping) else None
            )
            if reply.status == 413:
                # Too large whatever the (generic) error type says, as on the direct route.
                kind = Kind.MAX_TOKENS_EXCEEDED
            return wire.refusal(
                kind or status_kind(reply.status, _TYPESAFE_KINDS), reply, envelope_message(payload)
            )
        detail = payload.get("detail") if isinstance(payload, Mapping) else None
        if isinstance(detail, Mapping) and detail.get("error_type") == "max_tokens_exceeded":
            return wire.refusal(
                Kind.MAX_TOKENS_EXCEEDED,
                reply,
                "the request is too long: state + the longest question may hold at most 33,000"
                " tokens, state + all questions at most 64,000.",
            )
        if isinstance(detail, list):
            entries = [
                f"{'.'.join(map(str, e.get('loc', [])))}: {e.get('msg', '')}"
                for e in detail[:5]
                if isinstance(e, Mapping)
            ]
            return wire.refusal(
                Kind.INVALID_REQUEST,
                reply,
                "Request failed validation — " + "; ".join(entries),
                retryable=False,
            )
        return wire.refusal(
            status_kind(reply.status, _TYPESAFE_KINDS), reply, envelope_message(payload)
        )

    def request_id(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("x-typesafe-request-id") or headers.get("x-request-id")


class TypeSafeDecider(HttpDecider):
    """TypeSafe's Jev models, direct (``/v1/systemone``) or through the Vercel AI Gateway.

    Args:
        api_key: ``TYPESAFE_API_KEY`` (direct transport).
        gateway_api_key: ``AI_GATEWAY_API_KEY`` (gateway transport).
        route: ``"direct"`` or ``"gateway"``; by default the gateway is used only
            when there is no direct key.
        base_url: the direct endpoint's base, or the gateway's full URL.
        model: the model asked when a request names none (direct route).
        options: the loop options (``timeout_s``, ``retry``, ``transport``, ``rng``).
    """

    name = SPEC.name
    vendor = SPEC.vendor
    limits = SPEC.limits
    default_base_url = DIRECT_URL
    gateway_url = GATEWAY_URL

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        gateway_api_key: str | None = None,
        route: Literal["direct", "gateway"] | None = None,
        model: str | None = None,
        **options: Unpack[LoopOptions],
    ) -> None:
        direct = (api_key or "").strip()
        if route is None:
            route = "gateway" if not direct and (gateway_api_key or "").strip() else "direct"
        if route not in ("direct", "gateway"):
            raise ConfigError(f"route must be 'direct' or 'gateway', got {route!r}")
        self.route = route
        url = base_url or (GATEWAY_URL if route == "gateway" else DIRECT_URL)
        gateway_path = ""
        if route == "gateway":
            # The gateway URL is a full endpoint; the client posts to its path.
            parts = urlsplit(url)
            gateway_path = parts.path or "/"
            url = f"{parts.scheme}://{parts.netloc}"
        super().__init__(
            TypeSafeCodec(route, gateway_path),
            api_key=direct if route == "direct" else gateway_api_key,
            base_url=url,
            model=model,
            **options,
        )


#: The model the gateway route asks for (the ``ai-model-id`` header) and reports.
_GATEWAY_MODEL = "typesafe-ai/jev"

_TYPESAFE_KINDS = {
    401: Kind.AUTHENTICATION,
    403: Kind.AUTHENTICATION,
    429: Kind.RATE_LIMIT,
    529: Kind.OVERLOADED,
}
_GATEWAY_KINDS = {
    "authentication_error": Kind.AUTHENTICATION,
    "customer_verification_required": Kind.AUTHENTICATION,
    "invalid_request_error": Kind.INVALID_REQUEST,
    "rate_limit_exceeded": Kind.RATE_LIMIT,
    "internal_server_error": Kind.SERVER,
}

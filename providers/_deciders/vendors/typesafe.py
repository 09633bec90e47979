"""TypeSafe's Jev models, direct (``/v1/systemone``) or through the Vercel AI Gateway
(``wire-formats.md`` §1–§2); the only vendor whose reference maps 529 to ``overloaded``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Unpack
from urllib.parse import urlsplit

from ...._core.decision import DecisionRequest
from ...._core.decision_limits import DecisionLimits
from ...._core.decision_wire import read_usage
from ...._core.errors import ConfigError, DecisionError
from ...._core.media import PreparedMedia
from ..._http.async_driver import LoopOptions
from ..._http.retry import Reply
from ..loop import HttpDecider
from ..wire import (
    Decoded,
    Kind,
    dig,
    encode_question,
    envelope_message,
    read_answer_map,
    status_kind,
)
from .media_readers import MEDIA_READERS


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

    name = "typesafe"
    vendor = "TypeSafe"
    media_hint = MEDIA_READERS
    default_model = "jev-latest"
    default_base_url = "https://api.typesafe.ai"
    gateway_url = "https://ai-gateway.vercel.sh/v4/ai/evaluation-model"
    key_env = "TYPESAFE_API_KEY (or AI_GATEWAY_API_KEY)"
    #: The server enforces 33,000 tokens of state + longest question; not checked here.
    limits = DecisionLimits(max_state_tokens=33_000, advisory=True, timeout_s=5.0)

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
        url = base_url or (self.gateway_url if route == "gateway" else self.default_base_url)
        self._gateway_path = ""
        if route == "gateway":
            # The gateway URL is a full endpoint; the client posts to its path.
            parts = urlsplit(url)
            self._gateway_path = parts.path or "/"
            url = f"{parts.scheme}://{parts.netloc}"
        super().__init__(
            api_key=direct if route == "direct" else gateway_api_key,
            base_url=url,
            model=model,
            **options,
        )

    def _headers(self) -> dict[str, str]:
        headers = super()._headers()
        if self.route == "gateway" and headers:
            headers |= {
                "ai-gateway-auth-method": "api-key",
                "ai-gateway-protocol-version": "0.0.1",
                "ai-model-id": _GATEWAY_MODEL,
                "ai-evaluation-model-specification-version": "4",
            }
        return headers

    def _path(self, model: str) -> str:
        return self._gateway_path if self.route == "gateway" else "/v1/systemone"

    def _encode(self, request: DecisionRequest, model: str, media: PreparedMedia) -> object:
        if self.route == "direct":
            return super()._encode(request, model, media)
        # The gateway takes no model and calls booleans "boolean".
        return {
            "state": request.state,
            "questions": {k: encode_question(q, "boolean") for k, q in request.questions.items()},
        }

    def _decode(self, payload: object, request: DecisionRequest, model: str) -> Decoded:
        if self.route == "direct":
            return super()._decode(payload, request, model)
        if not isinstance(payload, Mapping) or not isinstance(payload.get("answers"), Mapping):
            raise DecisionError(
                Kind.SERVER, f"{self.vendor} returned a response without an answers map."
            )
        confidences = dig(payload, "providerMetadata", "typesafe", "confidence")
        answers = read_answer_map(
            self.wire,
            payload["answers"],
            request.questions,
            confidences=confidences if isinstance(confidences, Mapping) else None,
        )
        # The gateway names no model; the one that answered is the ai-model-id header's.
        return Decoded(answers, read_usage(payload.get("usage")), _GATEWAY_MODEL)

    def _error(self, reply: Reply) -> DecisionError:
        payload = reply.json()
        if self.route == "gateway":
            error = payload.get("error") if isinstance(payload, Mapping) else None
            kind = (
                _GATEWAY_KINDS.get(str(error.get("type"))) if isinstance(error, Mapping) else None
            )
            if reply.status == 413:
                # Too large whatever the (generic) error type says, as on the direct route.
                kind = Kind.MAX_TOKENS_EXCEEDED
            return self._make_error(
                kind or status_kind(reply.status, _TYPESAFE_KINDS), reply, envelope_message(payload)
            )
        detail = payload.get("detail") if isinstance(payload, Mapping) else None
        if isinstance(detail, Mapping) and detail.get("error_type") == "max_tokens_exceeded":
            return self._make_error(
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
            return self._make_error(
                Kind.INVALID_REQUEST,
                reply,
                "Request failed validation — " + "; ".join(entries),
                retryable=False,
            )
        return self._make_error(
            status_kind(reply.status, _TYPESAFE_KINDS), reply, envelope_message(payload)
        )

    def _request_id(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("x-typesafe-request-id") or headers.get("x-request-id")


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

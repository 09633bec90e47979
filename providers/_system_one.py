"""The "System One" family: TypeSafe (direct and via the Vercel AI Gateway), Laya, XOR,
Perplexity Decisions and Cloudflare Clef.

Each class is a codec on :class:`HttpDecider`: where to POST, which headers,
how the body differs, and how the vendor's error envelope maps to a kind.
Every constant comes from the vendor's wire format (``wire-formats.md``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

from .._core.decision import DecisionRequest
from .._core.decision_limits import DecisionLimits, MediaLimits, ModelLimits
from .._core.decision_wire import read_answers, read_usage
from .._core.errors import ConfigError, DecisionError
from .._core.media import PreparedMedia, image_size
from ._decision_loop import (
    DECISION_RETRY,
    Decoded,
    HttpDecider,
    Kind,
    encode_question,
    envelope_message,
    status_kind,
)
from ._http import AsyncTransport, Reply, RetryPolicy

_PNG_JPEG_WEBP = frozenset({"image/png", "image/jpeg", "image/webp"})


class TypeSafeDecider(HttpDecider):
    """TypeSafe's Jev models, direct (``/v1/systemone``) or through the Vercel AI Gateway.

    Args:
        api_key: ``TYPESAFE_API_KEY`` (direct transport).
        gateway_api_key: ``AI_GATEWAY_API_KEY`` (gateway transport).
        route: ``"direct"`` or ``"gateway"``; by default the gateway is used only
            when there is no direct key.
        base_url: the direct endpoint's base, or the gateway's full URL.
    """

    name = "typesafe"
    vendor = "TypeSafe"
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
        timeout_s: float | None = None,
        retry: RetryPolicy = DECISION_RETRY,
        transport: AsyncTransport | None = None,
        rng: Callable[[], float] | None = None,
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
            timeout_s=timeout_s,
            retry=retry,
            transport=transport,
            rng=rng,
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
        confidences = _dig(payload, "providerMetadata", "typesafe", "confidence")
        answers = read_answers(
            payload["answers"],
            request.questions,
            vendor=self.vendor,
            confidences=confidences if isinstance(confidences, Mapping) else None,
            redact=self._client.redact,
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


class LayaDecider(HttpDecider):
    """Laya (Convai), self-hosted behind LiteLLM: ``POST {base}/predict``; text only."""

    name = "laya"
    vendor = "Laya"
    default_model = "typed-decisions"
    key_env = "LAYA_API_KEY (with LAYA_BASE_URL)"
    limits = DecisionLimits(
        max_state_tokens=320,
        max_questions=64,
        non_ascii_rate=1.5,
        models={
            "typed-decisions": ModelLimits(max_state_tokens=768),
            "multilingual": ModelLimits(max_state_tokens=768, non_ascii_rate=0.6),
        },
    )

    def _path(self, model: str) -> str:
        return "/predict"

    def _encode(self, request: DecisionRequest, model: str, media: PreparedMedia) -> object:
        body = dict(super()._encode(request, model, media))  # type: ignore[call-overload]
        if model == "auto":
            del body["model"]
        return body

    def _decode(self, payload: object, request: DecisionRequest, model: str) -> Decoded:
        decoded = super()._decode(payload, request, model)
        answered_by = _dig(payload, "routing", "model")
        return Decoded(
            decoded.answers,
            decoded.usage,
            answered_by if isinstance(answered_by, str) else decoded.model,
        )

    def _error(self, reply: Reply) -> DecisionError:
        message = _litellm_message(envelope_message(reply.json()))
        return self._make_error(status_kind(reply.status), reply, message)

    def _request_id(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("x-litellm-call-id")


def _litellm_message(message: str | None) -> str | None:
    """A LiteLLM proxy message without the key it echoes (``Received API Key = …``)."""
    if message is None:
        return None
    return message.split(" Received API Key", 1)[0].strip()


_CONTEXT_LENGTH = re.compile(
    r"(context|prefill|prompt).{0,40}(length|limit|too long|exceed)"
    r"|(too long|exceeds?).{0,40}(context|tokens)",
    re.IGNORECASE,
)


class XorDecider(HttpDecider):
    """XOR (Juspay's open weights): ``POST {base}/v1/systemone`` with images and video."""

    name = "xor"
    vendor = "XOR"
    default_model = "xor-1.1"
    key_env = "XOR_API_KEY (with XOR_BASE_URL)"
    limits = DecisionLimits(
        max_state_tokens=200_000,
        non_ascii_rate=1.0,
        structured_non_ascii_rate=5.0,
        media=MediaLimits(max_images=8, video=True, max_request_bytes=8 * 1024 * 1024),
    )

    strip_v1 = True

    def _path(self, model: str) -> str:
        return "/v1/systemone"

    def _error(self, reply: Reply) -> DecisionError:
        message = _litellm_message(envelope_message(reply.json()))
        if reply.status in (402, 403):
            # LiteLLM team and budget refusals: not the key's fault, so no latch.
            return self._make_error(Kind.INVALID_REQUEST, reply, message)
        kind = status_kind(reply.status)
        if kind is Kind.SERVER and _CONTEXT_LENGTH.search(
            message or reply.body.decode("utf-8", "replace")
        ):
            kind = Kind.MAX_TOKENS_EXCEEDED
        return self._make_error(kind, reply, message)

    def _request_id(self, headers: Mapping[str, str]) -> str | None:
        return (
            headers.get("x-request-id")
            or headers.get("x-typesafe-request-id")
            or headers.get("x-litellm-call-id")
        )


_PPLX_CONTEXT = re.compile(r"exceeds(?: or equals)?(?: model's)? maximum context length", re.I)
_PPLX_KEY = re.compile(r"pplx-[A-Za-z0-9_-]{30,}")
#: Tiles of 32×32 pixels one image may have; bigger ones stall the server for ~56 s.
PERPLEXITY_MAX_TILES = 2048


class PerplexityDecider(HttpDecider):
    """Perplexity Decisions: ``POST {base}/v1/decisions``; images travel inside ``state``."""

    name = "perplexity-decider"
    vendor = "Perplexity"
    default_model = "pplx-decider-v1-27b"
    default_base_url = "https://api.perplexity.ai"
    key_env = "PERPLEXITY_API_KEY"
    limits = DecisionLimits(
        max_state_tokens=100_000,
        max_questions=128,
        non_ascii_rate=0.5,
        media=MediaLimits(
            max_images=8,
            video=False,
            max_request_bytes=32 * 1024 * 1024,
            image_types=_PNG_JPEG_WEBP,
        ),
        timeout_s=10.0,
        per_question_s=0.1,
    )

    strip_v1 = True

    def __init__(self, *, base_url: str | None = None, **kwargs: Any) -> None:
        # The integration header goes to Perplexity's own API only, not to proxies.
        self._official = urlsplit(base_url or self.default_base_url).hostname == "api.perplexity.ai"
        super().__init__(base_url=base_url, **kwargs)

    def _headers(self) -> dict[str, str]:
        headers = super()._headers()
        if self._official:
            headers["X-Pplx-Integration"] = "toolroute"
        return headers

    def _path(self, model: str) -> str:
        return "/v1/decisions"

    def _prepare(self, request: DecisionRequest) -> PreparedMedia:
        media = super()._prepare(request)
        for index, data in enumerate(media.image_bytes):
            size = image_size(data)
            if size is None:
                continue
            tiles = _round_half_up(size[0] / 32) * _round_half_up(size[1] / 32)
            if tiles > PERPLEXITY_MAX_TILES:
                raise DecisionError(
                    Kind.INVALID_REQUEST,
                    f"Image {index} is {size[0]}×{size[1]} pixels = {tiles} tiles of 32×32;"
                    f" {self.vendor} reads at most {PERPLEXITY_MAX_TILES}. Downscale it.",
                )
        return media

    def _encode(self, request: DecisionRequest, model: str, media: PreparedMedia) -> object:
        state = request.state
        if isinstance(state, bool | int | float):
            state = json.dumps(state)
        if media.images:
            # The API has no images field: the state becomes a list that ends with them.
            parts = list(state) if isinstance(state, list) else ([] if state == "" else [state])
            state = parts + [
                {"type": "image_url", "image_url": {"url": url}} for url in media.images
            ]
        return {
            "model": model,
            "state": state,
            "questions": {k: encode_question(q, "noul") for k, q in request.questions.items()},
        }

    def _error(self, reply: Reply) -> DecisionError:
        payload = reply.json()
        message = envelope_message(payload)
        error = payload.get("error") if isinstance(payload, Mapping) else None
        if message and isinstance(error, Mapping) and isinstance(error.get("param"), str):
            message += f" (field: `{error['param']}`)"
        if reply.status == 413 or (reply.status == 400 and _PPLX_CONTEXT.search(message or "")):
            kind = Kind.MAX_TOKENS_EXCEEDED
        elif reply.status == 401:
            kind = Kind.AUTHENTICATION  # the only status that latches
        elif reply.status in (429, 503) or reply.status >= 500:
            kind = status_kind(reply.status)
        else:
            kind = Kind.INVALID_REQUEST
        error_obj = self._make_error(kind, reply, message)
        return DecisionError(
            error_obj.kind,
            _PPLX_KEY.sub("[redacted]", str(error_obj)),
            status=error_obj.status,
            request_id=error_obj.request_id,
            retryable=error_obj.retryable,
        )


def _round_half_up(value: float) -> int:
    return math.floor(value + 0.5)


_ACCOUNT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_CLEF_MODEL = re.compile(r"[a-z0-9][a-z0-9._-]*")
_QUESTION_ID = re.compile(r"[A-Za-z0-9_.-]{1,100}")
_AI_ERROR = re.compile(r"AiError:\s*(\{.*\})\s*\(([0-9a-fA-F-]{8,})\)", re.DOTALL)
#: A plain-text AiError (5021 and the like): ``AiError: <text> (<request uuid>)``.
_AI_ERROR_ID = re.compile(
    r"AiError:.*\(([0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})\)", re.DOTALL
)


class ClefDecider(HttpDecider):
    """Cloudflare Clef on Workers AI: ``/accounts/{account_id}/ai/run/@cf/cloudflare/{model}``."""

    name = "cloudflare-clef"
    vendor = "Cloudflare Clef"
    default_model = "clef"
    default_base_url = "https://api.cloudflare.com/client/v4"
    key_env = "CLOUDFLARE_API_KEY (with CLOUDFLARE_ACCOUNT_ID)"
    limits = DecisionLimits(
        max_state_tokens=16_000,
        max_questions=64,
        non_ascii_rate=1.5,
        digit_rate=1.0,
        symbol_rate=0.75,
        astral_rate=3.0,
        media=MediaLimits(
            max_images=4, video=False, max_request_bytes=256_000, image_types=_PNG_JPEG_WEBP
        ),
        per_1000_state_tokens_s=0.25,
    )

    def __init__(self, *, account_id: str, model: str | None = None, **kwargs: Any) -> None:
        if not isinstance(account_id, str) or not _ACCOUNT_ID.fullmatch(account_id):
            raise ConfigError("account_id must be 1–64 letters, digits, '_' or '-'")
        self.account_id = account_id
        if model is not None:
            model = model.removeprefix("@cf/cloudflare/")
            if not _CLEF_MODEL.fullmatch(model):
                raise ConfigError(
                    f"Clef model must match [a-z0-9][a-z0-9._-]* (e.g. 'clef', 'clef-flash'),"
                    f" got {model!r}"
                )
        super().__init__(model=model, **kwargs)

    def _path(self, model: str) -> str:
        return f"/accounts/{self.account_id}/ai/run/@cf/cloudflare/{model.removeprefix('@cf/cloudflare/')}"

    def _encode(self, request: DecisionRequest, model: str, media: PreparedMedia) -> object:
        bad = [key for key in request.questions if not _QUESTION_ID.fullmatch(key)]
        if bad:
            raise DecisionError(
                Kind.INVALID_REQUEST,
                f"{self.vendor} question ids must be 1–100 letters, digits, '_', '.' or '-';"
                f" got {bad[0]!r}",
            )
        body = dict(super()._encode(request, model.removeprefix("@cf/cloudflare/"), media))  # type: ignore[call-overload]
        if "images" in body:
            body["images"] = [
                u.replace("data:image/jpg;", "data:image/jpeg;", 1) for u in body["images"]
            ]
        return body

    def _decode(self, payload: object, request: DecisionRequest, model: str) -> Decoded:
        result = payload.get("result") if isinstance(payload, Mapping) else None
        return super()._decode(result, request, model)

    def _error(self, reply: Reply) -> DecisionError:
        payload = reply.json()
        errors = payload.get("errors") if isinstance(payload, Mapping) else None
        first = (
            errors[0]
            if isinstance(errors, list) and errors and isinstance(errors[0], Mapping)
            else {}
        )
        code = first.get("code")
        message = (
            first.get("message")
            if isinstance(first.get("message"), str)
            else envelope_message(payload)
        )
        request_id = None
        nested = _AI_ERROR.search(message or "")
        if nested:
            request_id = nested.group(2)
            message = _flatten_ai_error(nested.group(1)) or message
        elif plain := _AI_ERROR_ID.search(message or ""):
            request_id = plain.group(1)
        retryable: bool | None = None
        if reply.status == 413 or code == 5021:
            kind = Kind.MAX_TOKENS_EXCEEDED
        elif reply.status == 429:
            kind = Kind.RATE_LIMIT
            # 4006: the daily free allocation is spent; retrying today is pointless.
            retryable = code != 4006
        elif reply.status in (403, 422):
            kind = Kind.INVALID_REQUEST
        else:
            kind = status_kind(reply.status)
        if code is not None and message:
            message = f"{message} (code {code})"
        error = self._make_error(kind, reply, message, retryable=retryable)
        if request_id:
            error.request_id = request_id
        return error

    def _request_id(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("cf-ai-req-id") or headers.get("cf-ray")


def _flatten_ai_error(text: str) -> str | None:
    """``{"error": {"message", "details": {"fieldErrors": {field: [msg]}}}}`` as one line."""
    try:
        decoded = json.loads(text)
    except ValueError:
        return None
    error = decoded.get("error") if isinstance(decoded, Mapping) else None
    if not isinstance(error, Mapping):
        return None
    parts = [str(error.get("message", "")).strip()]
    fields = _dig(error, "details", "fieldErrors")
    if isinstance(fields, Mapping):
        for field, messages in fields.items():
            joined = ", ".join(map(str, messages)) if isinstance(messages, list) else str(messages)
            parts.append(f"{field}: {joined}")
    return "; ".join(p for p in parts if p) or None


def _dig(value: object, *keys: str) -> object:
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value

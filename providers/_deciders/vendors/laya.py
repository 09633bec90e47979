"""Laya (Convai), self-hosted behind LiteLLM: ``POST {base}/predict`` (``wire-formats.md`` §3)."""

from __future__ import annotations

from collections.abc import Mapping

from ...._core.decision import DecisionRequest
from ...._core.decision_limits import DecisionLimits, ModelLimits
from ...._core.errors import DecisionError
from ...._core.media import PreparedMedia
from ..._http.retry import Reply
from ..loop import HttpDecider
from ..wire import Decoded, dig, envelope_message, litellm_message, status_kind
from .media_readers import MEDIA_READERS


class LayaDecider(HttpDecider):
    """Laya (Convai), self-hosted behind LiteLLM: ``POST {base}/predict``; text only."""

    name = "laya"
    vendor = "Laya"
    media_hint = MEDIA_READERS
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
        answered_by = dig(payload, "routing", "model")
        return Decoded(
            decoded.answers,
            decoded.usage,
            answered_by if isinstance(answered_by, str) else decoded.model,
        )

    def _error(self, reply: Reply) -> DecisionError:
        message = litellm_message(envelope_message(reply.json()))
        return self._make_error(status_kind(reply.status), reply, message)

    def _request_id(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("x-litellm-call-id")

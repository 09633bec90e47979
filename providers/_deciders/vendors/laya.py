"""Laya (Convai), self-hosted behind LiteLLM: ``POST {base}/predict`` (``wire-formats.md`` §3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Unpack

import attrs

from ...._core.decide.limits import DecisionLimits, ModelLimits
from ...._core.decide.media import PreparedMedia
from ...._core.decide.types import DecisionRequest
from ...._core.errors import DecisionError
from ..._http.async_driver import LoopOptions
from ..._http.retry import Reply
from ..codec import VendorSpec, bearer_headers, read_system_one, system_one_body
from ..loop import HttpDecider
from ..wire import Decoded, Wire, dig, envelope_message, litellm_message, status_kind
from .media_readers import MEDIA_READERS

SPEC = VendorSpec(
    name="laya",
    vendor="Laya",
    default_model="typed-decisions",
    key_env="LAYA_API_KEY (with LAYA_BASE_URL)",
    limits=DecisionLimits(
        max_state_tokens=320,
        max_questions=64,
        non_ascii_rate=1.5,
        models={
            "typed-decisions": ModelLimits(max_state_tokens=768),
            "multilingual": ModelLimits(max_state_tokens=768, non_ascii_rate=0.6),
        },
    ),
    media_hint=MEDIA_READERS,
)


@attrs.frozen
class LayaCodec:
    """Laya's System One wire format behind LiteLLM; ``auto`` lets the router pick the model."""

    spec: VendorSpec = SPEC

    def headers(self, api_key: str) -> dict[str, str]:
        return bearer_headers(api_key)

    def path(self, model: str) -> str:
        return "/predict"

    def encode(self, request: DecisionRequest, model: str, media: PreparedMedia) -> object:
        body = system_one_body(request, model, media)
        if model == "auto":
            del body["model"]
        return body

    def decode(self, payload: object, request: DecisionRequest, model: str, wire: Wire) -> Decoded:
        decoded = read_system_one(payload, request, model, wire)
        answered_by = dig(payload, "routing", "model")
        return Decoded(
            decoded.answers,
            decoded.usage,
            answered_by if isinstance(answered_by, str) else decoded.model,
        )

    def error(self, reply: Reply, wire: Wire) -> DecisionError:
        message = litellm_message(envelope_message(reply.json()))
        return wire.refusal(status_kind(reply.status), reply, message)

    def request_id(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("x-litellm-call-id")


class LayaDecider(HttpDecider):
    """Laya (Convai), self-hosted behind LiteLLM: ``POST {base}/predict``; text only."""

    name = SPEC.name
    vendor = SPEC.vendor
    limits = SPEC.limits

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None = None,
        model: str | None = None,
        **options: Unpack[LoopOptions],
    ) -> None:
        super().__init__(LayaCodec(), api_key=api_key, base_url=base_url, model=model, **options)

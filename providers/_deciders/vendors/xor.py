"""XOR (Juspay's open weights): ``POST {base}/v1/systemone`` (``wire-formats.md`` §4)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Unpack

import attrs

from ...._core.decide.limits import DecisionLimits, MediaLimits
from ...._core.decide.media import PreparedMedia
from ...._core.decide.types import DecisionRequest
from ...._core.errors import DecisionError
from ..._http.async_driver import LoopOptions
from ..._http.retry import Reply
from ..codec import VendorSpec, bearer_headers, read_system_one, system_one_body
from ..loop import HttpDecider
from ..wire import Decoded, Kind, Wire, envelope_message, litellm_message, status_kind
from .media_readers import MEDIA_READERS

_CONTEXT_LENGTH = re.compile(
    r"(context|prefill|prompt).{0,40}(length|limit|too long|exceed)"
    r"|(too long|exceeds?).{0,40}(context|tokens)",
    re.IGNORECASE,
)


SPEC = VendorSpec(
    name="xor",
    vendor="XOR",
    default_model="xor-1.1",
    key_env="XOR_API_KEY (with XOR_BASE_URL)",
    limits=DecisionLimits(
        max_state_tokens=200_000,
        non_ascii_rate=1.0,
        structured_non_ascii_rate=5.0,
        media=MediaLimits(max_images=8, video=True, max_request_bytes=8 * 1024 * 1024),
    ),
    strip_v1=True,
    media_hint=MEDIA_READERS,
)


@attrs.frozen
class XorCodec:
    """XOR's System One wire format, with LiteLLM's refusals in front of it."""

    spec: VendorSpec = SPEC

    def headers(self, api_key: str) -> dict[str, str]:
        return bearer_headers(api_key)

    def path(self, model: str) -> str:
        return "/v1/systemone"

    def encode(self, request: DecisionRequest, model: str, media: PreparedMedia) -> object:
        return system_one_body(request, model, media)

    def decode(self, payload: object, request: DecisionRequest, model: str, wire: Wire) -> Decoded:
        return read_system_one(payload, request, model, wire)

    def error(self, reply: Reply, wire: Wire) -> DecisionError:
        message = litellm_message(envelope_message(reply.json()))
        if reply.status in (402, 403):
            # LiteLLM team and budget refusals: not the key's fault, so no latch.
            return wire.refusal(Kind.INVALID_REQUEST, reply, message)
        kind = status_kind(reply.status)
        if kind is Kind.SERVER and _CONTEXT_LENGTH.search(
            message or reply.body.decode("utf-8", "replace")
        ):
            kind = Kind.MAX_TOKENS_EXCEEDED
        return wire.refusal(kind, reply, message)

    def request_id(self, headers: Mapping[str, str]) -> str | None:
        return (
            headers.get("x-request-id")
            or headers.get("x-typesafe-request-id")
            or headers.get("x-litellm-call-id")
        )


class XorDecider(HttpDecider):
    """XOR (Juspay's open weights): ``POST {base}/v1/systemone`` with images and video."""

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
        super().__init__(XorCodec(), api_key=api_key, base_url=base_url, model=model, **options)

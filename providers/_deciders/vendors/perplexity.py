"""Perplexity Decisions: ``POST {base}/v1/decisions`` (``wire-formats.md`` §5)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Unpack
from urllib.parse import urlsplit

import attrs

from ...._core.decide.limits import DecisionLimits, MediaLimits
from ...._core.decide.media import PreparedMedia, image_size
from ...._core.decide.types import DecisionRequest
from ...._core.errors import DecisionError
from ..._http.async_driver import LoopOptions
from ..._http.retry import Reply
from ..codec import VendorSpec, bearer_headers, read_system_one
from ..loop import HttpDecider
from ..wire import (
    PNG_JPEG_WEBP,
    Decoded,
    Kind,
    Wire,
    encode_question,
    envelope_message,
    status_kind,
)
from .media_readers import MEDIA_READERS

_PPLX_CONTEXT = re.compile(r"exceeds(?: or equals)?(?: model's)? maximum context length", re.I)
_PPLX_KEY = re.compile(r"pplx-[A-Za-z0-9_-]{30,}")
#: Tiles of 32×32 pixels one image may have; bigger ones stall the server for ~56 s.
PERPLEXITY_MAX_TILES = 2048


SPEC = VendorSpec(
    name="perplexity-decider",
    vendor="Perplexity",
    default_model="pplx-decider-v1-27b",
    default_base_url="https://api.perplexity.ai",
    key_env="PERPLEXITY_API_KEY",
    limits=DecisionLimits(
        max_state_tokens=100_000,
        max_questions=128,
        non_ascii_rate=0.5,
        media=MediaLimits(
            max_images=8,
            video=False,
            max_request_bytes=32 * 1024 * 1024,
            image_types=PNG_JPEG_WEBP,
        ),
        timeout_s=10.0,
        per_question_s=0.1,
    ),
    strip_v1=True,
    media_hint=MEDIA_READERS,
)


@attrs.frozen
class PerplexityCodec:
    """Perplexity's decisions format: images inside ``state``, a tile cap per image.

    Attributes:
        official: whether the endpoint is Perplexity's own API (it gets the integration header).
    """

    official: bool
    spec: VendorSpec = SPEC

    def headers(self, api_key: str) -> dict[str, str]:
        headers = bearer_headers(api_key)
        if self.official:
            headers["X-Pplx-Integration"] = "toolroute"
        return headers

    def path(self, model: str) -> str:
        return "/v1/decisions"

    def encode(self, request: DecisionRequest, model: str, media: PreparedMedia) -> object:
        for index, data in enumerate(media.image_bytes):
            size = image_size(data)
            if size is None:
                continue
            tiles = _round_half_up(size[0] / 32) * _round_half_up(size[1] / 32)
            if tiles > PERPLEXITY_MAX_TILES:
                raise DecisionError(
                    Kind.INVALID_REQUEST,
                    f"Image {index} is {size[0]}×{size[1]} pixels = {tiles} tiles of 32×32;"
                    f" {self.spec.vendor} reads at most {PERPLEXITY_MAX_TILES}. Downscale it.",
                )
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

    def decode(self, payload: object, request: DecisionRequest, model: str, wire: Wire) -> Decoded:
        return read_system_one(payload, request, model, wire)

    def error(self, reply: Reply, wire: Wire) -> DecisionError:
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
        error_obj = wire.refusal(kind, reply, message)
        return DecisionError(
            error_obj.kind,
            _PPLX_KEY.sub("[redacted]", str(error_obj)),
            status=error_obj.status,
            request_id=error_obj.request_id,
            retryable=error_obj.retryable,
        )

    def request_id(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("x-request-id")


class PerplexityDecider(HttpDecider):
    """Perplexity Decisions: ``POST {base}/v1/decisions``; images travel inside ``state``."""

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
        # The integration header goes to Perplexity's own API only, not to proxies.
        official = urlsplit(base_url or SPEC.default_base_url or "").hostname == "api.perplexity.ai"
        super().__init__(
            PerplexityCodec(official), api_key=api_key, base_url=base_url, model=model, **options
        )


def _round_half_up(value: float) -> int:
    return math.floor(value + 0.5)

"""XOR (Juspay's open weights): ``POST {base}/v1/systemone`` (``wire-formats.md`` §4)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ...._core.decision_limits import DecisionLimits, MediaLimits
from ...._core.errors import DecisionError
from ..._http.retry import Reply
from ..loop import HttpDecider
from ..wire import Kind, envelope_message, litellm_message, status_kind
from .media_readers import MEDIA_READERS

_CONTEXT_LENGTH = re.compile(
    r"(context|prefill|prompt).{0,40}(length|limit|too long|exceed)"
    r"|(too long|exceeds?).{0,40}(context|tokens)",
    re.IGNORECASE,
)


class XorDecider(HttpDecider):
    """XOR (Juspay's open weights): ``POST {base}/v1/systemone`` with images and video."""

    name = "xor"
    vendor = "XOR"
    media_hint = MEDIA_READERS
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
        message = litellm_message(envelope_message(reply.json()))
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

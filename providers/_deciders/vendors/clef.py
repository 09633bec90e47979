"""Cloudflare Clef on Workers AI (``wire-formats.md`` §6)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Unpack

import attrs

from ...._core.decide.limits import DecisionLimits, MediaLimits
from ...._core.decide.media import PreparedMedia
from ...._core.decide.types import DecisionRequest
from ...._core.errors import ConfigError, DecisionError
from ..._http.async_driver import LoopOptions
from ..._http.retry import Reply
from ..codec import VendorSpec, bearer_headers, read_system_one, system_one_body
from ..loop import HttpDecider
from ..wire import PNG_JPEG_WEBP, Decoded, Kind, Wire, dig, envelope_message, status_kind
from .media_readers import MEDIA_READERS

_ACCOUNT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_CLEF_MODEL = re.compile(r"[a-z0-9][a-z0-9._-]*")
_QUESTION_ID = re.compile(r"[A-Za-z0-9_.-]{1,100}")
_AI_ERROR = re.compile(r"AiError:\s*(\{.*\})\s*\(([0-9a-fA-F-]{8,})\)", re.DOTALL)
#: A plain-text AiError (5021 and the like): ``AiError: <text> (<request uuid>)``.
_AI_ERROR_ID = re.compile(
    r"AiError:.*\(([0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})\)", re.DOTALL
)


SPEC = VendorSpec(
    name="cloudflare-clef",
    vendor="Cloudflare Clef",
    default_model="clef",
    default_base_url="https://api.cloudflare.com/client/v4",
    key_env="CLOUDFLARE_API_KEY (with CLOUDFLARE_ACCOUNT_ID)",
    limits=DecisionLimits(
        max_state_tokens=16_000,
        max_questions=64,
        non_ascii_rate=1.5,
        digit_rate=1.0,
        symbol_rate=0.75,
        astral_rate=3.0,
        media=MediaLimits(
            max_images=4, video=False, max_request_bytes=256_000, image_types=PNG_JPEG_WEBP
        ),
        per_1000_state_tokens_s=0.25,
    ),
    media_hint=MEDIA_READERS,
)


@attrs.frozen
class ClefCodec:
    """Clef's System One body under Workers AI's ``result`` envelope and ``errors`` list.

    Attributes:
        account_id: the Cloudflare account the path names.
    """

    account_id: str
    spec: VendorSpec = SPEC

    def headers(self, api_key: str) -> dict[str, str]:
        return bearer_headers(api_key)

    def path(self, model: str) -> str:
        return f"/accounts/{self.account_id}/ai/run/@cf/cloudflare/{model.removeprefix('@cf/cloudflare/')}"

    def encode(self, request: DecisionRequest, model: str, media: PreparedMedia) -> object:
        bad = [key for key in request.questions if not _QUESTION_ID.fullmatch(key)]
        if bad:
            raise DecisionError(
                Kind.INVALID_REQUEST,
                f"{self.spec.vendor} question ids must be 1–100 letters, digits, '_', '.' or '-';"
                f" got {bad[0]!r}",
            )
        body = system_one_body(request, model.removeprefix("@cf/cloudflare/"), media)
        if "images" in body:
            body["images"] = [
                u.replace("data:image/jpg;", "data:image/jpeg;", 1) for u in body["images"]
            ]
        return body

    def decode(self, payload: object, request: DecisionRequest, model: str, wire: Wire) -> Decoded:
        result = payload.get("result") if isinstance(payload, Mapping) else None
        return read_system_one(result, request, model, wire)

    def error(self, reply: Reply, wire: Wire) -> DecisionError:
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
        error = wire.refusal(kind, reply, message, retryable=retryable)
        if request_id:
            error.request_id = request_id
        return error

    def request_id(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("cf-ai-req-id") or headers.get("cf-ray")


class ClefDecider(HttpDecider):
    """Cloudflare Clef on Workers AI: ``/accounts/{account_id}/ai/run/@cf/cloudflare/{model}``."""

    name = SPEC.name
    vendor = SPEC.vendor
    limits = SPEC.limits

    def __init__(
        self,
        *,
        account_id: str,
        api_key: str | None,
        base_url: str | None = None,
        model: str | None = None,
        **options: Unpack[LoopOptions],
    ) -> None:
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
        super().__init__(
            ClefCodec(account_id), api_key=api_key, base_url=base_url, model=model, **options
        )


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
    fields = dig(error, "details", "fieldErrors")
    if isinstance(fields, Mapping):
        for field, messages in fields.items():
            joined = ", ".join(map(str, messages)) if isinstance(messages, list) else str(messages)
            parts.append(f"{field}: {joined}")
    return "; ".join(p for p in parts if p) or None

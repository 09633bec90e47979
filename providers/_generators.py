"""Chat models that answer with JSON: OpenAI-compatible servers and Anthropic.

Both classes implement :class:`~toolroute.providers.Generator` on one shared
retry loop: at most ``retry.retries + 1`` attempts inside one trio deadline, a
``Retry-After`` honoured only when it fits what is left of that deadline, and
an auth latch after 401/403. Every failure is a :class:`~toolroute.ProviderError`
whose message says what came back, with credentials redacted.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

import trio

from .._core.errors import ConfigError, ProviderError
from .._core.json_text import extract_json
from ._decision_loop import envelope_message
from ._http import (
    AsyncJsonClient,
    AsyncTransport,
    Reply,
    RetryPolicy,
    TransportError,
    parse_retry_after,
    retry_attempts,
)

#: One retry; back-off as in the openai/anthropic SDKs: 0.5 s doubling, 25 % jitter.
GENERATOR_RETRY = RetryPolicy(retries=1, backoff_s=0.5, max_backoff_s=8.0, jitter=0.25)

_EXCERPT_CHARS = 200


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The server's requested delay: ``retry-after-ms``, else ``Retry-After``."""
    try:
        seconds = float(headers.get("retry-after-ms", "nan")) / 1000.0
    except ValueError:
        seconds = math.nan
    if math.isfinite(seconds) and seconds >= 0:
        return seconds
    return parse_retry_after(headers.get("retry-after"), time.time())


class _JsonGenerator:
    """The retry loop and JSON extraction; subclasses encode and decode one vendor.

    Raises:
        ConfigError: a bad base URL, header value or timeout.

    **Resource handling**: owns a connection pool; call :meth:`aclose`.
    """

    #: Human name in messages.
    vendor: ClassVar[str]
    #: Prefix of ``identity``, and the path POSTed to under the base URL.
    scheme: ClassVar[str]
    path: ClassVar[str]
    #: Whether a call without an API key fails before the network.
    needs_key: ClassVar[bool] = False
    #: Model and endpoint; part of enrichment cache keys.
    identity: str

    def __init__(
        self,
        model: str,
        api_key: str | None,
        base_url: str,
        timeout_s: float,
        retry: RetryPolicy,
        transport: AsyncTransport | None,
        rng: Callable[[], float] | None,
    ) -> None:
        if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):
            raise ConfigError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self.model = model
        self._api_key = (api_key or "").strip()
        self._timeout_s = float(timeout_s)
        self._retry = retry
        self._rng = rng or random.random
        # (message, status) of the 401/403 that latched this generator shut.
        self._auth_failure: tuple[str, int] | None = None
        self._client = AsyncJsonClient(
            base_url, headers=self._headers(), secrets=[self._api_key], transport=transport
        )
        self.identity = f"{self.scheme}:{model}@{urlsplit(self._client.base_url).netloc}"

    def _headers(self) -> dict[str, str]:
        raise NotImplementedError

    def _body(self, prompt: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _text(self, payload: Mapping[str, Any]) -> str | None:
        """The answer text in a 2xx reply, or ``None`` when it has none."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release the connection pool. Idempotent."""
        await self._client.aclose()

    async def generate_json(self, prompt: str, schema: Mapping[str, Any]) -> object:
        """The decoded JSON answer to ``prompt``; it should match ``schema``, unchecked.

        Raises:
            ProviderError: no key (when required), a latched auth failure, an
                HTTP error, the deadline, or an answer without JSON in it.
            ConfigError: ``schema`` is not JSON-serialisable.

        **Cancellation**: the whole call, retries and waits included, runs
        under one ``timeout_s`` deadline; an outer cancel scope also applies.
        """
        if self.needs_key and not self._api_key:
            raise ProviderError(f"{self.vendor} has no API key; pass api_key=.")
        if self._auth_failure is not None:
            message, status = self._auth_failure
            raise ProviderError(message, status=status, retryable=False)
        reply = await self._send(self._body(prompt, schema))
        payload = reply.json()
        text = self._text(payload) if isinstance(payload, Mapping) else None
        if text is None:
            raise self._error(
                f"answered HTTP {reply.status} without an answer text: {self._quote(reply.body)}",
                reply.status,
            )
        try:
            return extract_json(text)
        except ValueError:
            raise self._error(
                f"answered with text that holds no JSON: {self._quote(text)}", reply.status
            ) from None

    async def _send(self, body: object) -> Reply:
        last = ""

        async def attempt() -> Reply | tuple[ProviderError, float | None]:
            nonlocal last
            try:
                reply = await self._client.post(self.path, body)
            except TransportError as exc:
                last = str(exc)
                return self._error(last, retryable=True), None
            if 200 <= reply.status <= 299:
                return reply
            last, retryable, wait = self._refusal(reply)
            return self._error(last, reply.status, retryable=retryable), wait

        def give_up(error: ProviderError, reason: str) -> ProviderError:
            return self._error(f"{last}; {reason}", error.status, retryable=True)

        with trio.move_on_after(self._timeout_s):
            return await retry_attempts(
                attempt,
                policy=self._retry,
                deadline=trio.current_time() + self._timeout_s,
                rng=self._rng,
                give_up=give_up,
            )
        after = f" (last failure: {last})" if last else ""
        raise self._error(f"did not answer within {self._timeout_s:g} s{after}", retryable=True)

    def _refusal(self, reply: Reply) -> tuple[str, bool, float | None]:
        """Message, retryability and requested delay of a non-2xx reply."""
        payload = reply.json()
        error = payload.get("error") if isinstance(payload, Mapping) else None
        detail = envelope_message(payload)
        if detail is None:
            detail = self._quote(reply.body)
        elif isinstance(error, Mapping) and isinstance(error.get("type"), str):
            detail = f"{error['type']}: {self._cut(detail)}"
        request_id = reply.headers.get("request-id") or reply.headers.get("x-request-id")
        message = f"returned HTTP {reply.status}: {self._cut(detail)}"
        message += f" (request id {request_id})" if request_id else ""
        if reply.status in (401, 403):
            # Retrying with the same key only burns quota and may lock the account.
            self._auth_failure = (
                self._client.redact(
                    f"{self.vendor} rejected this API key earlier (HTTP {reply.status}); not"
                    " sent. Build a new generator with a valid key."
                ),
                reply.status,
            )
            return message, False, None
        retryable = reply.status in (408, 409, 429) or reply.status >= 500
        override = reply.headers.get("x-should-retry", "").strip().lower()
        if override in ("true", "false"):
            retryable = override == "true"
        return message, retryable, _retry_after(reply.headers)

    def _error(
        self, message: str, status: int | None = None, *, retryable: bool = False
    ) -> ProviderError:
        text = self._client.redact(f"{self.vendor} ({self._client.label}) {message}")
        return ProviderError(text, status=status, retryable=retryable)

    def _cut(self, text: str) -> str:
        # Redact before cutting, so a cut cannot leave half a secret unmatched.
        text = " ".join(self._client.redact(text).split())
        return text[:_EXCERPT_CHARS] + "…" if len(text) > _EXCERPT_CHARS else text

    def _quote(self, raw: str | bytes) -> str:
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
        return repr(self._cut(text)) if text.strip() else "nothing"


def _texts(content: object) -> str | None:
    """A plain string, or the joined ``text`` of a list of content blocks."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts = [
        block["text"]
        for block in content
        if isinstance(block, Mapping)
        and block.get("type", "text") == "text"
        and isinstance(block.get("text"), str)
    ]
    return "".join(parts) if parts else None


class OpenAICompatibleGenerator(_JsonGenerator):
    """A ``POST chat/completions`` server: OpenAI, vLLM, llama.cpp, Ollama, LiteLLM …

    Args:
        model: the model name the server expects.
        api_key: sent as ``Authorization: Bearer``; local servers need none.
        base_url: https, or http on loopback; up to and including ``/v1``.
        response_format: ``json_schema`` sends the schema for constrained
            decoding (``strict: false``); ``json_object`` asks only for JSON
            and puts the schema in a system message instead.
        temperature, max_tokens: sampling options, sent as given.
        timeout_s: budget of one call, retries and waits included.
        retry: attempts after the first and their back-off.
        transport: an httpx async transport instead of the network (tests).
        rng: jitter source.
    """

    vendor = "OpenAI-compatible server"
    scheme = "openai-compatible"
    path = "chat/completions"

    def __init__(
        self,
        *,
        model: str,
        api_key: str | None = None,
        base_url: str = "https://api.openai.com/v1",
        response_format: Literal["json_schema", "json_object"] = "json_schema",
        temperature: float = 0.0,
        max_tokens: int = 1024,
        timeout_s: float = 15.0,
        retry: RetryPolicy = GENERATOR_RETRY,
        transport: AsyncTransport | None = None,
        rng: Callable[[], float] | None = None,
    ) -> None:
        if response_format not in ("json_schema", "json_object"):
            raise ConfigError(
                f"response_format must be json_schema or json_object, got {response_format!r}"
            )
        self.response_format = response_format
        self.temperature = temperature
        self.max_tokens = max_tokens
        super().__init__(model, api_key, base_url, timeout_s, retry, transport, rng)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _body(self, prompt: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        messages = [{"role": "user", "content": prompt}]
        if self.response_format == "json_schema":
            schema_spec = {"name": "answer", "schema": dict(schema), "strict": False}
            fmt: dict[str, Any] = {"type": "json_schema", "json_schema": schema_spec}
        else:
            # json_object mode never sees the schema, and OpenAI wants "JSON" in a message.
            messages.insert(0, {"role": "system", "content": _system_prompt(schema)})
            fmt = {"type": "json_object"}
        return {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "response_format": fmt,
        }

    def _text(self, payload: Mapping[str, Any]) -> str | None:
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            return None
        message = choices[0].get("message")
        return _texts(message.get("content")) if isinstance(message, Mapping) else None


class AnthropicGenerator(_JsonGenerator):
    """Anthropic's ``POST /v1/messages``; the schema goes in the system prompt.

    Args:
        model: e.g. ``claude-haiku-4-5``.
        api_key: sent as ``x-api-key``; missing or blank fails each call
            without a network request.
        base_url, max_tokens, temperature, timeout_s, retry, transport, rng:
            as for :class:`OpenAICompatibleGenerator`. 529 (overloaded) is retried.
    """

    vendor = "Anthropic"
    scheme = "anthropic"
    path = "v1/messages"
    needs_key = True

    def __init__(
        self,
        *,
        model: str,
        api_key: str | None,
        base_url: str = "https://api.anthropic.com",
        max_tokens: int = 1024,
        temperature: float = 0.0,
        timeout_s: float = 15.0,
        retry: RetryPolicy = GENERATOR_RETRY,
        transport: AsyncTransport | None = None,
        rng: Callable[[], float] | None = None,
    ) -> None:
        self.max_tokens = max_tokens
        self.temperature = temperature
        super().__init__(model, api_key, base_url, timeout_s, retry, transport, rng)

    def _headers(self) -> dict[str, str]:
        headers = {"anthropic-version": "2023-06-01"}
        return {**headers, "x-api-key": self._api_key} if self._api_key else headers

    def _body(self, prompt: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "system": _system_prompt(schema),
            "messages": [{"role": "user", "content": prompt}],
        }

    def _text(self, payload: Mapping[str, Any]) -> str | None:
        content = payload.get("content")
        return _texts(content) if isinstance(content, list) else None


def _system_prompt(schema: Mapping[str, Any]) -> str:
    try:
        encoded = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"schema is not JSON: {exc}") from None
    return f"Answer with one JSON value matching this JSON schema, and nothing else: {encoded}"

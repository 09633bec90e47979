"""Chat models that answer with JSON: OpenAI-compatible servers and Anthropic.

Both classes are codecs on the one provider loop (:mod:`._http.async_driver`), the same
the deciders use: at most ``retry.retries + 1`` attempts inside one trio
deadline, 408/409/429/5xx retried unless ``x-should-retry`` says otherwise,
``retry-after-ms`` / ``Retry-After`` honoured only when it fits what is left of
that deadline, and an auth latch after 401/403. Every failure is a
:class:`~toolroute.ProviderError` whose message says what came back, with
credentials redacted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Literal, Protocol, Unpack
from urllib.parse import urlsplit

import attrs
import trio

from .._core.decide.json_text import extract_json
from .._core.errors import ConfigError, ProviderError
from ._deciders.wire import envelope_message
from ._http.async_driver import LoopOptions, ProviderLoop
from ._http.retry import Redactor, Reply, TransportError
from ._http.rules import (
    RetryPolicy,
    check_base_url,
    clean_api_key,
    is_retryable_status,
    url_label,
)

#: One retry; back-off as in the openai/anthropic SDKs: 0.5 s doubling, 25 % jitter.
GENERATOR_RETRY = RetryPolicy(retries=1, backoff_s=0.5, max_backoff_s=8.0, jitter=0.25)
#: Budget of one call when ``timeout_s`` is not given.
DEFAULT_TIMEOUT_S = 15.0


class ChatCodec(Protocol):
    """One chat vendor's wire format, composed into :class:`_JsonGenerator`."""

    @property
    def vendor(self) -> str:
        """Human name in messages."""
        ...

    @property
    def scheme(self) -> str:
        """Prefix of ``identity``."""
        ...

    @property
    def path(self) -> str:
        """Where requests go, under the base URL."""
        ...

    @property
    def needs_key(self) -> bool:
        """Whether a call without an API key fails before the network."""
        ...

    def headers(self, api_key: str) -> dict[str, str]:
        """The headers of every request; ``api_key`` may be empty."""
        ...

    def body(self, model: str, prompt: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        """The request body asking ``model`` for JSON matching ``schema``."""
        ...

    def text(self, payload: Mapping[str, Any]) -> str | None:
        """The answer text in a 2xx reply, or ``None`` when it has none."""
        ...


class _JsonGenerator:
    """A chat codec on the one provider loop, and the JSON extraction of its answers.

    Raises:
        ConfigError: a bad base URL, header value or timeout.

    **Resource handling**: owns a connection pool; call :meth:`aclose`.
    """

    #: Model and endpoint; part of enrichment cache keys.
    identity: str

    def __init__(
        self,
        codec: ChatCodec,
        model: str,
        api_key: str | None,
        base_url: str,
        options: LoopOptions,
    ) -> None:
        timeout_s = options.get("timeout_s")
        timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):
            raise ConfigError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self._codec = codec
        self.vendor = codec.vendor
        self.model = model
        self._api_key = clean_api_key(api_key)
        self._timeout_s = float(timeout_s)
        headers = codec.headers(self._api_key)
        self._redact = Redactor.for_headers(headers, [self._api_key])
        self._label = url_label(check_base_url(base_url))
        self._loop = ProviderLoop.connect(
            base_url,
            self,
            headers=headers,
            redactor=self._redact,
            options=options,
            retry=GENERATOR_RETRY,
        )
        self.identity = f"{codec.scheme}:{model}@{urlsplit(check_base_url(base_url)).netloc}"

    async def aclose(self) -> None:
        """Release the connection pool. Idempotent."""
        await self._loop.aclose()

    async def generate_json(self, prompt: str, schema: Mapping[str, Any]) -> object:
        """The decoded JSON answer to ``prompt``; it should match ``schema``, unchecked.

        Args:
            prompt: the user message.
            schema: the JSON schema the answer should match.

        Returns:
            The first JSON value found in the model's answer text.

        Raises:
            ProviderError: no key (when required), a latched auth failure, an
                HTTP error, the deadline, or an answer without JSON in it.
            ConfigError: ``schema`` is not JSON-serialisable.

        **Cancellation:** the whole call, retries and waits included, runs
        under one ``timeout_s`` deadline; an outer cancel scope also applies.

        **Fail-open:** none here; callers (re-rank, enrichment, the generative
        router) fail open on the ``ProviderError``.
        """
        if self._codec.needs_key and not self._api_key:
            raise ProviderError(f"{self.vendor} has no API key; pass api_key=.")
        self._loop.check_latch()
        reply = await self._loop.send(
            self._codec.path,
            self._codec.body(self.model, prompt, schema),
            deadline=trio.current_time() + self._timeout_s,
            budget_s=self._timeout_s,
        )
        payload = reply.json()
        text = self._codec.text(payload) if isinstance(payload, Mapping) else None
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

    # -- the loop's codec (ErrorCodec) --------------------------------------

    def refused(self, reply: Reply) -> ProviderError:
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
        return self._error(message, reply.status, retryable=is_retryable_status(reply.status))

    def is_auth_failure(self, error: ProviderError) -> bool:
        return error.status in (401, 403)

    def latched(self, cause: ProviderError) -> ProviderError:
        return ProviderError(
            self._redact(
                f"{self.vendor} rejected this API key earlier (HTTP {cause.status}); not"
                " sent. Build a new generator with a valid key."
            ),
            status=cause.status,
            retryable=False,
        )

    def unreachable(self, failure: TransportError) -> ProviderError:
        return self._error(str(failure), retryable=True)

    def too_late(self, budget_s: float, last: ProviderError | None) -> ProviderError:
        after = f" (last failure: {last})" if last is not None else ""
        return self._error(f"did not answer within {budget_s:g} s{after}", retryable=True)

    def given_up(self, error: ProviderError, reason: str) -> ProviderError:
        return ProviderError(f"{error}; {reason}", status=error.status, retryable=True)

    def _error(
        self, message: str, status: int | None = None, *, retryable: bool = False
    ) -> ProviderError:
        text = self._redact(f"{self.vendor} ({self._label}) {message}")
        return ProviderError(text, status=status, retryable=retryable)

    def _cut(self, text: str) -> str:
        return self._redact.cut(text)

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


@attrs.frozen
class OpenAIChatCodec:
    """``POST chat/completions`` with ``response_format`` (see :class:`OpenAICompatibleGenerator`)."""

    response_format: Literal["json_schema", "json_object"]
    temperature: float
    max_tokens: int
    vendor: str = "OpenAI-compatible server"
    scheme: str = "openai-compatible"
    path: str = "chat/completions"
    needs_key: bool = False

    def headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def body(self, model: str, prompt: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        messages = [{"role": "user", "content": prompt}]
        if self.response_format == "json_schema":
            schema_spec = {"name": "answer", "schema": dict(schema), "strict": False}
            fmt: dict[str, Any] = {"type": "json_schema", "json_schema": schema_spec}
        else:
            # json_object mode never sees the schema, and OpenAI wants "JSON" in a message.
            messages.insert(0, {"role": "system", "content": _system_prompt(schema)})
            fmt = {"type": "json_object"}
        return {
            "model": model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "response_format": fmt,
        }

    def text(self, payload: Mapping[str, Any]) -> str | None:
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            return None
        message = choices[0].get("message")
        return _texts(message.get("content")) if isinstance(message, Mapping) else None


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
        options: the loop options (:class:`~._http.async_driver.LoopOptions`): ``timeout_s``
            (budget of one call, retries and waits included; 15 s by default),
            ``retry``, ``transport`` and ``rng``.
    """

    def __init__(
        self,
        *,
        model: str,
        api_key: str | None = None,
        base_url: str = "https://api.openai.com/v1",
        response_format: Literal["json_schema", "json_object"] = "json_schema",
        temperature: float = 0.0,
        max_tokens: int = 1024,
        **options: Unpack[LoopOptions],
    ) -> None:
        if response_format not in ("json_schema", "json_object"):
            raise ConfigError(
                f"response_format must be json_schema or json_object, got {response_format!r}"
            )
        self.response_format = response_format
        self.temperature = temperature
        self.max_tokens = max_tokens
        codec = OpenAIChatCodec(response_format, temperature, max_tokens)
        super().__init__(codec, model, api_key, base_url, options)


@attrs.frozen
class AnthropicCodec:
    """Anthropic's ``POST /v1/messages``, the schema in the system prompt."""

    max_tokens: int
    temperature: float
    vendor: str = "Anthropic"
    scheme: str = "anthropic"
    path: str = "v1/messages"
    needs_key: bool = True

    def headers(self, api_key: str) -> dict[str, str]:
        headers = {"anthropic-version": "2023-06-01"}
        return {**headers, "x-api-key": api_key} if api_key else headers

    def body(self, model: str, prompt: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "model": model,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "system": _system_prompt(schema),
            "messages": [{"role": "user", "content": prompt}],
        }

    def text(self, payload: Mapping[str, Any]) -> str | None:
        content = payload.get("content")
        return _texts(content) if isinstance(content, list) else None


class AnthropicGenerator(_JsonGenerator):
    """Anthropic's ``POST /v1/messages``; the schema goes in the system prompt.

    Args:
        model: e.g. ``claude-haiku-4-5``.
        api_key: sent as ``x-api-key``; missing or blank fails each call
            without a network request.
        base_url, max_tokens, temperature, options: as for
            :class:`OpenAICompatibleGenerator`. 529 (overloaded) is retried, as every 5xx.
    """

    def __init__(
        self,
        *,
        model: str,
        api_key: str | None,
        base_url: str = "https://api.anthropic.com",
        max_tokens: int = 1024,
        temperature: float = 0.0,
        **options: Unpack[LoopOptions],
    ) -> None:
        self.max_tokens = max_tokens
        self.temperature = temperature
        super().__init__(AnthropicCodec(max_tokens, temperature), model, api_key, base_url, options)


def _system_prompt(schema: Mapping[str, Any]) -> str:
    try:
        encoded = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"schema is not JSON: {exc}") from None
    return f"Answer with one JSON value matching this JSON schema, and nothing else: {encoded}"

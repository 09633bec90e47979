"""An :class:`~toolroute.providers.Embedder` over OpenAI-compatible ``/embeddings``.

Works with OpenAI itself and with the servers that copy its wire format
(Ollama, vLLM, text-embeddings-inference, LiteLLM)::

    POST {base_url}/embeddings  {"model": ..., "input": [texts]}
    200 {"data": [{"index": i, "embedding": [floats]}, ...]}
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

import attrs
import numpy as np
import numpy.typing as npt

from ..._core.errors import ConfigError, ProviderError
from .._http.rules import RetryPolicy, check_base_url
from .._http.rules import number_check as _number
from .._http.transport import JsonClient, Transport

DEFAULT_BASE_URL = "https://api.openai.com/v1"

# Widths of OpenAI's own models, so the usual setup needs no probe request.
# Only trusted for api.openai.com: a local server may reuse a name for another model.
_OPENAI_HOST = "api.openai.com"
_OPENAI_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
_PROBE_TEXT = "dimension probe"


def _env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def _default_base_url() -> str:
    return _env("OPENAI_BASE_URL") or DEFAULT_BASE_URL


def _default_api_key() -> str | None:
    return _env("OPENAI_API_KEY")


def _blank_to_none(value: str | None) -> str | None:
    """Blank keys count as absent; surrounding whitespace (from a key file) is dropped."""
    if value is None:
        return None
    value = value.strip()
    return value or None


def _check_api_key(_instance: object, _attribute: attrs.Attribute[Any], value: object) -> None:
    # The message never quotes the key.
    if value is None:
        return
    if not isinstance(value, str):
        raise ConfigError(f"api_key must be a string, got {type(value).__name__}")
    if not value.isascii() or any(ch.isspace() or not ch.isprintable() for ch in value):
        raise ConfigError("api_key must be printable ASCII without whitespace")


def _check_model(_instance: object, _attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("model must be a non-empty string")
    if any(not ch.isprintable() for ch in value):
        raise ConfigError("model must not contain control characters")


def _check_dim(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _number(minimum=1, integer=True)(instance, attribute, value)


@attrs.define(kw_only=True, eq=False)
class OpenAIEmbedder:
    """Embeds texts with a remote OpenAI-compatible server.

    Args:
        model: the model name the server knows, e.g. ``"text-embedding-3-small"``
            or ``"nomic-embed-text"``.
        base_url: the API root; defaults to ``$OPENAI_BASE_URL``, else
            ``https://api.openai.com/v1``. Must be https, or http on loopback.
        api_key: defaults to ``$OPENAI_API_KEY``. Blank counts as absent, and
            absent is allowed (local servers such as Ollama, vLLM or TEI): then
            no ``Authorization`` header is sent.
        dim: the vector width. When omitted it is taken from a table of
            OpenAI's models if ``base_url`` is api.openai.com; otherwise the
            constructor learns it with one short probe request. Every response
            is checked against it.
        max_batch: the most texts per request; longer inputs are split.
        deadline_s: budget for each request, retries and waits included.
        connect_timeout_s, read_timeout_s: per-attempt network caps.
        retry: how 429, 5xx, timeouts and connection errors are retried.
        transport: an httpx transport replacing the network (tests).

    Raises:
        ConfigError: an option is invalid (messages never quote the key or URL).
        ProviderError: the width had to be probed and the probe failed.

    **Error handling**: :meth:`embed` raises :class:`~toolroute.ProviderError`
    for HTTP failures and for responses that break the contract (wrong count,
    wrong width, non-numbers, NaN or infinity, zero vectors). After a 401 or
    403 every call fails at once; build a new embedder with a valid key.

    **Resource handling**: holds a connection pool; call :meth:`close` or use
    the embedder as a context manager.
    """

    model: str = attrs.field(validator=_check_model)
    base_url: str = attrs.field(factory=_default_base_url, converter=check_base_url)
    api_key: str | None = attrs.field(
        factory=_default_api_key, converter=_blank_to_none, validator=_check_api_key, repr=False
    )
    _dim_hint: int | None = attrs.field(default=None, alias="dim", validator=_check_dim, repr=False)
    max_batch: int = attrs.field(default=96, validator=_number(minimum=1, integer=True))
    deadline_s: float = attrs.field(default=30.0, validator=_number(minimum=0, exclusive=True))
    connect_timeout_s: float = attrs.field(
        default=5.0, validator=_number(minimum=0, exclusive=True)
    )
    read_timeout_s: float = attrs.field(default=20.0, validator=_number(minimum=0, exclusive=True))
    retry: RetryPolicy = attrs.field(factory=RetryPolicy)
    transport: Transport | None = attrs.field(default=None, repr=False)

    #: ``openai-compatible:<model>@<host><path>``; never includes the key.
    identity: str = attrs.field(init=False)
    dim: int = attrs.field(init=False)
    _client: JsonClient = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        self.identity = f"openai-compatible:{self.model}@{parts.netloc}{parts.path}"
        self._client = JsonClient(
            self.base_url,
            headers={"Authorization": f"Bearer {self.api_key}"} if self.api_key else {},
            secrets=(self.api_key,) if self.api_key else (),
            connect_timeout_s=self.connect_timeout_s,
            read_timeout_s=self.read_timeout_s,
            retry=self.retry,
            transport=self.transport,
        )
        dim = self._dim_hint
        if dim is None and parts.hostname == _OPENAI_HOST:
            dim = _OPENAI_DIMS.get(self.model)
        if dim is None:
            try:
                dim = self._embed_batch([_PROBE_TEXT], dim=None).shape[1]
            except BaseException:
                # The caller never gets the object, so nobody else could close it.
                self._client.close()
                raise
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Vectors for ``texts``.

        Args:
            texts: the texts, sent ``max_batch`` at a time.

        Returns:
            float32 of shape ``(len(texts), dim)``, rows L2-normalised (the
            provider's normalisation is not trusted). Empty input gives
            ``(0, dim)`` without a request.

        Raises:
            ProviderError: a request failed or a response broke the contract.
            TypeError: ``texts`` is a single string or holds a non-string.

        **Cancellation**: synchronous, meant for a worker thread; each request
        is bounded by ``deadline_s``.
        """
        if isinstance(texts, str):
            # A str is a Sequence[str]; embedding it character by character is never meant.
            raise TypeError("texts must be a sequence of strings, not a single string")
        batch = list(texts)
        for position, text in enumerate(batch):
            if not isinstance(text, str):
                raise TypeError(f"texts[{position}] must be a string, got {type(text).__name__}")
        if not batch:
            return np.zeros((0, self.dim), dtype=np.float32)
        chunks = [
            self._embed_batch(batch[start : start + self.max_batch], dim=self.dim)
            for start in range(0, len(batch), self.max_batch)
        ]
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    def close(self) -> None:
        """Close the connection pool. Idempotent."""
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _embed_batch(self, texts: list[str], *, dim: int | None) -> npt.NDArray[np.float32]:
        body = self._client.post_json(
            "embeddings", {"model": self.model, "input": texts}, deadline_s=self.deadline_s
        )
        return vectors_from_response(body, count=len(texts), dim=dim, source=self.identity)


def _kind(value: object) -> str:
    """How a JSON value is described in messages: its type, never its content."""
    return "nothing" if value is None else f"a {type(value).__name__}"


def vectors_from_response(
    body: object, *, count: int, dim: int | None, source: str = "embeddings provider"
) -> npt.NDArray[np.float32]:
    """Check an ``/embeddings`` response and turn it into unit rows.

    Args:
        body: the decoded JSON response.
        count: how many texts were sent.
        dim: the expected width, or ``None`` to accept the first row's width.
        source: names the provider in error messages.

    Returns:
        float32 of shape ``(count, dim)`` in input order (by ``index``),
        each row L2-normalised.

    Raises:
        ProviderError: the response breaks the contract; the message says what
            was expected and what came, quoting types and sizes, not contents.
    """

    def bad(message: str) -> ProviderError:
        return ProviderError(f"{source}: {message}", status=None, retryable=False)

    if not isinstance(body, dict):
        raise bad(f"expected a JSON object with a 'data' list, got {_kind(body)}")
    data = body.get("data")
    if not isinstance(data, list):
        raise bad(f"expected a 'data' list in the response, got {_kind(data)}")
    if len(data) != count:
        raise bad(f"expected {count} vectors for {count} inputs, got {len(data)}")
    rows: list[list[Any] | None] = [None] * count
    for position, item in enumerate(data):
        if not isinstance(item, dict):
            raise bad(f"expected data[{position}] to be an object, got {_kind(item)}")
        index = item.get("index")
        # type() rather than isinstance(): JSON true must not pass as index 1.
        if type(index) is not int or not 0 <= index < count:
            shown = index if type(index) is int else _kind(index)
            raise bad(f"expected data[{position}].index in [0, {count}), got {shown}")
        if rows[index] is not None:
            raise bad(f"expected each index once, got index {index} twice")
        embedding = item.get("embedding")
        if not isinstance(embedding, list):
            raise bad(
                f"expected data[{position}].embedding to be a list of numbers,"
                f" got {_kind(embedding)}"
            )
        rows[index] = embedding
    checked: list[list[Any]] = [row for row in rows if row is not None]
    # Every index in range and none repeated, with len(data) == count, fills every slot.
    assert len(checked) == count
    width = len(checked[0]) if dim is None else dim
    if width == 0:
        raise bad("expected non-empty vectors, got empty ones")
    for index, row in enumerate(checked):
        if len(row) != width:
            raise bad(
                f"expected {width}-dimensional vectors, got {len(row)} values for input {index}"
            )
        # Bulk type check at C speed; bool is excluded because type(True) is bool.
        odd = set(map(type, row)) - {int, float}
        if odd:
            names = ", ".join(sorted(t.__name__ for t in odd))
            raise bad(f"expected numbers in the vector for input {index}, got {names}")
    try:
        matrix = np.array(checked, dtype=np.float64)
    except OverflowError:
        raise bad("expected numbers that fit a float, got a larger integer") from None
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        first = int(np.argmin(finite))
        raise bad(f"expected finite numbers, got NaN or infinity for input {first}")
    # Scale by the largest component first so squaring cannot overflow or underflow.
    scale = np.abs(matrix).max(axis=1)
    if not scale.all():
        first = int(np.argmin(scale))
        raise bad(f"expected non-zero vectors, got the zero vector for input {first}")
    matrix /= scale[:, None]
    matrix /= np.sqrt(np.einsum("ij,ij->i", matrix, matrix))[:, None]
    return matrix.astype(np.float32)

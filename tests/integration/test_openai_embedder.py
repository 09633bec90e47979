"""OpenAIEmbedder against a real HTTP server on 127.0.0.1 speaking OpenAI's wire format."""

from __future__ import annotations

import json
import math
import random
import socket
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from loopback.scripted import Scripted, ScriptedServer, serve_scripted

from toolroute import ConfigError, ProviderError
from toolroute.providers import Embedder, RetryPolicy
from toolroute.providers._embedders.openai_compatible import OpenAIEmbedder

DIM = 4
# No generic credential shape: only configured-key redaction can hide it.
KEY = "local-embedding-key." + "Qz7" * 10
FAST = RetryPolicy(retries=1, backoff_s=0.05, max_backoff_s=0.1, jitter=0.0)


def raw_vector(text: str, dim: int = DIM) -> list[float]:
    """Deterministic, deliberately unnormalised vector for ``text``."""
    rng = np.random.default_rng(zlib.crc32(text.encode()))
    return [float(x) for x in rng.normal(size=dim) * 3.0]


def expected(texts: list[str], dim: int = DIM) -> np.ndarray[Any, np.dtype[np.float64]]:
    rows = np.array([raw_vector(t, dim) for t in texts])
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def success_body(texts: list[str], dim: int = DIM) -> dict[str, Any]:
    data = [
        {"object": "embedding", "index": i, "embedding": raw_vector(t, dim)}
        for i, t in enumerate(texts)
    ]
    # Providers need not answer in input order; the client must sort by index.
    random.Random(len(texts)).shuffle(data)
    return {"object": "list", "data": data, "model": "m", "usage": {"prompt_tokens": 1}}


def error_body(message: str, type_: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


Reply = Scripted
FakeOpenAI = ScriptedServer


@contextmanager
def embedding_server() -> Iterator[FakeOpenAI]:
    """OpenAI's ``/v1/embeddings``: unscripted replies embed the input; a callable body is
    called with the input texts."""
    with serve_scripted(
        lambda _path, payload: success_body(payload["input"]),
        prefix="/v1",
        argument=lambda payload: payload["input"],
    ) as srv:
        yield srv


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with embedding_server() as srv:
        yield srv


@pytest.fixture
def make(server: FakeOpenAI) -> Iterator[Callable[..., OpenAIEmbedder]]:
    made: list[OpenAIEmbedder] = []

    def build(**kwargs: Any) -> OpenAIEmbedder:
        options: dict[str, Any] = {
            "model": "text-embedding-test",
            "base_url": server.base_url,
            "api_key": KEY,
            "dim": DIM,
            "retry": FAST,
            "deadline_s": 5.0,
        }
        options.update(kwargs)
        embedder = OpenAIEmbedder(**options)
        made.append(embedder)
        return embedder

    yield build
    for embedder in made:
        embedder.close()


def assert_clean(exc: ProviderError) -> None:
    assert KEY not in str(exc)
    assert KEY[8:] not in str(exc)


def test_success_sorts_by_index_and_normalises(server: FakeOpenAI, make: Any) -> None:
    texts = ["read a file", "send an email", "search the web", "x"]
    with make() as embedder:
        vectors = embedder.embed(texts)
    assert isinstance(embedder, Embedder)
    assert vectors.dtype == np.float32
    assert vectors.shape == (4, DIM)
    np.testing.assert_allclose(vectors, expected(texts), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    [seen] = server.seen
    assert seen.path == "/v1/embeddings"
    assert seen.payload == {"model": "text-embedding-test", "input": texts}
    assert seen.headers["Authorization"] == f"Bearer {KEY}"
    assert seen.headers["Content-Type"] == "application/json"


def test_splits_into_max_batch_requests_in_order(server: FakeOpenAI, make: Any) -> None:
    texts = [f"tool {i}" for i in range(5)]
    vectors = make(max_batch=2).embed(texts)
    assert [len(s.payload["input"]) for s in server.seen] == [2, 2, 1]
    np.testing.assert_allclose(vectors, expected(texts), rtol=1e-6, atol=1e-6)


def test_empty_input_makes_no_request(server: FakeOpenAI, make: Any) -> None:
    vectors = make().embed([])
    assert vectors.shape == (0, DIM)
    assert vectors.dtype == np.float32
    assert server.seen == []


def test_single_string_is_rejected(make: Any) -> None:
    with pytest.raises(TypeError, match="single string"):
        make().embed("read a file")


def test_no_key_sends_no_authorization(
    server: FakeOpenAI, make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "   ")
    embedder = make(api_key=None)
    assert embedder.api_key is None
    embedder.embed(["a"])
    assert "Authorization" not in server.seen[0].headers


def test_key_and_base_url_default_from_env(
    server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url + "/")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with OpenAIEmbedder(model="m", dim=DIM) as embedder:
        embedder.embed(["a"])
    assert server.seen[0].headers["Authorization"] == f"Bearer {KEY}"
    port = server.server_address[1]
    assert embedder.identity == f"openai-compatible:m@127.0.0.1:{port}/v1"
    assert KEY not in repr(embedder)


def test_dim_is_probed_when_not_given(server: FakeOpenAI, make: Any) -> None:
    server.then(Reply(body=lambda texts: success_body(texts, dim=7)))
    embedder = make(dim=None)
    assert embedder.dim == 7
    assert len(server.seen) == 1


def test_known_openai_model_needs_no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    # No server: constructing must not touch the network.
    with OpenAIEmbedder(model="text-embedding-3-small", api_key=KEY) as embedder:
        assert embedder.dim == 1536
        assert embedder.identity == "openai-compatible:text-embedding-3-small@api.openai.com/v1"


def test_429_with_retry_after_waits_then_succeeds(server: FakeOpenAI, make: Any) -> None:
    server.then(
        Reply(
            429,
            error_body("Rate limit reached", "requests", "rate_limit_exceeded"),
            headers={"Retry-After": "1"},
        ),
    )
    vectors = make().embed(["a", "b"])
    assert vectors.shape == (2, DIM)
    assert len(server.seen) == 2
    waited = server.seen[1].at - server.seen[0].at
    # At least the Retry-After; waiting it exactly is test_http_rules' (pure) concern, and
    # real I/O on a loaded machine adds its own delay.
    assert 0.95 <= waited < 10.0


def test_429_with_retry_after_beyond_budget_fails_at_once(server: FakeOpenAI, make: Any) -> None:
    server.then(
        Reply(
            429,
            error_body("Rate limit reached", "requests", "rate_limit_exceeded"),
            headers={"Retry-After": "30"},
        ),
    )
    embedder = make(deadline_s=20.0)
    started = time.monotonic()
    with pytest.raises(ProviderError, match="Retry-After") as info:
        embedder.embed(["a"])
    assert time.monotonic() - started < 10.0  # well below the 20 s budget: no pointless wait
    assert info.value.status == 429
    assert info.value.retryable
    assert "rate_limit_exceeded" in str(info.value)
    assert len(server.seen) == 1


def test_500_then_success(server: FakeOpenAI, make: Any) -> None:
    server.then(Reply(500, error_body("The server had an error", "server_error", None)))
    assert make().embed(["a"]).shape == (1, DIM)
    assert len(server.seen) == 2


def test_500_twice_is_retryable_error(server: FakeOpenAI, make: Any) -> None:
    boom = Reply(500, error_body("The server had an error", "server_error", None))
    server.then(boom, boom)
    with pytest.raises(ProviderError, match="HTTP 500") as info:
        make().embed(["a"])
    assert info.value.status == 500
    assert info.value.retryable
    assert "gave up after 2 attempts" in str(info.value)
    assert len(server.seen) == 2


def test_401_latches_without_further_requests(server: FakeOpenAI, make: Any) -> None:
    server.then(
        Reply(
            401,
            error_body(
                f"Incorrect API key provided: {KEY}.", "invalid_request_error", "invalid_api_key"
            ),
        ),
    )
    embedder = make()
    with pytest.raises(ProviderError, match="HTTP 401") as first:
        embedder.embed(["a"])
    assert first.value.status == 401
    assert not first.value.retryable
    assert "invalid_api_key" in str(first.value)
    assert_clean(first.value)
    with pytest.raises(ProviderError, match="earlier request was refused") as second:
        embedder.embed(["a"])
    assert not second.value.retryable
    assert len(server.seen) == 1


def test_400_is_not_retried(server: FakeOpenAI, make: Any) -> None:
    server.then(Reply(400, error_body("'$.input' is invalid.", "invalid_request_error", None)))
    with pytest.raises(ProviderError, match="input' is invalid") as info:
        make().embed([""])
    assert info.value.status == 400
    assert not info.value.retryable
    assert len(server.seen) == 1


def test_hang_times_out(server: FakeOpenAI, make: Any) -> None:
    server.then(Reply(hang_s=30.0))  # released when the server stops
    embedder = make(read_timeout_s=0.3, retry=RetryPolicy(retries=0))
    started = time.monotonic()
    with pytest.raises(ProviderError, match="timed out") as info:
        embedder.embed(["a"])
    assert time.monotonic() - started < 5.0  # the read timeout, not the hang (generous)
    assert info.value.retryable
    assert info.value.status is None


def test_connection_refused_is_retryable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens on the port any more.
    embedder = OpenAIEmbedder(
        model="m", base_url=f"http://127.0.0.1:{port}", api_key=KEY, dim=DIM, retry=FAST
    )
    with embedder, pytest.raises(ProviderError, match="connection failed") as info:
        embedder.embed(["a"])
    assert info.value.retryable
    assert_clean(info.value)


def test_garbage_json(server: FakeOpenAI, make: Any) -> None:
    server.then(Reply(body=b"<html>upstream " + KEY.encode() + b" broke</html>"))
    with pytest.raises(ProviderError, match="expected a JSON body") as info:
        make().embed(["a"])
    assert not info.value.retryable
    assert "upstream" in str(info.value)
    assert_clean(info.value)
    assert len(server.seen) == 1


def test_a_body_in_a_declared_charset_is_read(server: FakeOpenAI, make: Any) -> None:
    body = {**success_body(["a"]), "note": "r\u00e9sum\u00e9"}
    raw = json.dumps(body, ensure_ascii=False).encode("latin-1")
    server.then(Reply(body=raw, headers={"Content-Type": "application/json; charset=latin-1"}))
    np.testing.assert_allclose(make().embed(["a"]), expected(["a"]), rtol=1e-6, atol=1e-6)


def test_missing_data(server: FakeOpenAI, make: Any) -> None:
    server.then(Reply(body={"object": "list"}))
    with pytest.raises(ProviderError, match="expected a 'data' list in the response, got nothing"):
        make().embed(["a"])


def test_wrong_vector_count(server: FakeOpenAI, make: Any) -> None:
    server.then(Reply(body=lambda texts: success_body(texts[:-1])))
    with pytest.raises(ProviderError, match="expected 3 vectors for 3 inputs, got 2"):
        make().embed(["a", "b", "c"])


def test_wrong_dims(server: FakeOpenAI, make: Any) -> None:
    server.then(Reply(body=lambda texts: success_body(texts, dim=DIM + 1)))
    with pytest.raises(ProviderError, match="expected 4-dimensional vectors, got 5 values"):
        make().embed(["a"])


def test_nan(server: FakeOpenAI, make: Any) -> None:
    def with_nan(texts: list[str]) -> dict[str, Any]:
        body = success_body(texts)
        body["data"][0]["embedding"][1] = math.nan  # json.dumps writes the NaN literal
        return body

    server.then(Reply(body=with_nan))
    with pytest.raises(ProviderError, match="NaN or infinity"):
        make().embed(["a", "b"])


def test_non_numeric_values(server: FakeOpenAI, make: Any) -> None:
    def with_string(texts: list[str]) -> dict[str, Any]:
        body = success_body(texts)
        body["data"][0]["embedding"][0] = "0.5"
        return body

    server.then(Reply(body=with_string))
    with pytest.raises(ProviderError, match="expected numbers in the vector for input 0, got str"):
        make().embed(["a"])


def test_bad_base_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="https"):
        OpenAIEmbedder(model="m", base_url="http://example.com/v1", dim=DIM)

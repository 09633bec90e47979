"""One retry policy for every remote client: a decider, a generator and the embedder.

Each rule of the shared policy (``toolroute.providers._http.rules``) is checked on all
three against real loopback servers: which statuses are retried, ``x-should-retry``,
``retry-after-ms``, and the base-URL rule.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from loopback.decision_vendors import Fault, serve_vendor
from loopback.scripted import Scripted as EmbeddingReply
from test_openai_embedder import embedding_server

from toolroute import ConfigError, ProviderError
from toolroute.decisions import BooleanQuestion, DecisionRequest
from toolroute.providers import (
    OpenAICompatibleGenerator,
    OpenAIEmbedder,
    RetryPolicy,
    TypeSafeDecider,
)

#: A key of no generic credential shape, so only configured-key redaction can hide it.
KEY = "Zq7.tLm_94Tbx-Kw"
FAST = RetryPolicy(retries=1, backoff_s=0.05, max_backoff_s=0.05, jitter=0.0)
REQUEST = DecisionRequest(state="s", questions={"q": BooleanQuestion("Is it?")})

Call = Callable[[], Awaitable[object]]


async def through_decider(status: int, headers: dict[str, str]) -> tuple[int, Exception | None]:
    """Requests seen and the error raised when the first reply is ``status``, then success."""
    with serve_vendor("typesafe", api_key=KEY) as server:
        server.fault = [Fault.error(status, headers=headers)]
        decider = TypeSafeDecider(api_key=KEY, base_url=server.base_url, retry=FAST)
        try:
            await decider.decide(REQUEST)
            error: Exception | None = None
        except ProviderError as exc:
            error = exc
        finally:
            await decider.aclose()
        return len(server.requests), error


async def through_generator(status: int, headers: dict[str, str]) -> tuple[int, Exception | None]:
    with serve_vendor("typesafe", api_key=KEY) as server:
        server.completion_text = '{"ok": true}'
        server.fault = [Fault.error(status, headers=headers)]
        generator = OpenAICompatibleGenerator(
            model="m", api_key=KEY, base_url=server.base_url + "/v1", retry=FAST
        )
        try:
            await generator.generate_json("p", {"type": "object"})
            error: Exception | None = None
        except ProviderError as exc:
            error = exc
        finally:
            await generator.aclose()
        return len(server.requests), error


async def through_embedder(status: int, headers: dict[str, str]) -> tuple[int, Exception | None]:
    with embedding_server() as server:
        server.then(EmbeddingReply(status, {"error": {"message": "no"}}, headers=headers))
        embedder = OpenAIEmbedder(
            model="m", base_url=server.base_url, api_key=KEY, dim=4, retry=FAST, deadline_s=5.0
        )
        try:
            embedder.embed(["a"])
            error: Exception | None = None
        except ProviderError as exc:
            error = exc
        finally:
            embedder.close()
        return len(server.seen), error


CLIENTS = {
    "decider": through_decider,
    "generator": through_generator,
    "embedder": through_embedder,
}


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("status", [408, 409, 429, 500, 503, 529])
async def test_every_client_retries_the_same_statuses(client: str, status: int) -> None:
    requests, error = await CLIENTS[client](status, {})
    assert error is None
    assert requests == 2


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("status", [400, 404, 422])
async def test_every_client_does_not_retry_a_client_error(client: str, status: int) -> None:
    requests, error = await CLIENTS[client](status, {})
    assert isinstance(error, ProviderError)
    assert not error.retryable
    assert requests == 1


@pytest.mark.parametrize("client", CLIENTS)
async def test_x_should_retry_false_stops_a_retryable_status(client: str) -> None:
    requests, error = await CLIENTS[client](503, {"x-should-retry": "false"})
    assert isinstance(error, ProviderError)
    assert not error.retryable
    assert requests == 1


@pytest.mark.parametrize("client", CLIENTS)
async def test_x_should_retry_true_retries_a_client_error(client: str) -> None:
    requests, error = await CLIENTS[client](400, {"x-should-retry": "true"})
    assert error is None
    assert requests == 2


@pytest.mark.parametrize("client", CLIENTS)
async def test_retry_after_ms_is_honoured_by_every_client(client: str) -> None:
    # FAST backs off 0.05 s; a 0.4 s wait can only come from the header.
    started = time.monotonic()
    requests, error = await CLIENTS[client](429, {"retry-after-ms": "400"})
    assert error is None
    assert requests == 2
    assert time.monotonic() - started >= 0.4


@pytest.mark.parametrize("client", CLIENTS)
async def test_an_auth_failure_is_never_retried_even_when_the_server_asks(client: str) -> None:
    requests, error = await CLIENTS[client](401, {"x-should-retry": "true"})
    assert isinstance(error, ProviderError)
    assert error.status == 401
    assert requests == 1


@pytest.mark.parametrize(
    "build",
    [
        lambda url: TypeSafeDecider(api_key=KEY, base_url=url),
        lambda url: OpenAICompatibleGenerator(model="m", base_url=url),
        lambda url: OpenAIEmbedder(model="m", base_url=url, dim=4),
    ],
    ids=["decider", "generator", "embedder"],
)
def test_every_client_refuses_plain_http_off_loopback(build: Callable[[str], Any]) -> None:
    with pytest.raises(ConfigError, match="https"):
        build("http://models.example.com")


async def slow_retries_decider(budget_s: float) -> tuple[int, Exception | None]:
    with serve_vendor("typesafe", api_key=KEY) as server:
        server.fault = Fault.error(503, retry_after=0.4)
        decider = TypeSafeDecider(
            api_key=KEY, base_url=server.base_url, retry=MANY, timeout_s=budget_s
        )
        try:
            await decider.decide(REQUEST)
        except ProviderError as exc:
            return len(server.requests), exc
        finally:
            await decider.aclose()
        return len(server.requests), None


async def slow_retries_generator(budget_s: float) -> tuple[int, Exception | None]:
    with serve_vendor("typesafe", api_key=KEY) as server:
        server.fault = Fault.error(503, retry_after=0.4)
        generator = OpenAICompatibleGenerator(
            model="m", api_key=KEY, base_url=server.base_url + "/v1", retry=MANY, timeout_s=budget_s
        )
        try:
            await generator.generate_json("p", {"type": "object"})
        except ProviderError as exc:
            return len(server.requests), exc
        finally:
            await generator.aclose()
        return len(server.requests), None


async def slow_retries_embedder(budget_s: float) -> tuple[int, Exception | None]:
    with embedding_server() as server:
        reply = EmbeddingReply(503, {"error": {"message": "busy"}}, headers={"Retry-After": "0.4"})
        server.then(*[reply] * 60)
        embedder = OpenAIEmbedder(
            model="m", base_url=server.base_url, dim=4, retry=MANY, deadline_s=budget_s
        )
        try:
            embedder.embed(["a"])
        except ProviderError as exc:
            return len(server.seen), exc
        finally:
            embedder.close()
        return len(server.seen), None


#: Far more retries than the budget allows: only the one deadline can end the call.
MANY = RetryPolicy(retries=50, backoff_s=0.05, max_backoff_s=0.05, jitter=0.0)


@pytest.mark.parametrize(
    "call",
    [slow_retries_decider, slow_retries_generator, slow_retries_embedder],
    ids=["decider", "generator", "embedder"],
)
async def test_one_deadline_covers_every_retry_of_a_call(
    call: Callable[[float], Awaitable[tuple[int, Exception | None]]],
) -> None:
    started = time.monotonic()
    requests, error = await call(1.0)
    elapsed = time.monotonic() - started
    assert isinstance(error, ProviderError)
    assert error.retryable
    # 50 retries 0.4 s apart would take 20 s; the 1 s budget stops them after a few.
    assert 2 <= requests <= 4
    assert elapsed < 6.0

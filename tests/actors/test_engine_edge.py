"""The engine's edge: wrong arguments are a ``ConfigError`` naming them, an empty catalogue is
refused at the start, and an engine used after its block says so instead of answering."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from toolroute import Catalog, ConfigError, EngineConfig, Server, open_engine, route_servers

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message"},
    ]
)
CONFIG = EngineConfig(cache=False)


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda e: e.select(123), r"query must be a string.*got int 123"),
        (lambda e: e.select("x", max_tools=2.5), r"max_tools must be an integer of at least 0"),
        (lambda e: e.select("x", threshold=math.nan), r"threshold must be a finite number"),
        (lambda e: e.select("x", adaptive=1), r"adaptive must be True or False"),
        (lambda e: e.prepare_step(123), r"messages must be a string or a list"),
        (lambda e: e.prepare_step("x", session=7), r"session must be a string or None, got int"),
        (lambda e: e.search_tools({"query": "x"}, k=2.5), r"k must be an integer of at least 1"),
        (lambda e: e.search_tools({"query": "x"}, k=0), r"k must be an integer of at least 1"),
        (lambda e: e.search_tools({"query": "x"}, session=3), r"session must be a string or None"),
        (lambda e: e.route_servers(123), r"messages must be a string or a list"),
        (lambda e: e.route_servers("x", session=b"s"), r"session must be a string or None"),
        (
            lambda e: e.prepare_step("x", session="s" * 1025),
            r"session must be an id of at most 1024 characters, got a string of 1025",
        ),
    ],
)
async def test_a_wrong_argument_is_a_config_error_naming_it(
    autojump_clock: trio.testing.MockClock,
    call: Callable[[Any], Awaitable[object]],
    says: str,
) -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        with pytest.raises(ConfigError, match=says):
            await call(engine)


async def test_stateless_route_servers_refuses_a_query_that_is_not_text(
    autojump_clock: trio.testing.MockClock,
) -> None:
    servers = [Server("weather", "Forecasts"), Server("mail", "Email")]
    with pytest.raises(ConfigError, match=r"messages must be a string or a list"):
        await route_servers(123, servers)  # type: ignore[arg-type]


async def test_an_empty_catalogue_is_refused_when_the_engine_opens(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with pytest.raises(ConfigError, match=r"catalog holds no tools"):
        async with open_engine(Catalog([]), config=CONFIG, embedder=None):
            pass  # pragma: no cover


async def test_a_catalogue_of_the_wrong_type_is_refused_when_the_engine_opens(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with pytest.raises(ConfigError, match=r"catalog must be a Catalog.*got list"):
        async with open_engine([{"name": "x"}], config=CONFIG, embedder=None):  # type: ignore[arg-type]
            pass  # pragma: no cover


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("select", lambda e: e.select("weather")),
        ("prepare_step", lambda e: e.prepare_step("weather")),
        ("search_tools", lambda e: e.search_tools({"query": "weather"})),
        ("route_servers", lambda e: e.route_servers("weather")),
        ("update", lambda e: e.update(remove=["send_email"])),
        ("ready", lambda e: e.ready()),
        ("try_decide", lambda e: e.try_decide(None)),
    ],
)
async def test_an_engine_used_after_its_block_says_it_is_closed(
    autojump_clock: trio.testing.MockClock,
    name: str,
    call: Callable[[Any], Awaitable[object]],
) -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        pass
    with pytest.raises(RuntimeError, match=rf"Engine\.{name} was called after the engine closed"):
        await call(engine)


async def test_sync_operations_after_the_block_say_it_is_closed_too(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        pass
    with pytest.raises(RuntimeError, match=r"Engine\.providers_of was called after"):
        engine.providers_of("get_weather")
    assert engine.catalog is TOOLS  # what it served stays readable


async def test_a_langchain_conversation_selects_instead_of_showing_everything(
    autojump_clock: trio.testing.MockClock,
) -> None:
    messages = pytest.importorskip("langchain_core.messages")
    conversation = [messages.SystemMessage("be brief"), messages.HumanMessage("weather in Oslo")]
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        step = await engine.prepare_step(conversation)
        assert step.outcome.value != "skipped"
        assert step.tool_ids is not None
        assert step.tool_ids[0] == "get_weather"
        assert step.query == "weather in Oslo"


async def test_an_unreadable_conversation_is_a_config_error_from_prepare_step(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        with pytest.raises(ConfigError, match=r"message 0: unknown item type 'note'"):
            await engine.prepare_step([{"type": "note", "body": "weather"}])
        step = await engine.prepare_step([{"role": "system", "content": "be brief"}])
        assert step.outcome.value == "skipped"  # readable, with no request in it

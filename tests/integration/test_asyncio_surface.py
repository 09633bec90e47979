"""toolroute.asyncio mirrors the trio surface: same operations, same parameters."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

import toolroute
import toolroute.asyncio as toolroute_asyncio
from toolroute import Catalog, EngineConfig, ToolIndex
from toolroute._runtime.engine import Engine
from toolroute._runtime.engine import open_engine as open_trio_engine
from toolroute.asyncio import AsyncioEngine

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message"},
    ]
)


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def parameters(obj: Any) -> list[tuple[str, Any, Any, Any]]:
    return [
        (p.name, p.kind, p.default, p.annotation)
        for p in inspect.signature(obj).parameters.values()
    ]


def test_every_engine_operation_is_on_the_asyncio_engine() -> None:
    engine_names = public(Engine) | {"config"}  # an instance attribute
    assert engine_names <= public(AsyncioEngine) | {"config"}
    assert "subscribe" in public(AsyncioEngine)
    assert public(AsyncioEngine) - engine_names == set()  # nothing only one side has


@pytest.mark.parametrize("name", sorted(public(Engine)))
def test_each_operation_has_the_same_parameters(name: str) -> None:
    trio_side = getattr(Engine, name)
    asyncio_side = getattr(AsyncioEngine, name)
    if isinstance(trio_side, property):
        assert isinstance(asyncio_side, property)
        return
    assert parameters(asyncio_side) == parameters(trio_side)
    assert inspect.iscoroutinefunction(asyncio_side) == inspect.iscoroutinefunction(trio_side)


@pytest.mark.parametrize("name", ["route_servers", "decide", "try_decide"])
def test_stateless_entry_points_have_the_same_parameters(name: str) -> None:
    assert parameters(getattr(toolroute_asyncio, name)) == parameters(getattr(toolroute, name))
    assert inspect.iscoroutinefunction(getattr(toolroute_asyncio, name))


def test_open_engine_takes_the_same_arguments() -> None:
    assert parameters(toolroute_asyncio.open_engine) == parameters(open_trio_engine)


def test_no_public_call_takes_arbitrary_options() -> None:
    for cls in (Engine, AsyncioEngine):
        for name in public(cls):
            member = getattr(cls, name)
            if callable(member):
                kinds = {p.kind for p in inspect.signature(member).parameters.values()}
                assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{cls.__name__}.{name}"
    for function in (toolroute_asyncio.open_engine, open_trio_engine):
        kinds = {p.kind for p in inspect.signature(function).parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds


def test_engine_select_takes_every_argument_of_tool_index_select() -> None:
    """``ToolIndex.select``'s names with the same types; where the engine's default comes
    from its config, ``None`` (or ``FromConfig`` for the threshold) joins the type."""
    engine = inspect.signature(Engine.select).parameters
    for name, wanted in inspect.signature(ToolIndex.select).parameters.items():
        assert name in engine, name
        got = engine[name]
        assert got.kind == wanted.kind, name
        allowed = {wanted.annotation, f"{wanted.annotation} | None"}
        if isinstance(wanted.annotation, str) and wanted.annotation.endswith(" | None"):
            allowed.add(wanted.annotation.replace(" | None", " | FromConfig | None"))
        assert got.annotation in allowed, (name, got.annotation, wanted.annotation)


def test_subscribe_from_asyncio() -> None:
    async def main() -> list[str]:
        config = EngineConfig(cache=False)
        kinds: list[str] = []
        async with (
            toolroute_asyncio.open_engine(TOOLS, config=config, embedder=None) as engine,
            engine.subscribe(buffer=8) as deliveries,
        ):
            await engine.select("weather in Oslo")
            async for delivery in deliveries:
                kinds.append(delivery.event.type)
                if delivery.event.type == "selection.finished":
                    break
        return kinds

    assert "selection.finished" in asyncio.run(main())


def test_a_subscription_ends_when_the_engine_closes() -> None:
    async def main() -> int:
        config = EngineConfig(cache=False)
        async with toolroute_asyncio.open_engine(TOOLS, config=config, embedder=None) as engine:
            subscribed = asyncio.Event()

            async def consume() -> int:
                received = 0
                async with engine.subscribe() as deliveries:
                    subscribed.set()
                    async for _ in deliveries:  # ends once the engine has closed
                        received += 1
                return received

            consumer = asyncio.create_task(consume())
            await subscribed.wait()
            await engine.select("send an email")
        return await asyncio.wait_for(consumer, 30)

    assert asyncio.run(main()) >= 1


def test_stateless_route_servers_from_asyncio() -> None:
    servers = [toolroute.Server("weather", "Forecasts"), toolroute.Server("mail", "Email")]

    async def main() -> Any:
        return await toolroute_asyncio.route_servers("weather in Oslo", servers)

    routing = asyncio.run(main())
    assert routing.outcome.value in ("skipped", "failed_open", "applied", "degraded")
    assert set(routing.selected) == {"weather", "mail"}  # no provider: nothing dropped

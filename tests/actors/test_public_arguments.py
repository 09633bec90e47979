"""A caller's falsy argument is never swapped for a default: ``0``, ``""``, ``{}`` and
``[]`` are values, judged like any other, and only ``None`` (or leaving it out) means
"the default"."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from event_snapshot import skip_snapshot

from toolroute import Catalog, ConfigError, decide, route_servers, try_decide
from toolroute._core.config import EngineConfig, EventConfig
from toolroute._core.decide.types import BooleanQuestion, DecisionRequest
from toolroute._runtime.engine import open_engine

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message to a person"},
    ]
)
CONFIG = EngineConfig(cache=False, events=EventConfig(buffer=5))


@pytest.mark.parametrize("buffer", [0, -1, False, 1.5])
async def test_subscribe_refuses_a_buffer_that_is_not_a_positive_integer(buffer: Any) -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        with pytest.raises(
            ConfigError, match=f"buffer must be an integer of at least 1, got {buffer!r}"
        ):
            async with engine.subscribe(buffer=buffer):
                pass  # pragma: no cover - never entered


@pytest.mark.parametrize(("buffer", "size"), [(None, 5), (1, 1), (3, 3)])
async def test_subscribe_uses_the_config_buffer_only_when_none_is_given(
    buffer: int | None, size: int
) -> None:
    async with (
        open_engine(TOOLS, config=CONFIG, embedder=None) as engine,
        engine.subscribe(buffer=buffer) as deliveries,
    ):
        # One slot more than asked: the loss notice's, which events never fill.
        assert deliveries.statistics().max_buffer_size == size + 1


async def test_select_refuses_an_empty_strategy() -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        with pytest.raises(ConfigError, match="strategy"):
            await engine.select("weather in Oslo", strategy="")  # type: ignore[arg-type]


@pytest.mark.parametrize("policy", [{}, [], "", 0])
async def test_select_refuses_a_policy_that_is_not_a_policy(policy: Any) -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        with pytest.raises(
            ConfigError, match=f"policy must be a Policy or None, got {type(policy).__name__}"
        ):
            await engine.select("weather in Oslo", policy=policy)


async def test_select_refuses_related_that_is_not_a_mapping() -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        with pytest.raises(ConfigError, match="related must map a tool id"):
            await engine.select("weather in Oslo", related=[])  # type: ignore[arg-type]


@pytest.mark.parametrize("config", [{}, [], 0])
async def test_open_engine_refuses_a_config_that_is_not_an_engine_config(config: Any) -> None:
    with pytest.raises(
        ConfigError, match=f"config must be an EngineConfig or None, got {type(config).__name__}"
    ):
        async with open_engine(TOOLS, config=config, embedder=None):
            pass  # pragma: no cover - never entered


@pytest.mark.parametrize(
    ("argument", "value", "says"),
    [
        ("embedder", 5, r"embedder must be an Embedder .* got int 5; .*default_embedder\(\)"),
        ("embedder", "hashing", r"got str 'hashing'; .*HashingEmbedder\(\)"),
        (
            "decider",
            "local",
            r"decider must be a Decider \(an object with name, limits, decide\(\)\) or None,"
            r" got str 'local'; .*default_decider\('local'\) or LocalDecider\(\)",
        ),
        ("decider", 5, r"decider must be a Decider .* got int 5; .*LocalDecider\(\)"),
        (
            "generator",
            "x",
            r"generator must be a Generator \(an object with identity, generate_json\(\)\)",
        ),
    ],
)
async def test_open_engine_refuses_a_provider_that_is_not_one(
    argument: str, value: object, says: str
) -> None:
    """Refused at the edge: never an ``EngineCrashed`` from an ``AttributeError`` inside, a
    routing that fails open, or a no-tool question silently never asked."""
    with pytest.raises(ConfigError, match=says):
        async with open_engine(TOOLS, config=CONFIG, **{argument: value}):
            pass  # pragma: no cover - never entered


@pytest.mark.parametrize("argument", ["decider", "generator", "embedder"])
async def test_route_servers_refuses_a_provider_that_is_not_one(argument: str) -> None:
    with pytest.raises(ConfigError, match=f"{argument} must be an? [A-Z][a-z]+ .* got str"):
        await route_servers("weather", TOOLS, **{argument: "local"})


async def test_decide_refuses_a_provider_that_is_not_a_decider() -> None:
    request = DecisionRequest(state="s", questions={"q": BooleanQuestion("Is it?")})
    for call in (decide, try_decide):
        with pytest.raises(ConfigError, match=r"provider must be a Decider .* got str 'local'"):
            await call(request, provider="local")  # type: ignore[arg-type]
    async with open_engine(TOOLS, config=CONFIG, embedder=None, decider=None) as engine:
        with pytest.raises(ConfigError, match=r"provider must be a Decider"):
            await engine.try_decide(request, provider=5)  # type: ignore[arg-type]


def test_a_decision_request_refuses_an_empty_model() -> None:
    with pytest.raises(ConfigError, match="model must be a non-empty string or None, got ''"):
        DecisionRequest(state="s", questions={"q": BooleanQuestion("Is it?")}, model="")


def test_a_decision_request_without_a_model_leaves_it_to_the_provider() -> None:
    request = DecisionRequest(state="s", questions={"q": BooleanQuestion("Is it?")})
    assert request.model is None


async def test_subscribe_with_a_good_buffer_still_delivers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        open_engine(TOOLS, config=CONFIG, embedder=None) as engine,
        engine.subscribe(buffer=2) as deliveries,
    ):
        skip_snapshot(deliveries)
        await engine.select("weather in Oslo")
        delivery = await deliveries.receive()
        assert delivery.event.type == "selection.finished"

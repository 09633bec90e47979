"""Explanations through the engine: dedup, routing and paging name themselves."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from toolroute import Catalog, ConfigError, Tool
from toolroute._core.config import DedupConfig, EngineConfig, SelectionDefaults
from toolroute._core.routing.config import RoutingConfig
from toolroute._runtime.engine import open_engine
from toolroute.decisions import BooleanAnswer, DecisionLimits, DecisionRequest, DecisionResult
from toolroute.providers import HashingEmbedder

CATALOG = Catalog.from_mcp_servers(
    {
        "github": {"tools": [{"name": "create_issue", "description": "Open a GitHub issue"}]},
        "weather": {"tools": [{"name": "forecast", "description": "Weather forecast for a city"}]},
        "maps": {"tools": [{"name": "directions", "description": "Driving directions"}]},
    }
)


class DropServers:
    """A decider that drops the servers named in ``drop`` (p 0.05) and keeps the rest."""

    name = "scripted"
    limits = DecisionLimits()

    def __init__(self, drop: set[str]) -> None:
        self.drop = drop

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        servers = request.state["available_servers"] if isinstance(request.state, dict) else []
        answers = {}
        for key in request.questions:
            name = servers[int(key.rsplit("__", 1)[1])]["name"]
            answers[key] = BooleanAnswer(0.05 if name in self.drop else 0.95)
        return DecisionResult(model="m", provider=self.name, answers=answers)


ISSUE = "Open an issue in a repository"
TWINS = Catalog(
    [
        Tool("get_weather", "get_weather", "Weather forecast for a city"),
        Tool("send_email", "send_email", "Send an email message to a person"),
        Tool("github__open_issue", "open_issue", ISSUE, server="github"),
        Tool("gitlab__open_issue", "open_issue", ISSUE, server="gitlab"),
    ]
)


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


async def test_select_explains_a_deduplicated_tool_by_its_representative(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = EngineConfig(cache=False, dedup=DedupConfig(enabled=True))
    async with open_engine(TWINS, config=config, embedder=HashingEmbedder()) as engine:
        selection = await engine.select(
            "open an issue", explain=["github__open_issue", "gitlab__open_issue"]
        )
    shown = [e for e in selection.explanations if e.shown]
    assert [e.tool_id for e in shown] == list(selection.tool_ids)
    removed = [e for e in selection.explanations if e.reason == "dedup"]
    assert len(removed) == 1
    assert removed[0].duplicate_of in selection.tool_ids
    assert removed[0].duplicate_of != removed[0].tool_id


async def test_select_without_explain_carries_none(autojump_clock: trio.testing.MockClock) -> None:
    async with open_engine(TWINS, config=EngineConfig(cache=False), embedder=None) as engine:
        assert (await engine.select("weather")).explanations == ()
        with pytest.raises(ConfigError, match="explain names tools not in the catalogue"):
            await engine.select("weather", explain=["nope"])


async def test_step_explains_a_tool_routing_dropped_with_its_server_and_stage(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cfg = EngineConfig(
        cache=False,
        routing=RoutingConfig(generative=False),
        selection=SelectionDefaults(route_servers=True, max_tools=3),
    )
    decider = DropServers({"github"})
    messages = user("will it rain on the drive to Porto?")
    async with open_engine(CATALOG, config=cfg, embedder=None, decider=decider) as engine:
        step = await engine.prepare_step(messages, explain=["create_issue"])
    assert step.routing is not None
    dropped = step.explanation("create_issue")
    assert dropped is not None
    assert (dropped.shown, dropped.reason, dropped.server) == (False, "routing", "github")
    assert dropped.routing == step.routing.strategy
    assert step.tool_ids is not None
    for tool_id in step.tool_ids:
        explanation = step.explanation(tool_id)
        assert explanation is not None
        assert explanation.shown


async def test_next_page_explains_the_first_pages_tools_as_shown_earlier(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cfg = EngineConfig(cache=False, selection=SelectionDefaults(max_tools=1))
    async with open_engine(TWINS, config=cfg, embedder=None) as engine:
        first = await engine.prepare_step(user("weather forecast email"), explain=True)
        assert first.tool_ids is not None
        top = first.tool_ids[0]
        idle = [
            *user("weather forecast email"),
            {"role": "assistant", "content": "weather forecast email"},
        ]
        second = await engine.prepare_step(idle, explain=[top])
    assert second.page == 1
    earlier = second.explanation(top)
    assert earlier is not None
    assert (earlier.shown, earlier.reason, earlier.rank) == (False, "earlier_page", 1)


async def test_a_step_without_request_text_explains_pinned_tools_and_skips_the_rest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cfg = EngineConfig(cache=False, selection=SelectionDefaults(always_active=("send_email",)))
    async with open_engine(TWINS, config=cfg, embedder=None) as engine:
        step = await engine.prepare_step([], explain=["get_weather"])
    assert [(e.tool_id, e.shown, e.reason) for e in step.explanations] == [
        ("send_email", True, "always_active"),
        ("get_weather", False, "skipped"),
    ]

"""The engine's decision service and server routing: shared limits, cache, stickiness, events."""

from __future__ import annotations

import functools
import gc
import weakref

import pytest
import trio
import trio.testing
from event_snapshot import skip_snapshot

from toolroute import Catalog, DecisionError, Outcome, RoutingConfig
from toolroute._core.config import (
    DecisionConfig,
    EngineConfig,
    RoutingSessionConfig,
    SelectionDefaults,
)
from toolroute._core.events import DecisionFinished, FailOpen, RoutingFinished
from toolroute._runtime.engine import open_engine
from toolroute.decisions import (
    BooleanAnswer,
    BooleanQuestion,
    DecisionLimits,
    DecisionRequest,
    DecisionResult,
)

CATALOG = Catalog.from_mcp_servers(
    {
        "github": {"tools": [{"name": "create_issue", "description": "Open a GitHub issue"}]},
        "slack": {"tools": [{"name": "post_message", "description": "Post to a Slack channel"}]},
        "weather": {"tools": [{"name": "forecast", "description": "Weather forecast for a city"}]},
        "maps": {"tools": [{"name": "directions", "description": "Driving directions"}]},
    }
)


class ScriptedDecider:
    """Drops the servers named in ``drop`` (p 0.05), keeps the rest (p 0.95); records calls."""

    name = "scripted"

    def __init__(self, drop: set[str] = frozenset(), *, delay: float = 0.0, cap: int | None = None):
        self.limits = DecisionLimits(max_questions=cap)
        self.drop = drop
        self.delay = delay
        self.calls = 0
        self.in_flight = 0
        self.peak = 0
        self.fail = False

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        self.calls += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await trio.sleep(self.delay)
            if self.fail:
                raise DecisionError("overloaded", "busy", retryable=True)
            servers = request.state["available_servers"] if isinstance(request.state, dict) else []
            answers = {}
            for key, question in request.questions.items():
                index = int(key.rsplit("__", 1)[1])
                name = servers[index]["name"] if servers else question.instructions
                answers[key] = BooleanAnswer(0.05 if name in self.drop else 0.95)
            return DecisionResult(model="m", provider=self.name, answers=answers)
        finally:
            self.in_flight -= 1


def config(**routing_session: object) -> EngineConfig:
    return EngineConfig(
        cache=False,
        routing=RoutingConfig(generative=False),
        routing_session=RoutingSessionConfig(**routing_session),  # type: ignore[arg-type]
    )


async def test_routes_the_catalogue_servers_and_publishes_the_outcome(
    autojump_clock: trio.testing.MockClock,
) -> None:
    decider = ScriptedDecider({"weather", "maps"})
    async with (
        open_engine(CATALOG, config=config(), embedder=None, decider=decider) as engine,
        engine.subscribe() as events,
    ):
        skip_snapshot(events)
        outcome = await engine.route_servers("open an issue about the crash")
        delivery = await events.__anext__()
    assert set(outcome.excluded) == {"weather", "maps"}
    assert set(outcome.excluded_tools) == {"forecast", "directions"}
    assert outcome.outcome is Outcome.APPLIED
    assert isinstance(delivery.event, RoutingFinished)
    assert delivery.event.excluded == outcome.excluded
    assert delivery.event.query is None  # only the HMAC unless configured


async def test_without_a_decider_routing_fails_open_with_an_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        open_engine(CATALOG, config=config(), embedder=None, decider=None) as engine,
        engine.subscribe() as events,
    ):
        skip_snapshot(events)
        outcome = await engine.route_servers("open an issue")
        first, second = await events.__anext__(), await events.__anext__()
    assert outcome.outcome is Outcome.FAILED_OPEN
    assert outcome.excluded == ()
    assert isinstance(first.event, RoutingFinished)
    assert isinstance(second.event, FailOpen)
    assert second.event.operation == "route_servers"


async def test_cache_is_per_session_and_expires(autojump_clock: trio.testing.MockClock) -> None:
    decider = ScriptedDecider({"maps"})
    cfg = config(cache=True, cache_ttl_s=10.0)
    async with open_engine(CATALOG, config=cfg, embedder=None, decider=decider) as engine:
        first = await engine.route_servers("open an issue", session="a")
        again = await engine.route_servers("open an issue", session="a")
        assert (decider.calls, again.cache_hit, again.excluded) == (1, True, first.excluded)
        await engine.route_servers("open an issue", session="b")
        await engine.route_servers("open an issue")  # no session: never cached
        assert decider.calls == 3
        await trio.sleep(11)
        expired = await engine.route_servers("open an issue", session="a")
        assert (decider.calls, expired.cache_hit) == (4, False)


async def test_sticky_servers_stay_kept_for_n_turns(autojump_clock: trio.testing.MockClock) -> None:
    decider = ScriptedDecider({"weather", "maps"})
    async with open_engine(
        CATALOG, config=config(sticky_turns=2), embedder=None, decider=decider
    ) as engine:
        await engine.route_servers("open an issue and tell the team", session="s")
        # The next turn, the model would drop github and slack too: they stay for 2 turns.
        decider.drop = {"github", "slack", "weather", "maps"}
        second = await engine.route_servers("now something else", session="s")
        assert {"github", "slack"} <= set(second.selected)
        third = await engine.route_servers("and again", session="s")
        assert {"github", "slack"} <= set(third.selected)
        fourth = await engine.route_servers("and once more", session="s")
        assert {"github", "slack"} <= set(fourth.excluded)
        # Another session never saw them selected.
        other = await engine.route_servers("now something else", session="t")
        assert {"github", "slack"} <= set(other.excluded)


async def test_one_limit_per_provider_is_shared_by_every_caller(
    autojump_clock: trio.testing.MockClock,
) -> None:
    decider = ScriptedDecider(delay=1.0, cap=2)
    cfg = EngineConfig(cache=False, decision=DecisionConfig(concurrency=3))
    request = DecisionRequest(
        state="s", questions={f"q__{i}": BooleanQuestion(f"q {i}") for i in range(8)}
    )
    async with open_engine(CATALOG, config=cfg, embedder=None, decider=decider) as engine:
        results: list[DecisionResult | None] = []

        async def caller() -> None:
            results.append(await engine.try_decide(request))

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(caller)
    # 3 callers × 4 batches = 12 batches, at most 3 in flight: 4 rounds of 1 s.
    assert decider.peak == 3
    assert trio.current_time() - start == pytest.approx(4.0)
    assert all(r is not None and len(r.answers) == 8 for r in results)


async def test_decide_and_try_decide_publish_decision_events(
    autojump_clock: trio.testing.MockClock,
) -> None:
    decider = ScriptedDecider()
    request = DecisionRequest(state="s", questions={"q__0": BooleanQuestion("is it?")})
    async with (
        open_engine(CATALOG, config=config(), embedder=None, decider=decider) as engine,
        engine.subscribe() as events,
    ):
        skip_snapshot(events)
        await engine.decide(request)
        decider.fail = True
        assert await engine.try_decide(request) is None
        with pytest.raises(DecisionError, match="busy"):
            await engine.decide(request)
        seen = [(await events.__anext__()).event for _ in range(3)]
    assert all(isinstance(e, DecisionFinished) for e in seen)
    assert [e.outcome for e in seen] == [  # type: ignore[union-attr]
        Outcome.APPLIED,
        Outcome.FAILED_OPEN,
        Outcome.FAILED_OPEN,
    ]


async def test_engine_without_decider_refuses_decide_and_try_decide_is_none(
    autojump_clock: trio.testing.MockClock,
) -> None:
    request = DecisionRequest(state="s", questions={"q": BooleanQuestion("is it?")})
    async with open_engine(CATALOG, config=config(), embedder=None, decider=None) as engine:
        assert engine.decider is None
        assert await engine.try_decide(request) is None
        with pytest.raises(DecisionError, match="no decision provider"):
            await engine.decide(request)


async def test_default_decider_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + "x" * 40)
    monkeypatch.delenv("TYPESAFE_API_KEY", raising=False)
    monkeypatch.delenv("AI_GATEWAY_API_KEY", raising=False)
    monkeypatch.delenv("PERPLEXITY_API_KEY", raising=False)
    monkeypatch.delenv("TOOLROUTE_DECISION_PROVIDER", raising=False)
    async with open_engine(CATALOG, config=config(), embedder=None) as engine:
        assert engine.decider is None  # a plain OpenAI key never pays for decisions
    monkeypatch.setenv("TYPESAFE_API_KEY", "ts-key")
    async with open_engine(CATALOG, config=config(), embedder=None) as engine:
        assert engine.decider is not None
        assert engine.decider.name == "typesafe"


async def test_prepare_step_hides_the_tools_of_dropped_servers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    decider = ScriptedDecider({"github", "slack"})
    cfg = EngineConfig(
        cache=False,
        routing=RoutingConfig(generative=False),
        selection=SelectionDefaults(
            route_servers=True, max_tools=3, always_active=("post_message",)
        ),
    )
    messages = [{"role": "user", "content": "will it rain on the drive to Porto?"}]
    async with open_engine(CATALOG, config=cfg, embedder=None, decider=decider) as engine:
        step = await engine.prepare_step(messages, session="s")
        assert step.routing is not None
        assert set(step.routing.excluded) == {"github", "slack"}
        assert step.tool_ids is not None
        assert "create_issue" not in step.tool_ids
        assert "post_message" in step.tool_ids  # always_active survives routing
        # Two steps without a tool call: every tool, still without the dropped server's.
        idle = [*messages, {"role": "assistant", "content": "Let me think."}]
        idle += [{"role": "assistant", "content": "Still thinking."}]
        every = await engine.prepare_step(idle, session="t")
        assert every.page == 2
        assert every.tool_ids == ("post_message", "forecast", "directions")
    async with open_engine(
        CATALOG, config=config(), embedder=None, decider=decider
    ) as engine:  # off by default: no decision call
        step = await engine.prepare_step(messages)
        assert step.routing is None
        assert decider.calls == 2


async def test_the_routing_cache_and_sessions_live_in_the_given_stores(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from toolroute._core.stores import Stores
    from toolroute._stores.routing_cache import MemoryRoutingCache
    from toolroute._stores.sessions import MemorySessionStore

    sessions = MemorySessionStore()
    routing: MemoryRoutingCache[object] = MemoryRoutingCache(entries=8, ttl_s=60)
    decider = ScriptedDecider({"maps"})
    stores = Stores(sessions=sessions, routing=routing)
    async with open_engine(
        CATALOG, config=config(cache=True), embedder=None, decider=decider, stores=stores
    ) as engine:
        first = await engine.route_servers("weather in Oslo", session="s")
        again = await engine.route_servers("weather in Oslo", session="s")
    assert (decider.calls, again.cache_hit, first.excluded) == (1, True, ("maps",))
    assert len(routing) == 1  # the host's cache holds the routing
    assert "s" in sessions  # and the host's session store the session


async def test_a_provider_passed_per_call_is_not_kept_alive_by_the_engine(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A host passing one provider per tenant must not grow the engine by one provider each
    # (each holds an HTTP client): the shared limit lives only as long as its provider.
    request = DecisionRequest(state="s", questions={"q__0": BooleanQuestion("Is it?")})
    released: list[weakref.ref[ScriptedDecider]] = []
    async with open_engine(CATALOG, config=config(), embedder=None, decider=None) as engine:
        for _ in range(20):
            provider = ScriptedDecider()
            await engine.decide(request, provider=provider)
            await engine.try_decide(request, provider=provider)
            released.append(weakref.ref(provider))
            del provider
        gc.collect()
        assert [ref for ref in released if ref() is not None] == []
        again = ScriptedDecider(delay=1.0)
        async with trio.open_nursery() as nursery:  # one provider, one limit, while it lives
            for _ in range(8):
                nursery.start_soon(functools.partial(engine.decide, request, provider=again))
        assert again.peak == engine.config.decision.concurrency

"""The decision actor: admission per provider, deadlines carried by the job, fail-open replies."""

from __future__ import annotations

import functools
import math

import pytest
import trio
import trio.lowlevel
import trio.testing

from toolroute import Catalog, DecisionError, Outcome, RoutingConfig, Server, route_servers
from toolroute._core.config import DecisionConfig, EngineConfig, RestartPolicy
from toolroute._core.decide.limits import PROVIDER_CONNECTIONS, DecisionLimits
from toolroute._core.events import ServiceRestarted
from toolroute._decisions import actor as actor_module
from toolroute._decisions.actor import DecisionActor
from toolroute._decisions.run import decide, decide_in_batches, try_decide
from toolroute._runtime.engine import open_engine
from toolroute.decisions import BooleanQuestion, DecisionRequest
from toolroute.testing import ScriptedDecider


def request(questions: int = 1, tag: str = "q") -> DecisionRequest:
    return DecisionRequest(
        state=f"state {tag}",
        questions={f"{tag}__{i}": BooleanQuestion(f"Is {i} so?") for i in range(questions)},
    )


async def test_200_callers_share_the_slots_and_each_ends_by_its_deadline(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    decider = ScriptedDecider(delay=0.3)
    actor = DecisionActor(slots=4)
    nursery.start_soon(actor.run)
    ends: list[float] = []
    results: list[object] = []

    async def caller(n: int) -> None:
        report = await decide_in_batches(request(tag=f"c{n}"), decider, actor=actor, deadline_s=1)
        ends.append(trio.current_time())
        results.append(report.result)

    start = trio.current_time()
    async with trio.open_nursery() as callers:
        for n in range(200):
            callers.start_soon(caller, n)
    assert max(ends) - start <= 1.0 + 1e-9
    assert decider.peak == 4
    answered = [r for r in results if r is not None]
    # 4 slots, 0.3 s a call: three rounds fit in 1 s; the fourth starts at 0.9 s and is cut
    # off at 1 s; the other 184 jobs were dropped at their deadline without being sent.
    assert len(answered) == 12
    assert len(decider.requests) == 16


async def test_a_job_whose_deadline_passes_in_the_queue_is_never_sent(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    decider = ScriptedDecider(delay=2.0)
    actor = DecisionActor(slots=1)
    nursery.start_soon(actor.run)
    async with trio.open_nursery() as callers:
        callers.start_soon(
            functools.partial(decide_in_batches, request(tag="first"), decider, actor=actor)
        )
        await trio.sleep(0.1)
        late = await decide_in_batches(request(tag="late"), decider, actor=actor, deadline_s=1)
    assert late.result is None
    assert "deadline of 1 s passed" in late.reason
    assert [r.state for r in decider.requests] == ["state first"]


async def test_a_caller_that_gave_up_in_the_queue_costs_the_provider_nothing(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    decider = ScriptedDecider(delay=1.0)
    actor = DecisionActor(slots=1)
    nursery.start_soon(actor.run)
    async with trio.open_nursery() as callers:
        callers.start_soon(
            functools.partial(decide, request(tag="first"), provider=decider, actor=actor)
        )
        await trio.sleep(0.1)
        with trio.move_on_after(0.2):  # the caller's own scope, no deadline given
            await decide(request(tag="gone"), provider=decider, actor=actor)
        assert trio.current_time() == pytest.approx(0.3)  # its own scope ended the wait
    assert [r.state for r in decider.requests] == ["state first"]


async def test_the_actor_answers_at_the_deadline_with_the_batches_that_came(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    answered_fast: set[str] = set()

    def answers(req: DecisionRequest) -> dict[str, float]:
        answered_fast.update(req.questions)
        return {}

    class SlowLastBatch(ScriptedDecider):
        async def decide(self, req: DecisionRequest):  # type: ignore[no-untyped-def]
            if "q__2" in req.questions:
                await trio.sleep_forever()
            return await super().decide(req)

    decider = SlowLastBatch(answers, limits=DecisionLimits(max_questions=1))
    actor = DecisionActor(slots=4)
    nursery.start_soon(actor.run)
    report = await decide_in_batches(request(3), decider, actor=actor, deadline_s=2)
    assert trio.current_time() == pytest.approx(2.0)
    assert report.result is not None
    assert set(report.result.answers) == {"q__0", "q__1"}
    assert report.failed == 1
    assert "deadline of 2 s passed" in report.reason
    assert report.outcome is Outcome.DEGRADED


async def test_the_caller_scope_still_cancels_a_running_call(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    decider = ScriptedDecider(hang=True)
    actor = DecisionActor(slots=2)
    nursery.start_soon(actor.run)
    with trio.move_on_after(0.5) as scope:
        await try_decide(request(), provider=decider, deadline_s=60, actor=actor)
    assert scope.cancelled_caught
    assert trio.current_time() == pytest.approx(0.5)
    await trio.sleep(0.01)
    assert decider.in_flight == 0  # the job's batch ended with its caller's deadline


async def test_strict_decide_waits_its_turn_and_raises_the_provider_error(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    actor = DecisionActor(slots=1)
    nursery.start_soon(actor.run)
    failing = ScriptedDecider(error=DecisionError("overloaded", "busy", retryable=True))
    with pytest.raises(DecisionError, match="busy"):
        await decide(request(), provider=failing, actor=actor)
    slow = ScriptedDecider(delay=1.0)
    ends: dict[str, float] = {}

    async def caller(tag: str) -> None:
        await decide(request(tag=tag), provider=slow, actor=actor)
        ends[tag] = trio.current_time()

    start = trio.current_time()
    async with trio.open_nursery() as callers:
        for tag in "abc":
            callers.start_soon(caller, tag)
            await trio.lowlevel.checkpoint()
    assert [ends[t] - start for t in "abc"] == pytest.approx([1.0, 2.0, 3.0])
    assert slow.peak == 1


async def test_a_crashed_actor_answers_its_waiting_callers_and_is_restarted(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashed: list[bool] = []
    original = actor_module._State.apply

    def crash_once(self: actor_module._State, message: actor_module.Message) -> None:
        if isinstance(message, actor_module.BatchEnded) and not crashed:
            crashed.append(True)
            raise RuntimeError("actor bug")
        original(self, message)

    monkeypatch.setattr(actor_module._State, "apply", crash_once)
    decider = ScriptedDecider(delay=0.5)
    catalog = Catalog.from_mcp_servers({"a": {"tools": [{"name": "t", "description": "d"}]}})
    config = EngineConfig(cache=False, restarts=RestartPolicy(max_restarts=3))
    async with (
        open_engine(catalog, config=config, embedder=None, decider=decider) as engine,
        engine.subscribe() as events,
    ):
        assert await engine.try_decide(request()) is None  # fail-open, no hang
        restarted = None
        while restarted is None:
            event = (await events.__anext__()).event
            restarted = event if isinstance(event, ServiceRestarted) else None
        assert restarted.service == "decision actor"
        again = await engine.try_decide(request())
        assert again is not None
        assert len(again.answers) == 1


async def test_stateless_calls_share_one_admission_as_wide_as_the_http_pool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    decider = ScriptedDecider(delay=0.3)
    ends: list[float] = []

    async def caller(n: int) -> None:
        await try_decide(request(tag=f"c{n}"), provider=decider, deadline_s=1)
        ends.append(trio.current_time())

    async with trio.open_nursery() as callers:
        for n in range(250):
            callers.start_soon(caller, n)
    assert decider.peak == PROVIDER_CONNECTIONS
    # Rounds start at 0, 0.3, 0.6 and 0.9 s (the last is cut off at 1 s); the callers still
    # queued then were never sent.
    assert len(decider.requests) == min(250, 4 * PROVIDER_CONNECTIONS)
    assert max(ends) <= 1.0 + 1e-9


async def test_engine_route_servers_at_200_way_ends_by_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    catalog = Catalog.from_mcp_servers(
        {f"s{i}": {"tools": [{"name": f"t{i}", "description": f"tool {i}"}]} for i in range(8)}
    )
    decider = ScriptedDecider(delay=0.3)
    config = EngineConfig(
        cache=False,
        decision=DecisionConfig(concurrency=4),
        routing=RoutingConfig(deadline_s=1, generative=False),
    )
    outcomes: list[Outcome] = []
    async with open_engine(catalog, config=config, embedder=None, decider=decider) as engine:
        start = trio.current_time()

        async def caller(n: int) -> None:
            routed = await engine.route_servers(f"request {n}")
            outcomes.append(routed.outcome)
            assert trio.current_time() - start <= 1.0 + 1e-9

        async with trio.open_nursery() as callers:
            for n in range(200):
                callers.start_soon(caller, n)
    assert decider.peak == 4
    # Three rounds of 4 fit in 1 s (a fourth starts at 0.9 s and is cut off); the rest of
    # the callers failed open at their deadline without their job ever being sent.
    assert outcomes.count(Outcome.APPLIED) == 12
    assert len(decider.requests) == 16
    assert outcomes.count(Outcome.FAILED_OPEN) == 188


async def test_stateless_route_servers_queue_in_trio_not_past_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    servers = [Server(f"s{i}", f"does {i}") for i in range(8)]
    decider = ScriptedDecider(delay=0.6)
    config = RoutingConfig(deadline_s=1, generative=False)
    routed = []

    async def caller(n: int) -> None:
        routed.append(await route_servers(f"r {n}", servers, decider=decider, config=config))

    async with trio.open_nursery() as callers:
        for n in range(2 * PROVIDER_CONNECTIONS):
            callers.start_soon(caller, n)
    # The second hundred waited in trio, and would finish at 1.2 s: it failed open at 1 s.
    assert trio.current_time() == pytest.approx(1.0)
    assert [r.outcome for r in routed].count(Outcome.APPLIED) == PROVIDER_CONNECTIONS
    assert decider.peak == PROVIDER_CONNECTIONS
    assert math.isfinite(routed[0].latency_ms)

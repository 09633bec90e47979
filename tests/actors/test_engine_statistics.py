"""``Engine.statistics()``: one snapshot of recall, sessions, decisions and events."""

from __future__ import annotations

import trio
import trio.testing
from event_snapshot import skip_snapshot

from toolroute import (
    Catalog,
    DecisionStatistics,
    EngineStatistics,
    EventStatistics,
    SessionStatistics,
    open_engine,
)
from toolroute.decisions import BooleanQuestion, DecisionRequest
from toolroute.providers import HashingEmbedder
from toolroute.testing import ScriptedDecider, inline_cpu

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message to a person"},
    ]
)


async def test_statistics_count_what_every_service_did(
    autojump_clock: trio.testing.MockClock,
) -> None:
    decider = ScriptedDecider(default=0.9, delay=0.5)
    async with open_engine(
        TOOLS, embedder=HashingEmbedder(dim=64), decider=decider, run_cpu=inline_cpu()
    ) as engine:
        await engine.ready()
        empty = engine.statistics()
        assert isinstance(empty, EngineStatistics)
        assert empty.sessions == SessionStatistics(sessions=0, stepping=0, queued_steps=0)
        assert empty.decisions == DecisionStatistics(submitted=0, in_flight=0, unanswered=0)

        async with engine.subscribe(buffer=4) as events, trio.open_nursery() as nursery:
            skip_snapshot(events)
            request = DecisionRequest(state="s", questions={"q": BooleanQuestion("is it?")})
            nursery.start_soon(engine.try_decide, request)
            await trio.sleep(0.1)  # the decision is in flight: 0.5 s of vendor time
            during = engine.statistics()
            assert during.decisions == DecisionStatistics(submitted=1, in_flight=1, unanswered=0)
            assert during.events.subscribers == 1
            await engine.select("weather in Oslo")
            await engine.prepare_step("send an email to Ana", session="s-1")
            seen = [await events.receive() for _ in range(2)]
        after = engine.statistics()
    assert {delivery.event.type for delivery in seen} == {"selection.finished", "step.finished"}
    assert after.decisions == DecisionStatistics(submitted=1, in_flight=0, unanswered=0)
    assert after.sessions == SessionStatistics(sessions=1, stepping=0, queued_steps=0)
    assert after.recall.full_tier == 2  # the select and the step each embedded once
    assert isinstance(after.events, EventStatistics)
    assert after.events.subscribers == 0
    assert after.events.published >= during.events.published + 2

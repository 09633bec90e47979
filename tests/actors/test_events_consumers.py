"""Events a consumer can use alone: each names its request and session, a new subscriber
starts from the engine's state, and a loss is reported even when nothing else happens."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from event_snapshot import skip_snapshot

from toolroute import Catalog, ConfigError, Outcome
from toolroute._core.config import EngineConfig, SelectionDefaults
from toolroute._runtime.engine import open_engine
from toolroute.events import (
    CatalogUpdated,
    Delivery,
    EventsDropped,
    FailOpen,
    RoutingFinished,
    SelectionFinished,
    StepFinished,
    SubscriptionStarted,
)
from toolroute.testing import ScriptedEmbedder, inline_cpu

CATALOG = Catalog.from_mcp_servers(
    {
        "github": {"tools": [{"name": "create_issue", "description": "Open a GitHub issue"}]},
        "slack": {"tools": [{"name": "post_message", "description": "Post to a Slack channel"}]},
        "weather": {"tools": [{"name": "forecast", "description": "Weather forecast for a city"}]},
    }
)
ROUTED = EngineConfig(cache=False, selection=SelectionDefaults(route_servers=True))


def drain(deliveries: trio.MemoryReceiveChannel[Delivery]) -> list[Delivery]:
    got = []
    while True:
        try:
            got.append(deliveries.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            return got


async def test_every_event_of_a_session_step_carries_its_session_and_request_id(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # No decider: routing fails open inside the step, so the step publishes three events.
    async with (
        open_engine(CATALOG, config=ROUTED, embedder=None, decider=None) as engine,
        engine.subscribe() as events,
    ):
        skip_snapshot(events)
        step = await engine.prepare_step("open an issue about the login bug", session="s-1")
        other = await engine.prepare_step("post the summary", session="s-2")
        await trio.testing.wait_all_tasks_blocked()
        got = [d.event for d in drain(events)]
    assert step.request_id
    assert other.request_id
    assert step.request_id != other.request_id
    assert step.routing is not None
    assert step.routing.request_id == step.request_id
    first = [e for e in got if getattr(e, "request_id", None) == step.request_id]
    assert [type(e) for e in first] == [RoutingFinished, FailOpen, StepFinished]
    assert all(e.session == "s-1" for e in first)  # type: ignore[union-attr]
    fail_open = first[1]
    assert isinstance(fail_open, FailOpen)
    assert fail_open.operation == "prepare_step"  # the public call, not the routing stage
    assert {e.session for e in got} == {"s-1", "s-2"}  # type: ignore[union-attr]


async def test_route_servers_fail_open_names_the_request_its_outcome_carries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        open_engine(CATALOG, config=ROUTED, embedder=None, decider=None) as engine,
        engine.subscribe() as events,
    ):
        with_session = await engine.route_servers("open an issue", session="s-9")
        without = await engine.route_servers("open an issue")
        await trio.testing.wait_all_tasks_blocked()
        got = [d.event for d in drain(events)]
    fail_opens = [e for e in got if isinstance(e, FailOpen)]
    assert [(e.operation, e.request_id, e.session) for e in fail_opens] == [
        ("route_servers", with_session.request_id, "s-9"),
        ("route_servers", without.request_id, None),
    ]
    assert with_session.outcome is Outcome.FAILED_OPEN


async def test_select_fail_open_carries_the_request_id_of_the_selection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Warm-up embeds once (ok); the request's embedding raises: recall fails open.
    embedder = ScriptedEmbedder(faults=["ok", "raise"])
    config = EngineConfig(cache=False)
    async with open_engine(
        CATALOG, config=config, embedder=embedder, run_cpu=inline_cpu(embedder)
    ) as engine:
        await engine.ready()
        async with engine.subscribe() as events:
            selection = await engine.select("weather in Oslo")
            again = await engine.select("weather in Oslo")
            await trio.testing.wait_all_tasks_blocked()
            got = [d.event for d in drain(events)]
    assert selection.outcome is Outcome.DEGRADED
    assert selection.request_id != again.request_id
    fail_open = next(e for e in got if isinstance(e, FailOpen))
    assert (fail_open.operation, fail_open.what_failed) == ("select", "embedder")
    assert fail_open.request_id == selection.request_id
    finished = [e for e in got if isinstance(e, SelectionFinished)]
    assert [e.request_id for e in finished] == [selection.request_id, again.request_id]


async def test_events_outside_a_call_carry_no_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_engine(CATALOG, config=EngineConfig(cache=False), embedder=None) as engine:
        async with engine.subscribe() as events:
            skip_snapshot(events)
            await engine.update(remove=["forecast"])
            got = [d.event for d in drain(events)]
        selection = await engine.select("weather")  # the context ended with the call
    assert [type(e) for e in got] == [CatalogUpdated]
    assert selection.request_id is not None


async def test_a_new_subscriber_first_receives_the_engine_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    embedder = ScriptedEmbedder(delay=5.0)  # warm-up takes 5 s of trio time
    config = EngineConfig(cache=False)
    async with open_engine(
        CATALOG, config=config, embedder=embedder, run_cpu=inline_cpu(embedder)
    ) as engine:
        async with engine.subscribe() as early:  # the snapshot is on by default
            first = early.receive_nowait().event
        await engine.ready()
        await engine.update(remove=["forecast"])
        async with engine.subscribe() as late:
            second = late.receive_nowait().event
            await engine.select("open an issue")
            after = [d.event for d in drain(late)]
    assert isinstance(first, SubscriptionStarted)
    assert (first.warmup, first.catalog_version, first.tools, first.fast_tier) == (
        "pending",
        0,
        3,
        "off",
    )
    assert isinstance(second, SubscriptionStarted)
    assert (second.warmup, second.catalog_version, second.tools) == ("finished", 1, 2)
    assert SelectionFinished in {type(e) for e in after}
    assert SubscriptionStarted not in {type(e) for e in after}  # the snapshot came once


async def test_a_keyword_only_engine_reports_no_warm_up_and_a_failed_one_says_why(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        open_engine(CATALOG, config=EngineConfig(cache=False), embedder=None) as engine,
        engine.subscribe(snapshot=True) as events,
    ):
        keyword_only = events.receive_nowait().event
    failing = ScriptedEmbedder(fail=True)
    config = EngineConfig(cache=False)
    async with open_engine(
        CATALOG, config=config, embedder=failing, run_cpu=inline_cpu(failing)
    ) as engine:
        await engine.ready()
        async with engine.subscribe(snapshot=True) as events:
            degraded = events.receive_nowait().event
    assert isinstance(keyword_only, SubscriptionStarted)
    assert keyword_only.warmup == "none"
    assert isinstance(degraded, SubscriptionStarted)
    assert degraded.warmup == "degraded"
    assert degraded.warmup_reason


async def test_a_quiet_subscriber_learns_its_loss_within_100_ms(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        open_engine(CATALOG, config=EngineConfig(cache=False), embedder=None) as engine,
        engine.subscribe(buffer=2, snapshot=True) as events,
    ):
        # The snapshot and one selection fill the buffer; four more are lost.
        for _ in range(5):
            await engine.select("open an issue")
        lost_at = trio.current_time()
        assert engine.statistics().events.dropped == 4
        # The first loss was told at once; the three after it wait for that notice to be
        # read. Nothing else happens: the reporter tells them.
        got = [await events.receive() for _ in range(4)]
        learned_at = trio.current_time()
    assert [type(d.event) for d in got] == [
        SubscriptionStarted,
        SelectionFinished,
        EventsDropped,
        EventsDropped,
    ]
    assert [d.dropped for d in got] == [0, 0, 1, 3]
    assert [d.event.count for d in got[2:]] == [1, 3]  # type: ignore[union-attr]
    assert 0 < learned_at - lost_at <= 0.1


async def test_a_loss_after_an_unread_notice_is_reported_once_the_reader_reads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        open_engine(CATALOG, config=EngineConfig(cache=False), embedder=None) as engine,
        engine.subscribe(buffer=1) as events,
    ):
        skip_snapshot(events)
        await engine.select("a")  # fills the buffer
        await engine.select("b")  # lost
        await trio.sleep(0.1)  # the notice takes the reserved slot
        await engine.select("c")  # lost, with the notice still unread
        await trio.sleep(0.5)  # no room: the reporter keeps the count
        got = [await events.receive() for _ in range(2)]
        read_at = trio.current_time()
        late = await events.receive()
        late_at = trio.current_time()
    assert [(type(d.event), d.dropped) for d in got] == [
        (SelectionFinished, 0),
        (EventsDropped, 1),
    ]
    assert isinstance(late.event, EventsDropped)
    assert late.dropped == 1
    assert late_at - read_at <= 0.1


async def test_a_subscriber_that_opts_out_of_the_snapshot_first_reads_the_next_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        open_engine(CATALOG, config=EngineConfig(cache=False), embedder=None) as engine,
        engine.subscribe(buffer=1, snapshot=False) as events,
    ):
        await engine.select("open an issue")  # the one slot: no snapshot took it
        first = events.receive_nowait()
        await trio.testing.wait_all_tasks_blocked()
        rest = drain(events)
    assert isinstance(first.event, SelectionFinished)
    assert first.dropped == 0
    assert rest == []


async def test_snapshot_must_be_a_bool() -> None:
    async with open_engine(CATALOG, config=EngineConfig(cache=False), embedder=None) as engine:
        with pytest.raises(ConfigError, match="snapshot must be True or False, got 'yes'"):
            engine.subscribe(snapshot="yes")  # type: ignore[arg-type]

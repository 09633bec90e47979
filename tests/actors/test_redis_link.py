"""The Redis link in virtual time: every call ends by its deadline, an outage is announced
once and costs later calls nothing, and the probe resynchronises when Redis answers again.

A scripted client stands in for coredis here (deadlines need a mock clock, a real socket
does not follow one); ``tests/integration/test_redis_faults.py`` runs the same rules against
a real ``redis-server``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("coredis", reason="the Redis stores need the redis extra (coredis)")

import coredis.exceptions

from toolroute._core.events import Event, FailOpen
from toolroute._stores.redis.caches import RedisEmbeddingStore
from toolroute._stores.redis.link import DOWN_AFTER, UNAVAILABLE, RedisLink
from toolroute._stores.redis.sessions import RedisSessionStore
from toolroute._stores.sessions import MemorySessionStore


class ScriptedRedis:
    """Answers ``ping`` and ``hset``/``hmget`` from a dict; ``hang`` makes every call wait
    until cancelled, ``refuse`` makes it fail as a dropped connection does."""

    def __init__(self) -> None:
        self.hang = False
        self.refuse = False
        self.hashes: dict[str, dict[bytes, bytes]] = {}
        self.calls = 0

    async def _gate(self) -> None:
        self.calls += 1
        if self.hang:
            await trio.sleep_forever()
        if self.refuse:
            raise coredis.exceptions.ConnectionError("Connection refused")

    async def ping(self) -> bytes:
        await self._gate()
        return b"PONG"

    async def hset(self, key: str, values: dict[bytes, bytes]) -> int:
        await self._gate()
        self.hashes.setdefault(key, {}).update(values)
        return len(values)

    async def hmget(self, key: str, fields: list[bytes]) -> tuple[bytes | None, ...]:
        await self._gate()
        stored = self.hashes.get(key, {})
        return tuple(stored.get(f) for f in fields)


def new_link(client: ScriptedRedis, events: list[Event]) -> RedisLink:
    link = RedisLink(
        client,  # type: ignore[arg-type]
        namespace="t",
        deadline_s=0.1,
        probe_interval_s=0.5,
    )
    link.report_to(events.append)
    return link


async def test_a_hung_call_ends_at_its_deadline_and_later_calls_do_not_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, events = ScriptedRedis(), []
    link = new_link(client, events)
    client.hang = True
    start = trio.current_time()
    assert await link.call("read", lambda c: c.ping()) is UNAVAILABLE
    assert trio.current_time() - start == pytest.approx(0.1)
    # One late answer is not an outage (a busy node); DOWN_AFTER in a row is.
    assert link.up
    assert not events
    for _ in range(DOWN_AFTER - 1):
        assert await link.call("read", lambda c: c.ping()) is UNAVAILABLE
    assert trio.current_time() - start == pytest.approx(0.1 * DOWN_AFTER)
    # Down: the next calls answer at once, without touching the client.
    calls = client.calls
    before = trio.current_time()
    for _ in range(5):
        assert await link.call("read", lambda c: c.ping()) is UNAVAILABLE
    assert trio.current_time() == before
    assert client.calls == calls
    stats = link.statistics()
    assert (stats.up, stats.timeouts, stats.skipped, stats.outages) == (False, DOWN_AFTER, 5, 1)
    [event] = events
    assert isinstance(event, FailOpen)
    assert event.what_failed == "redis"
    assert "no answer within 0.1 s" in event.reason


async def test_a_refused_call_fails_open_at_once_and_is_counted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, events = ScriptedRedis(), []
    link = new_link(client, events)
    client.refuse = True
    start = trio.current_time()
    for _ in range(DOWN_AFTER):
        assert await link.call("write", lambda c: c.ping()) is UNAVAILABLE
    assert trio.current_time() == start
    assert link.statistics().failures == DOWN_AFTER
    assert "ConnectionError" in events[0].reason  # type: ignore[union-attr]


async def test_an_answer_between_misses_keeps_the_link_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, events = ScriptedRedis(), []
    link = new_link(client, events)
    for _ in range(10):
        client.refuse = True
        for _ in range(DOWN_AFTER - 1):
            assert await link.call("write", lambda c: c.ping()) is UNAVAILABLE
        client.refuse = False
        assert await link.call("write", lambda c: c.ping()) == b"PONG"
    assert link.up
    assert link.statistics().outages == 0
    assert not events


async def test_the_probe_brings_the_link_back_and_runs_the_resyncs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, events = ScriptedRedis(), []
    link = new_link(client, events)
    resynced: list[float] = []

    async def resync() -> None:
        resynced.append(trio.current_time())
        # The resync's own calls go through: the link is up before it runs.
        assert await link.call("resync", lambda c: c.ping()) == b"PONG"

    link.on_resync(resync, lambda: 0)
    async with trio.open_nursery() as nursery:
        await nursery.start(link.run_probe)
        client.refuse = True
        for _ in range(DOWN_AFTER):
            await link.call("read", lambda c: c.ping())
        await trio.sleep(2.0)  # four probes, all refused
        assert not link.up
        assert not resynced
        client.refuse = False
        await trio.sleep(0.6)
        assert link.up
        assert len(resynced) == 1
        assert link.statistics().recoveries == 1
        # A second outage is announced again, and recovers again.
        client.hang = True
        for _ in range(DOWN_AFTER):
            await link.call("read", lambda c: c.ping())
        client.hang = False
        await trio.sleep(0.6)
        assert link.up
        assert len(resynced) == 2
        nursery.cancel_scope.cancel()
    assert [type(e) for e in events] == [FailOpen, FailOpen]


async def test_a_write_redis_missed_waits_and_goes_out_on_recovery() -> None:
    # Real worker threads: the embedding store is called from them, as the engine does.
    client, events = ScriptedRedis(), []
    link = new_link(client, events)
    store = RedisEmbeddingStore(link, None)
    vectors = np.eye(3, 4, dtype=np.float32)
    async with trio.open_nursery() as nursery:
        await nursery.start(link.run_probe)
        client.refuse = True
        for _ in range(DOWN_AFTER):
            await link.call("read", lambda c: c.ping())
        await trio.to_thread.run_sync(store.put_many, "model", ["a", "b", "c"], vectors)
        assert link.statistics().writes_pending == 3
        got, found = await trio.to_thread.run_sync(store.get_many, "model", 4, ["a", "b"])
        assert not found.any()  # no near tier, Redis down: a miss, never an error
        client.refuse = False
        with trio.fail_after(30):  # loose: real threads on a shared machine
            while not link.up or link.statistics().writes_pending:  # noqa: ASYNC110 (polls another thread's state)
                await trio.sleep(0.05)
        got, found = await trio.to_thread.run_sync(store.get_many, "model", 4, ["a", "b", "c"])
        assert found.all()
        np.testing.assert_array_equal(got, vectors)
        assert link.statistics().writes_resynced == 3
        nursery.cancel_scope.cancel()


async def test_on_the_event_loop_thread_the_shared_tier_is_skipped_not_blocked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # An inline ``run_cpu`` calls the store on the loop's own thread: a blocking round trip
    # there would deadlock, so the shared tier answers "not found" and counts it.
    client, events = ScriptedRedis(), []
    link = new_link(client, events)
    store = RedisEmbeddingStore(link, None)
    async with trio.open_nursery() as nursery:
        await nursery.start(link.run_probe)
        _vectors, found = store.get_many("model", 4, ["a"])
        assert not found.any()
        assert link.statistics().skipped == 1
        assert client.calls == 0
        nursery.cancel_scope.cancel()


def test_a_vector_of_another_width_is_never_served() -> None:
    from toolroute._stores.redis.caches import _vector

    assert _vector(np.ones(3, dtype="<f4").tobytes(), 4) is None
    assert _vector(np.array([1, np.nan], dtype="<f4").tobytes(), 2) is None
    assert _vector(None, 2) is None
    row = _vector(np.array([1, 2], dtype="<f4").tobytes(), 2)
    assert row is not None
    assert row.tolist() == [1.0, 2.0]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["ok", "refuse", "hang"]), min_size=1, max_size=30))
def test_no_call_waits_past_its_deadline_and_the_link_is_down_exactly_after_misses_in_a_row(
    script: list[str],
) -> None:
    async def run() -> None:
        client, events = ScriptedRedis(), []
        link = new_link(client, events)
        in_a_row = 0
        for step in script:
            client.refuse, client.hang = step == "refuse", step == "hang"
            was_up = link.up
            start = trio.current_time()
            answer = await link.call("op", lambda c: c.ping())
            waited = trio.current_time() - start
            assert waited <= 0.1 + 1e-9  # never past the deadline
            if not was_up:
                assert answer is UNAVAILABLE
                assert waited == 0  # down: nothing waits on Redis
                continue
            in_a_row = 0 if step == "ok" else in_a_row + 1
            assert (answer == b"PONG") == (step == "ok")
            assert link.up == (in_a_row < DOWN_AFTER)
        stats = link.statistics()
        assert stats.outages == len(events)  # every outage announced, once
        assert stats.calls + stats.skipped == len(script)

    trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))


class ScriptedScripts(ScriptedRedis):
    """Adds ``register_script``: the turn script (the lease) answers "wait" while ``busy``,
    with ticket 1, and hangs while ``hang``."""

    def __init__(self) -> None:
        super().__init__()
        self.busy = False

    def register_script(self, text: str) -> Any:
        async def run(keys: list[str], args: list[object]) -> Any:
            await self._gate()
            if "NX" in text:  # the turn: take the lease and read the record
                return [0, b"", 0, 1] if self.busy else [1, b"", 0, 1]
            return 1  # write and release

        return run


def session_store(client: ScriptedScripts, events: list[Event]) -> RedisSessionStore:
    return RedisSessionStore(
        new_link(client, events),
        MemorySessionStore(),
        ttl_s=60,
        lease_s=5,
        lock_wait_s=0.25,
    )


async def test_a_session_another_node_holds_is_waited_for_at_most_lock_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, events = ScriptedScripts(), []
    store = session_store(client, events)
    client.busy = True
    start = trio.current_time()
    async with store.hold("s") as state:
        assert trio.current_time() - start == pytest.approx(0.25, abs=0.01)
        state.idle_steps = 7  # the step runs on this node's copy
    stats = store._link.statistics()
    assert (stats.lock_waits, stats.lock_timeouts) == (1, 1)
    assert stats.up  # another node's step is not a Redis fault
    assert stats.writes_pending == 1  # the copy waits to go back
    client.busy = False
    async with store.hold("s") as state:
        assert state.idle_steps == 7  # nobody changed the session: this node's copy is newest
    assert store._link.statistics().writes_pending == 0


async def test_a_hung_redis_holds_a_session_step_at_most_one_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, events = ScriptedScripts(), []
    store = session_store(client, events)
    client.hang = True
    start = trio.current_time()
    async with store.hold("s") as state:
        state.force(["mail"])
    assert trio.current_time() - start == pytest.approx(0.1)  # the take; no write was tried
    async with store.hold("s") as state:  # the node's own copy carries the step's change
        assert state.forced_sets == ("mail",)


async def test_a_step_waiting_for_its_turn_looks_at_the_line_with_a_back_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, events = ScriptedScripts(), []
    store = session_store(client, events)
    client.busy = True
    async with store.hold("s"):
        pass
    # Looks at the line at once (taking the ticket), after 2, 4, 8, 16, then every 25 ms
    # within lock_wait_s (13 in all), then the drop of the place given up: not a look every
    # 5 ms.
    assert client.calls == 14
    [event] = [e for e in events if isinstance(e, FailOpen)]
    assert event.what_failed == "session turn"
    assert event.session == "s"

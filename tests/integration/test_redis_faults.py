"""Nodes fail open when Redis is slow, down, restarted or drops its connections, and share
again when it returns: against a real ``redis-server``, which the tests stop and restart,
behind a TCP proxy that adds delay, swallows traffic or drops connections.

Every step still answers (no failed request), no step waits on Redis past the link's deadline
by much (bounds are loose: the machine is shared), the outage is counted and announced in a
``fail_open`` event, and what was written meanwhile goes out when Redis is back.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("coredis", reason="the Redis stores need the redis extra (coredis)")

from redisbox.nodes import CATALOG, node_config, open_nodes
from redisbox.proxy import FaultProxy
from redisbox.server import REDIS_SERVER, RedisServer

from toolroute import ConfigError, Outcome
from toolroute.events import FailOpen
from toolroute.redis import RedisStores, open_event_consumer, open_redis_stores

pytestmark = [
    pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed"),
    # coredis 6.9 leaves the anyio memory streams of a connection that failed to open for
    # the garbage collector (a warning per refused connect); nothing of ours is unclosed.
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <function MemoryObject:pytest.PytestUnraisableExceptionWarning"
    ),
]

#: What a step may take at most while Redis misbehaves: the link's deadline is 0.1 s; the
#: rest is slack for a loaded machine, still far below the faults' own delays.
LOOSE_S = 1.5


@pytest.fixture(autouse=True)
def _collect_failed_connections() -> Iterator[None]:
    yield
    gc.collect()  # their warnings come now, under this module's filter, not at exit


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[FaultProxy]:
    between = FaultProxy(redis_server.port)
    try:
        yield between
    finally:
        between.close()


async def wait_until_up(shared: RedisStores) -> None:
    with trio.fail_after(30):
        while not shared.statistics().up:  # noqa: ASYNC110 (the probe runs on its own clock)
            await trio.sleep(0.05)


def delivered(deliveries: Any) -> list[Any]:
    """The events already waiting in a subscription, without waiting for more."""
    events = []
    while True:
        try:
            events.append(deliveries.receive_nowait().event)
        except trio.WouldBlock:
            return events


async def timed_step(engine: object, text: str, session: str, **options: object) -> float:
    started = time.monotonic()
    step = await engine.prepare_step(text, session=session, **options)  # type: ignore[attr-defined]
    assert step.outcome is Outcome.APPLIED
    return time.monotonic() - started


async def test_a_node_starts_with_redis_down_and_shares_once_it_is_up(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)  # not started yet
    try:
        async with open_nodes(server.url, tmp_path / "a", 1, deadline_s=0.1) as [node]:
            stats = node.shared.statistics()
            assert not stats.up
            assert stats.outages == 1
            assert stats.writes_pending == len(CATALOG)  # the tool vectors, kept for later
            for _ in range(5):
                assert await timed_step(node.engine, "send an email", "s") < LOOSE_S
            server.start()
            await wait_until_up(node.shared)
            with trio.fail_after(30):
                while node.shared.statistics().writes_pending:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            assert node.shared.statistics().writes_resynced >= len(CATALOG)
        # A new node now warms up from what the first one sent after the outage.
        async with open_nodes(server.url, tmp_path / "b", 1) as [later]:
            assert later.shared.embeddings.from_redis == len(CATALOG)
    finally:
        server.stop()


async def test_a_slow_redis_costs_a_step_at_most_the_deadline(
    proxy: FaultProxy, tmp_path: Path
) -> None:
    async with open_nodes(proxy.url, tmp_path, 1, deadline_s=0.1) as [node]:
        assert await timed_step(node.engine, "send an email", "s") < LOOSE_S
        proxy.delay_s = 5.0  # each answer comes 5 s late
        async with node.engine.subscribe() as deliveries:
            latencies = [await timed_step(node.engine, "send an email", "s") for _ in range(5)]
            events = delivered(deliveries)
        assert max(latencies) < LOOSE_S
        # One outage, said once (a step that waited past lock_wait_s for the first step's
        # late release says so too, as a "session turn").
        [event] = [e for e in events if isinstance(e, FailOpen) and e.what_failed == "redis"]
        # Late answers, or a connection that could not open in time: either way, said so.
        assert event.reason.endswith("serving from local stores until Redis answers again")
        stats = node.shared.statistics()
        assert stats.timeouts >= 1
        assert stats.outages == 1
        assert stats.skipped >= 1  # once down, the later steps did not wait at all
        proxy.heal()
        await wait_until_up(node.shared)
        assert node.shared.statistics().recoveries == 1


async def test_a_swallowing_redis_never_holds_a_step(proxy: FaultProxy, tmp_path: Path) -> None:
    # Accepts and never answers: the worst case for a client without deadlines.
    async with open_nodes(proxy.url, tmp_path, 1, deadline_s=0.1) as [node]:
        proxy.swallow = True
        async with trio.open_nursery() as nursery:
            latencies: list[float] = []

            async def step(i: int) -> None:
                latencies.append(await timed_step(node.engine, "book a flight", f"s{i}"))

            for i in range(20):
                nursery.start_soon(step, i)
        assert len(latencies) == 20
        assert max(latencies) < LOOSE_S
        assert node.shared.statistics().outages == 1


async def test_dropped_connections_fail_open_and_what_was_written_goes_back(
    proxy: FaultProxy, redis_server: RedisServer, tmp_path: Path
) -> None:
    async with (
        open_nodes(proxy.url, tmp_path / "a", 1, deadline_s=0.1) as [flaky],
        open_nodes(redis_server.url, tmp_path / "b", 1) as [steady],
    ):
        proxy.drop(refuse=True)
        # The flaky node steps a session during the outage, on its own copy.
        await timed_step(flaky.engine, "book a flight", "trip", force_sets=["mail"])
        assert not flaky.shared.statistics().up
        proxy.heal()
        await wait_until_up(flaky.shared)
        # Its copy went back: the other node's next step of the session forces the set.
        step = await steady.engine.prepare_step("book a flight", session="trip")
        assert "mail" in step.active_sets
        stats = flaky.shared.statistics()
        assert stats.writes_resynced >= 1
        assert stats.writes_dropped == 0
        assert stats.events_dropped == 0


async def test_a_copy_older_than_another_nodes_change_is_dropped_and_counted(
    proxy: FaultProxy, redis_server: RedisServer, tmp_path: Path
) -> None:
    async with (
        open_nodes(proxy.url, tmp_path / "a", 1, deadline_s=0.1) as [flaky],
        open_nodes(redis_server.url, tmp_path / "b", 1) as [steady],
    ):
        await timed_step(flaky.engine, "book a flight", "trip")  # both know version 1
        proxy.drop(refuse=True)
        await timed_step(flaky.engine, "book a flight", "trip", force_sets=["mail"])
        await timed_step(steady.engine, "book a flight", "trip")  # the fleet moves on
        proxy.heal()
        await wait_until_up(flaky.shared)
        assert flaky.shared.statistics().writes_dropped == 1
        step = await steady.engine.prepare_step("book a flight", session="trip")
        assert "mail" not in step.active_sets  # the newer state stood


async def test_redis_restarted_mid_run_no_step_fails_and_nodes_share_again(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with open_nodes(redis_server.url, tmp_path, 2, deadline_s=0.1) as [a, b]:
        latencies = [await timed_step(a.engine, "send an email", "s1")]
        redis_server.stop()
        for i in range(10):
            node = (a, b)[i % 2]
            latencies.append(await timed_step(node.engine, "send an email", f"down{i}"))
        redis_server.start()
        await wait_until_up(a.shared)
        await wait_until_up(b.shared)
        assert max(latencies) < LOOSE_S
        # Sharing again: a set forced on a is forced on b's next step of the session.
        await timed_step(a.engine, "book a flight", "after", force_sets=["mail"])
        step = await b.engine.prepare_step("book a flight", session="after")
        assert "mail" in step.active_sets
        assert a.shared.statistics().recoveries == b.shared.statistics().recoveries == 1


async def test_another_programs_keys_in_the_namespace_fail_their_calls_not_the_link(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    import coredis

    # Keys of another type where the fleet keeps its streams and a session: Redis answers
    # those calls WRONGTYPE, which is no outage; everything else is still shared.
    async with coredis.Redis.from_url(redis_server.url) as client:
        for stream in ("events", "catalog", "learned"):
            await client.set(f"toolroute:{stream}", "not a stream")
        await client.hset("toolroute:session:theirs", {"field": "value"})
    quick = {"attach": False, "probe_interval_s": 0.05}
    async with open_nodes(redis_server.url, tmp_path, 2, **quick) as [a, b]:
        async with (
            a.engine.subscribe() as deliveries,
            a.shared.attach(a.engine),
            b.shared.attach(b.engine),
        ):
            await timed_step(a.engine, "book a flight", "trip", force_sets=["mail"])
            await timed_step(a.engine, "book a flight", "theirs")  # on a's own copy
            await trio.sleep(1)  # the followers read their streams (refused) again and again
            step = await b.engine.prepare_step("book a flight", session="trip")
            events = delivered(deliveries)
        assert "mail" in step.active_sets  # the session was shared all along
        for node in (a, b):
            stats = node.shared.statistics()
            assert stats.up
            assert stats.outages == 0
            assert stats.failures > 0
        said = [e for e in events if isinstance(e, FailOpen) and e.what_failed == "redis"]
        operations = [e.operation for e in said]
        assert "redis stream append" in operations
        assert len(operations) == len(set(operations))  # each said once, not per call
        appended = said[operations.index("redis stream append")]
        assert appended.reason.startswith("WrongTypeError: XADD toolroute:events: ")
        assert len(appended.reason) < 500  # not the events' JSON the pipeline quotes


async def test_a_full_redis_refusing_writes_is_an_outage(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    import coredis

    async with open_nodes(redis_server.url, tmp_path, 1) as [node]:
        async with coredis.Redis.from_url(redis_server.url) as client:
            # Every write refused with OOM (a pipelined one too): Redis cannot serve, unlike
            # a refusal over one key, so the link is down until the probe sees it answer.
            await client.config_set({"maxmemory-policy": "noeviction", "maxmemory": "1"})
            for i in range(5):
                await timed_step(node.engine, "send an email", f"s{i}")
            stats = node.shared.statistics()
            assert stats.outages >= 1
            assert stats.writes_pending >= 1
            await client.config_set({"maxmemory": "0"})
        await wait_until_up(node.shared)


async def test_entries_that_are_not_utf8_are_skipped_not_fatal(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    import coredis

    from toolroute.redis import open_event_consumer

    async with open_nodes(redis_server.url, tmp_path, 2) as [a, b]:
        assert await a.engine.learn("file a refund", ["refund_payment"])
        # Bytes another program wrote where the fleet keeps its evidence and streams.
        async with coredis.Redis.from_url(redis_server.url) as client:
            [key] = [k async for k in client.scan_iter(match=b"toolroute:learn:*")]
            await client.hset(key, {b"\xff": b"\xff"})
            junk = dict.fromkeys((b"node", b"change", b"tools", b"identity", b"event"), b"\xff")
            for stream in ("catalog", "learned", "events"):
                await client.xadd(f"toolroute:{stream}", junk)
        # A notice b's follower reads (with the junk before it), and Redis's evidence again.
        assert await a.engine.learn("refund my card", ["refund_payment"])
        await b.engine.reload_learned()
        await trio.sleep(1.5)  # the followers' reads (loose: a loaded machine)
        for node in (a, b):
            await timed_step(node.engine, "refund a card payment", "s")
        async with open_event_consumer(
            redis_server.url, group="audit", consumer="c", start="0", block_ms=10
        ) as reader:
            assert await reader.read(1000)
        assert reader.unreadable == 1


async def test_a_tls_url_for_a_plain_redis_is_a_clear_error_and_a_down_one_fails_open(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    import re
    import subprocess
    import sys

    from redisbox.server import free_port

    # A plain Redis never answers a TLS hello (it waits for the rest of a "command"): left
    # alone, the stores would look like a Redis that is down for ever. Loose deadline: the
    # plain PING that tells the two apart must be answered within it.
    url = f"rediss://127.0.0.1:{redis_server.port}"
    expected = re.escape(
        f"the server at 127.0.0.1:{redis_server.port} speaks plain Redis (it answered a "
        f"plain-text PING with '+PONG') and will never answer a TLS handshake; is it plain "
        f"redis:// rather than {url}?"
    )
    with pytest.raises(ConfigError, match=expected):
        async with open_redis_stores(url, config=node_config(tmp_path), deadline_s=1.0):
            pass
    with pytest.raises(ConfigError, match=expected):
        async with open_event_consumer(url, group="g", consumer="c"):
            pass
    done = await trio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-m", "toolroute", "events", "--redis", url],
            capture_output=True,
            text=True,
            timeout=60,
        )
    )
    assert done.returncode == 2
    assert re.fullmatch(f"toolroute: error: {expected}", done.stderr.strip())
    # Nothing listening: an outage at start, failed open as for redis://.
    down = f"rediss://127.0.0.1:{free_port()}"
    async with open_redis_stores(down, config=node_config(tmp_path), deadline_s=1.0) as shared:
        assert not shared.statistics().up

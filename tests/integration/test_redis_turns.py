"""A session's line across nodes sharing one real ``redis-server``: steps are applied in the
order of the tickets they took on arrival, across nodes and within one, even while the lease
is contended; a ticket whose node went silent holds the line only until its claim lapses.

Each test starts its own ``redis-server`` on a free loopback port. The waits are given a
generous ``lock_wait_s`` so that a loaded machine does not turn a wait into a fail-open step;
what is checked is the order, not how fast it goes.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("coredis", reason="the Redis stores need the redis extra (coredis)")

from redisbox.nodes import node_config, open_nodes
from redisbox.server import REDIS_SERVER, RedisServer

from toolroute import Outcome
from toolroute._stores.redis.link import RedisLink
from toolroute._stores.redis.sessions import RedisSessionStore
from toolroute._stores.redis.turns import _TAKE
from toolroute._stores.sessions import MemorySessionStore
from toolroute.redis import open_redis_stores

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")

#: Long enough that no step of these tests waits it out on a busy machine.
PATIENT_S = 30.0


def patient(store: RedisSessionStore) -> RedisSessionStore:
    """``store`` with places that last ``PATIENT_S`` unrenewed: a process the machine pauses
    for a second must not have its places skipped in a test about order."""
    store._lines._claim_s, store._lines._claim_ms = PATIENT_S, int(PATIENT_S * 1000)
    return store


async def wait_for_ticket(turn: Any) -> int:
    with trio.fail_after(PATIENT_S):
        while turn.ticket is None:  # noqa: ASYNC110 (taken by the store's background task)
            await trio.sleep(0.001)
    return int(turn.ticket)


async def test_steps_arriving_at_three_nodes_are_applied_in_ticket_order(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    def node(name: str) -> Any:
        return open_redis_stores(
            redis_server.url,
            config=node_config(tmp_path / name),
            node=name,
            deadline_s=1.0,
            lock_wait_s=PATIENT_S,
        )

    async with (
        node("a") as a,
        node("b") as b,
        node("c") as c,
    ):
        stores = [patient(a.sessions), patient(b.sessions), patient(c.sessions)]
        rng = random.Random(7)
        # Runs of steps on one node between steps on the others: the lease alone would let a
        # node's later step overtake the others' earlier ones.
        nodes = [rng.choice((0, 0, 1, 2)) for _ in range(24)]
        applied: list[str] = []
        tickets: list[int] = []

        async def step(turn: Any, label: str) -> None:
            async with turn as state:
                applied.append(label)
                state.activated = (*state.activated, label)  # carried between nodes
                await trio.sleep(0.02)  # a step's work: the steps after it queue meanwhile

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for i, node in enumerate(nodes):
                    turn = stores[node].arrive("shared")
                    nursery.start_soon(step, turn, f"{node}:{i}")
                    # Arrived once numbered: the next step arrives after it.
                    tickets.append(await wait_for_ticket(turn))
                    await trio.sleep(rng.choice((0.0, 0.005, 0.01)))
        labels = [f"{node}:{i}" for i, node in enumerate(nodes)]
        assert tickets == sorted(tickets)
        assert len(set(tickets)) == len(tickets)
        assert applied == labels  # in arrival order, across the nodes
        async with stores[0].hold("shared") as state:
            assert state.activated == tuple(labels)  # no step lost another's change
        stats = [s.statistics() for s in (a, b, c)]
        assert sum(s.lock_waits for s in stats) > 0  # the line was contended
        assert sum(s.lock_timeouts + s.tickets_late + s.tickets_skipped for s in stats) == 0


async def test_an_engines_own_steps_line_up_in_inbox_order_behind_other_nodes(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with open_nodes(
        redis_server.url, tmp_path, 3, attach=False, lock_wait_s=PATIENT_S
    ) as nodes:
        entered: list[int] = []  # tickets, in the order the fleet applied their steps
        arrived: dict[str, list[Any]] = {n.name: [] for n in nodes}

        for node in nodes:
            store = patient(node.shared.sessions)
            arrive, enter = store.arrive, store._enter

            def arriving(session: str, arrive: Any = arrive, name: str = node.name) -> Any:
                turn = arrive(session)
                arrived[name].append(turn)
                return turn

            async def entering(place: Any, enter: Any = enter) -> Any:
                entry = await enter(place)
                assert entry.token is not None  # its turn, with the lease: not a local copy
                entered.append(place.ticket)
                return entry

            store.arrive = arriving  # type: ignore[method-assign]
            store._enter = entering  # type: ignore[method-assign]

        results = []

        async def step(node: Any, i: int) -> None:
            results.append(await node.engine.prepare_step(f"book flight {i}", session="trip"))

        with trio.fail_after(120):  # a node waiting on itself would never finish
            async with trio.open_nursery() as nursery:
                for i in range(30):  # bursts: each node's actor queues several at once
                    nursery.start_soon(step, nodes[i % 3], i)
                    if i % 6 == 5:
                        await trio.sleep(0.01)
        assert len(results) == 30
        assert all(r.outcome is Outcome.APPLIED for r in results)
        assert len(entered) == 30
        assert entered == sorted(entered)  # applied in ticket order, across the nodes
        for turns in arrived.values():  # each node numbered its steps in inbox order
            numbers = [t.ticket for t in turns]
            assert numbers == sorted(numbers)
        stats = [n.shared.statistics() for n in nodes]
        assert sum(s.lock_timeouts + s.tickets_late for s in stats) == 0, stats


@asynccontextmanager
async def session_store(url: str, *, lock_wait_s: float) -> AsyncIterator[RedisSessionStore]:
    """A node's session store with its background tasks."""
    import coredis

    client: coredis.Redis[bytes] = coredis.Redis.from_url(url)
    async with client:
        link = RedisLink(client, namespace="toolroute", deadline_s=1.0, probe_interval_s=0.5)
        store = RedisSessionStore(
            link, MemorySessionStore(), ttl_s=60, lease_s=5, lock_wait_s=lock_wait_s
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run_lines)
            yield store
            nursery.cancel_scope.cancel()


async def test_a_ticket_whose_node_died_holds_the_line_only_until_its_claim_lapses(
    redis_server: RedisServer,
) -> None:
    import coredis

    claim_ms = 500
    keys = [f"toolroute:session:s:{k}" for k in ("ticket", "served", "claims")]
    async with (
        session_store(redis_server.url, lock_wait_s=PATIENT_S) as live,
        coredis.Redis.from_url(redis_server.url) as client,
    ):
        async with live.hold("s") as state:
            state.idle_steps = 1
        # A node takes a ticket (as its store does, claimed for 0.5 s) and dies.
        take = client.register_script(_TAKE)
        lost = int(await take(keys=keys, args=[1, claim_ms, 60_000]))
        numbered_at = time.monotonic()
        later = live.arrive("s")
        with trio.fail_after(PATIENT_S):
            async with later as state:
                waited = time.monotonic() - numbered_at
                assert later.ticket == lost + 1
                assert state.idle_steps == 1  # the fleet's state, not a local copy
                state.idle_steps = 2
        # It waited for the claim (loose: the lapse is measured on Redis's clock) and then
        # took its turn; it did not wait out lock_wait_s.
        assert waited >= claim_ms / 1000 * 0.8
        stats = live._link.statistics()
        assert (stats.tickets_skipped, stats.lock_timeouts, stats.tickets_late) == (1, 0, 0)
        assert int(await client.get("toolroute:session:s:served") or 0) == lost + 1
        assert not await client.hexists("toolroute:session:s:claims", str(lost))
        async with live.hold("s") as state:
            assert state.idle_steps == 2

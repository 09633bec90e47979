"""Three engine processes sharing one Redis: a conversation whose steps hop between them keeps
its state, and a catalogue change made on one is served by all.

Each replica is a process of its own (``tests/redisbox/replica.py``) with its own cache
directory, as replicas behind a load balancer would be. Bounds are loose: the processes start
on a shared machine.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

pytest.importorskip("coredis", reason="the Redis stores need the redis extra (coredis)")

from redisbox.replicas import Replica
from redisbox.server import REDIS_SERVER, RedisServer

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Replica]]:
    # Started once for the module: a process start costs seconds on a shared machine.
    tmp_path = tmp_path_factory.mktemp("replicas")
    server = RedisServer(tmp_path)
    server.start()
    started = [Replica(server.url, tmp_path / f"r{i}", f"r{i}") for i in range(3)]
    try:
        for replica in started:
            replica.wait_ready()
        yield started
    finally:
        for replica in started:
            replica.close()
        server.stop()


def step(replica: Replica, session: str, text: str, **options: object) -> dict[str, object]:
    [reply] = replica.ask(
        {"op": "steps", "items": [{"session": session, "messages": text, **options}]}
    )
    assert reply["outcome"] == "applied"
    return reply  # type: ignore[no-any-return]


def test_a_conversation_hops_between_three_replicas(replicas: list[Replica]) -> None:
    r0, r1, r2 = replicas
    text = "book a flight to rome"
    assert "mail" in step(r0, "c1", text, force_sets=["mail"])["active_sets"]
    second = step(r1, "c1", text)
    assert "mail" in second["active_sets"]
    assert "read_inbox" in second["tool_ids"]  # type: ignore[operator]
    assert r2.ask({"op": "search", "session": "c1", "query": "refund a card payment"}) == [
        "refund_payment"
    ]
    third = step(r0, "c1", text, release_sets=["mail"])
    assert "refund_payment" in third["tool_ids"]  # type: ignore[operator]
    assert "mail" not in third["active_sets"]  # type: ignore[operator]
    fourth = step(r1, "c1", text)
    assert "refund_payment" not in fourth["tool_ids"]  # type: ignore[operator]
    assert fourth["active_sets"] == []
    stats = [r.ask({"op": "stats"}) for r in replicas]
    assert all(s["up"] and s["failures"] == s["timeouts"] == 0 for s in stats)


def test_a_catalogue_change_on_one_replica_is_served_by_all(replicas: list[Replica]) -> None:
    tool = {"id": "translate_text", "name": "translate_text", "description": "Translate a text"}
    assert replicas[1].ask({"op": "update", "add": [tool], "remove": ["cancel_flight"]}) == "ok"
    give_up = time.monotonic() + 60
    for replica in replicas:
        while not replica.ask({"op": "has", "id": "translate_text"}):
            assert time.monotonic() < give_up, f"{replica.name} never saw the change"
            time.sleep(0.05)
        assert not replica.ask({"op": "has", "id": "cancel_flight"})
    picks = [r.ask({"op": "select", "query": "translate this text to french"}) for r in replicas]
    assert all(p[0] == "translate_text" for p in picks)
    assert picks[0] == picks[1] == picks[2]

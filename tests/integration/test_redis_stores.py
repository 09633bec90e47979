"""Nodes sharing one real ``redis-server``: the embedding cache, sessions (one writer at a time,
state carried between nodes), the routing cache, the event stream with consumer groups, and
catalogue changes made on one node applied on the others.

Each test starts its own ``redis-server`` on a free loopback port (skipped only where the
binary is not installed; CI installs it). Time bounds are loose: the machine is shared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("coredis", reason="the Redis stores need the redis extra (coredis)")

from redisbox.nodes import CATALOG, node_config, open_nodes
from redisbox.server import REDIS_SERVER, RedisServer

from toolroute import ConfigError, Tool
from toolroute.events import FailOpen, StepFinished, to_json
from toolroute.redis import open_event_consumer, open_redis_stores
from toolroute.testing import ScriptedDecider

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")


async def test_a_new_node_reads_the_vectors_another_node_embedded(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with open_nodes(redis_server.url, tmp_path, 1) as [first]:
        assert first.shared.embeddings.from_redis == 0
    async with open_nodes(redis_server.url, tmp_path / "later", 1) as [second]:
        # Every tool vector came from Redis; none was embedded again.
        assert second.shared.embeddings.from_redis == len(CATALOG)
        stats = second.shared.statistics()
        assert stats.up
        assert stats.failures == stats.timeouts == 0
    # ... and is in the new node's near tier (its disk cache) from then on.
    assert any((tmp_path / "later" / "node0").glob("*.emb"))


async def test_steps_of_one_session_hop_between_nodes_with_their_state(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with open_nodes(redis_server.url, tmp_path, 3) as nodes:
        a, b, c = (n.engine for n in nodes)
        first = await a.prepare_step("book a flight to rome", session="trip", force_sets=["mail"])
        assert "mail" in first.active_sets
        # Forced on node a; node b's step of the same session still forces it.
        second = await b.prepare_step("book a flight to rome", session="trip")
        assert "mail" in second.active_sets
        assert second.tool_ids is not None
        assert "read_inbox" in second.tool_ids
        # A tool found with search_tools on node c is shown on the next step, on node a.
        found = await c.search_tools({"query": "refund a card payment"}, session="trip", k=1)
        assert [t["name"] for t in found["tools"]] == ["refund_payment"]
        third = await a.prepare_step("book a flight to rome", session="trip", release_sets=["mail"])
        assert third.tool_ids is not None
        assert "refund_payment" in third.tool_ids
        assert "mail" not in third.active_sets
        fourth = await b.prepare_step("book a flight to rome", session="trip")
        assert fourth.tool_ids is not None
        assert "refund_payment" not in fourth.tool_ids
        assert "mail" not in fourth.active_sets
        # Another session is untouched by all of this.
        other = await c.prepare_step("book a flight to rome", session="other")
        assert other.active_sets == ()


async def test_one_node_at_a_time_holds_a_session(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with open_nodes(redis_server.url, tmp_path, 2, attach=False) as nodes:
        stores = [n.shared.sessions for n in nodes]
        inside: set[int] = set()
        most = 0

        async def steps(node: int) -> None:
            # One node's steps of the session one after another, as its step actor runs them.
            nonlocal most
            for _ in range(10):
                async with stores[node].hold("shared") as state:
                    inside.add(node)
                    most = max(most, len(inside))
                    seen = state.idle_steps
                    await trio.sleep(0.01)  # a step's work, during which the other node waits
                    state.idle_steps = seen + 1
                    inside.discard(node)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(steps, 0)
            nursery.start_soon(steps, 1)
        assert most == 1
        async with stores[0].hold("shared") as state:
            assert state.idle_steps == 20  # no step lost another's change
        stats = [n.shared.statistics() for n in nodes]
        assert sum(s.lock_waits for s in stats) > 0
        assert sum(s.lock_timeouts for s in stats) == 0


async def test_a_session_expires_from_redis_after_its_ttl(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    import coredis

    async with open_nodes(redis_server.url, tmp_path, 1, session_ttl_s=30) as [node]:
        await node.engine.prepare_step("send an email", session="brief")
    async with coredis.Redis.from_url(redis_server.url) as client:
        ttl_ms = await client.pttl("toolroute:session:brief")
        assert 0 < ttl_ms <= 30_000
        assert not await client.exists(["toolroute:session:brief:lock"])  # released


async def test_a_routing_cached_on_one_node_is_a_hit_on_another(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    deciders = [ScriptedDecider(default=0.9), ScriptedDecider(default=0.9)]
    async with open_nodes(
        redis_server.url,
        tmp_path,
        2,
        deciders=deciders,
        sections={"routing_session": {"cache": True}},
    ) as [a, b]:
        query = "refund the last card payment"
        first = await a.engine.route_servers(query, session="s1")
        assert not first.cache_hit
        assert deciders[0].requests
        second = await b.engine.route_servers(query, session="s1")
        assert second.cache_hit
        assert second.selected == first.selected
        assert not deciders[1].requests  # node b asked no model
        # The cache is per session: another session routes afresh.
        third = await b.engine.route_servers(query, session="s2")
        assert not third.cache_hit
        assert deciders[1].requests


async def test_events_of_every_node_reach_each_consumer_group(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    url = redis_server.url
    async with (
        open_event_consumer(url, group="audit", consumer="one") as audit,
        open_event_consumer(url, group="metrics", consumer="one") as metrics,
        open_event_consumer(url, group="metrics", consumer="two") as metrics_too,
        open_nodes(url, tmp_path, 2) as nodes,
    ):
        for i, node in enumerate(nodes):
            await node.engine.prepare_step("send an email", session=f"s{i}")
        seen: dict[str, list[str]] = {"audit": [], "metrics": []}
        with trio.fail_after(30):
            while len([e for e in seen["audit"] if e.endswith("step.finished")]) < 2:
                seen["audit"] += [f"{x.node}:{x.event.type}" for x in await audit.read()]
        steps = [e for e in seen["audit"] if e.endswith("step.finished")]
        assert sorted(steps) == ["node0:step.finished", "node1:step.finished"]
        # The consumers of one group share the events: each event goes to one of them.
        got = []
        with trio.fail_after(30):
            while len([x for x in got if isinstance(x.event, StepFinished)]) < 2:
                got += await metrics.read(count=1) + await metrics_too.read(count=1)
        ids = [x.entry_id for x in got]
        assert len(ids) == len(set(ids))
        await metrics.ack(*ids)
        assert all(n.shared.statistics().events_dropped == 0 for n in nodes)


async def test_the_shared_stream_carries_no_subscriber_snapshot(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # A snapshot is one subscriber's view of its node at subscribing; in the stream every
    # consumer group would read it as an event of the engine.
    async with (
        open_event_consumer(redis_server.url, group="audit", consumer="one") as audit,
        open_nodes(redis_server.url, tmp_path, 1) as (node,),
    ):
        await node.engine.prepare_step("send an email", session="s0")
        seen: list[str] = []
        with trio.fail_after(30):
            while "step.finished" not in seen:
                seen += [x.event.type for x in await audit.read()]
    assert "subscription.started" not in seen


async def test_a_catalogue_change_on_one_node_is_applied_on_the_others(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    new = Tool(id="translate_text", name="translate_text", description="Translate a text")
    async with open_nodes(redis_server.url, tmp_path, 3) as nodes:
        await nodes[0].shared.update(nodes[0].engine, add=[new], remove=["cancel_flight"])
        with trio.fail_after(30):
            for node in nodes:
                while "translate_text" not in node.engine.catalog:  # noqa: ASYNC110 (another node's change)
                    await trio.sleep(0.02)
        for node in nodes:
            assert "cancel_flight" not in node.engine.catalog
            picked = await node.engine.select("translate this text to french")
            assert picked.tool_ids[0] == "translate_text"
        assert nodes[1].shared.catalog.applied == nodes[2].shared.catalog.applied == 1
        assert nodes[0].shared.catalog.applied == 0  # its own change, applied once


async def test_a_bad_url_or_option_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unix:// URL, got 'http://x'"):
        async with open_redis_stores("http://x"):
            pass
    with pytest.raises(ConfigError, match=r"deadline_s must be a positive number.*got 0"):
        async with open_redis_stores("redis://127.0.0.1:1", deadline_s=0):
            pass
    with pytest.raises(ConfigError, match="config must be an EngineConfig"):
        async with open_redis_stores("redis://127.0.0.1:1", config={}):  # type: ignore[arg-type]
            pass
    # Each once accepted: sessions Redis would refuse to keep, calls with no deadline, or a
    # TypeError from inside the stores.
    for option, value in (
        ("session_ttl_s", 0),
        ("session_ttl_s", -1),
        ("session_ttl_s", "x"),
        ("deadline_s", float("inf")),
    ):
        with pytest.raises(ConfigError, match=f"{option} must be a positive number of seconds"):
            async with open_redis_stores("redis://127.0.0.1:1", **{option: value}):
                pass
    with pytest.raises(ConfigError, match="namespace must be a non-empty string, got 5"):
        async with open_redis_stores("redis://127.0.0.1:1", namespace=5):  # type: ignore[arg-type]
            pass
    with pytest.raises(ConfigError, match="node must be a string or None, got 7"):
        async with open_redis_stores("redis://127.0.0.1:1", node=7):  # type: ignore[arg-type]
            pass


async def test_the_events_command_prints_and_follows_every_nodes_events(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    import json
    import subprocess
    import sys

    command = [sys.executable, "-m", "toolroute", "events", "--redis", redis_server.url]
    # A plain Popen: the follower runs beside the test, read from a worker thread.
    follower = subprocess.Popen(  # noqa: ASYNC220
        [*command, "--follow", "--from-start"], stdout=subprocess.PIPE, text=True
    )
    try:
        async with open_nodes(redis_server.url, tmp_path, 2) as nodes:
            for i, node in enumerate(nodes):
                await node.engine.prepare_step("send an email", session=f"s{i}")
        printed = await trio.to_thread.run_sync(
            lambda: subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
        )
        lines = [json.loads(line) for line in printed.stdout.splitlines()]
        steps = sorted(line["node"] for line in lines if line["type"] == "step.finished")
        assert steps == ["node0", "node1"]
        assert all(line["id"] and "time" in line for line in lines)
        # The follower printed the same events as they came.
        assert follower.stdout is not None
        followed = []
        with trio.fail_after(60):
            while len(followed) < len(lines):
                line = await trio.to_thread.run_sync(
                    follower.stdout.readline, abandon_on_cancel=True
                )
                followed.append(json.loads(line))
        assert followed == lines
    finally:
        follower.kill()
        follower.wait()
        if follower.stdout is not None:
            follower.stdout.close()


async def test_the_events_command_names_a_key_that_is_not_a_stream(
    redis_server: RedisServer,
) -> None:
    import subprocess
    import sys

    import coredis

    async with coredis.Redis.from_url(redis_server.url) as client:
        await client.set("toolroute:events", "another program's value")
    command = [sys.executable, "-m", "toolroute", "events", "--redis", redis_server.url]
    for extra in ((), ("--follow",), ("--group", "g")):
        done = await trio.to_thread.run_sync(
            lambda extra=extra: subprocess.run(
                [*command, *extra], capture_output=True, text=True, timeout=60
            )
        )
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [
            f"toolroute: error: toolroute:events in {redis_server.url} is not a stream "
            "(Operation against a key holding the wrong kind of value): another program's "
            "key, or another --namespace"
        ]


def test_the_events_command_names_a_server_it_cannot_reach() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "toolroute", "events", "--redis", "redis://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "toolroute: error: cannot read events from redis://127.0.0.1:1:"
        " Unable to establish a connection to 127.0.0.1:1"
    ]


async def test_a_url_the_client_would_misread_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"the port must be a number.*'redis://h:port'"):
        async with open_redis_stores("redis://h:port"):
            pass
    # The client would read these as database 0, silently.
    for url, database in (("redis://127.0.0.1:1/two", "two"), ("redis://127.0.0.1:1?db=x", "x")):
        with pytest.raises(ConfigError, match=f"the database must be a number.*got '{database}'"):
            async with open_redis_stores(url):
                pass
        with pytest.raises(ConfigError, match="the database must be a number"):
            async with open_event_consumer(url, group="g", consumer="c"):
                pass
    # A password is never repeated in a message.
    with pytest.raises(ConfigError, match=r"got 'http://user:\*\*\*@h'"):
        async with open_redis_stores("http://user:secret@h"):
            pass


async def test_an_event_consumers_bad_argument_is_a_clear_error() -> None:
    url = "redis://127.0.0.1:1"
    for option, value, said in (
        ("block_ms", 0, "block_ms must be a positive int"),  # BLOCK 0 waits for ever
        ("block_ms", 1.5, "block_ms must be a positive int"),
        ("start", "latest", 'start must be "\\$", "0" or a stream entry id'),
        ("group", "", "group must be a non-empty string"),
        ("namespace", 3, "namespace must be a non-empty string"),
    ):
        arguments: dict[str, Any] = {"group": "g", "consumer": "c", option: value}
        with pytest.raises(ConfigError, match=said):
            async with open_event_consumer(url, **arguments):
                pass


async def test_a_redis_that_refuses_the_urls_password_or_database_is_a_clear_error(
    tmp_path: Path,
) -> None:
    import re
    import subprocess
    import sys

    server = RedisServer(tmp_path, password="sesame")
    server.start()
    try:
        host = f"127.0.0.1:{server.port}"
        for url, said in (
            (f"redis://:wrong@{host}", "AuthenticationFailureError"),
            (f"redis://{host}", "AuthenticationRequiredError"),
            (f"redis://:sesame@{host}/99", "DB index is out of range"),
        ):
            shown = url.replace(":wrong@", ":***@").replace(":sesame@", ":***@")
            expected = re.escape(f"the Redis at {shown} refused this client: ") + f".*{said}"
            # Not an outage to fail open on: the stores would never share anything.
            with pytest.raises(ConfigError, match=expected):
                async with open_redis_stores(url, config=node_config(tmp_path)):
                    pass
            with pytest.raises(ConfigError, match=expected):
                async with open_event_consumer(url, group="g", consumer="c"):
                    pass
            done = await trio.to_thread.run_sync(
                lambda url=url: subprocess.run(
                    [sys.executable, "-m", "toolroute", "events", "--redis", url],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
            )
            assert done.returncode == 2
            [line] = done.stderr.strip().splitlines()
            assert line.startswith(f"toolroute: error: the Redis at {shown} refused this client")
        async with open_redis_stores(f"redis://:sesame@{host}", config=node_config(tmp_path)):
            pass  # the right password
    finally:
        server.stop()


async def test_the_events_command_follows_across_a_redis_restart(
    redis_server: RedisServer,
) -> None:
    import json
    import subprocess
    import sys

    import coredis

    async def publish(reason: str) -> None:
        event = FailOpen(operation="test", what_failed="redis", reason=reason)
        async with coredis.Redis.from_url(redis_server.url) as client:
            await client.xadd("toolroute:events", {"node": "n", "event": to_json(event)})

    command = [sys.executable, "-m", "toolroute", "events", "--redis", redis_server.url]
    # From the start: each prints the first event however late it started.
    followers = [
        subprocess.Popen(  # noqa: ASYNC220 (read from worker threads below)
            [*command, "--follow", "--from-start", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for extra in ((), ("--group", "audit"))
    ]
    said: list[list[str]] = []
    try:

        async def next_reason(follower: subprocess.Popen[str]) -> str:
            assert follower.stdout is not None
            with trio.fail_after(60):
                line = await trio.to_thread.run_sync(
                    follower.stdout.readline, abandon_on_cancel=True
                )
            return str(json.loads(line)["reason"])

        await publish("before")
        assert [await next_reason(f) for f in followers] == ["before", "before"]
        redis_server.stop()
        await trio.sleep(2)  # long enough for both to see it gone
        redis_server.start()  # empty: no persistence
        await publish("after")
        assert [await next_reason(f) for f in followers] == ["after", "after"]
    finally:
        for follower in followers:
            follower.kill()
            _, errors = follower.communicate(timeout=60)
            said.append(errors.splitlines())
    for lines in said:
        assert lines[0].startswith(f"toolroute events: lost {redis_server.url} (")
        assert lines[1] == f"toolroute events: following {redis_server.url} again"


async def test_a_consumer_whose_group_is_gone_makes_it_again(redis_server: RedisServer) -> None:
    import coredis

    async with (
        coredis.Redis.from_url(redis_server.url) as client,
        open_event_consumer(redis_server.url, group="audit", consumer="a1", block_ms=10) as reader,
    ):
        assert await reader.read() == []
        # Redis restarted empty, or the stream was deleted: the group went with it.
        await client.delete(["toolroute:events"])
        event = FailOpen(operation="test", what_failed="redis", reason="since")
        await client.xadd("toolroute:events", {"node": "n", "event": to_json(event)})
        [item] = await reader.read()
        assert item.event == event

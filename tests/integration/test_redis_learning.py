"""Learned evidence shared through a real ``redis-server``: a tool learned on one node ranks on
a node opened later, forgetting reaches the fleet, no request text reaches Redis unless
``learning.keep_text`` is on, and a node that learns while Redis is down sends it on return.

Time bounds are loose (the machine is shared); waits poll for what the engine does in the
background (loading the evidence after it starts).
"""

from __future__ import annotations

import gc
import hashlib
import io
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio

pytest.importorskip("coredis", reason="the Redis stores need the redis extra (coredis)")

import coredis
from redisbox.proxy import FaultProxy
from redisbox.server import REDIS_SERVER, RedisServer

from toolroute import Catalog, Engine, EngineConfig, open_engine
from toolroute.redis import RedisStores, open_redis_stores
from toolroute.stores import LearnedExample
from toolroute.testing import ScriptedEmbedder

pytestmark = [
    pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed"),
    # coredis 6.9 leaves the anyio memory streams of a connection that failed to open for
    # the garbage collector (a warning per refused connect); nothing of ours is unclosed.
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <function MemoryObject:pytest.PytestUnraisableExceptionWarning"
    ),
]

#: Each tool on its own axis; the requests lean toward "alpha" by words they do not share,
#: and toward what was learned by their fourth axis.
VECTORS: dict[str, Sequence[float]] = {
    "alpha: alpha tool": (1, 0, 0, 0),
    "beta: beta tool": (0, 1, 0, 0),
    "gamma: gamma tool": (0, 0, 1, 0),
    "ledger please": (0.3, 0, 0, 1),
    "open the books": (0.3, 0, 0.05, 1),
}
TOOLS = Catalog.from_plain(
    [
        {"name": "alpha", "description": "alpha tool"},
        {"name": "beta", "description": "beta tool"},
        {"name": "gamma", "description": "gamma tool"},
    ]
)
LEARNED = "open the books"


@pytest.fixture(autouse=True)
def _collect_failed_connections() -> Iterator[None]:
    yield
    gc.collect()  # their warnings come now, under this module's filter, not at exit


@asynccontextmanager
async def open_node(
    url: str, directory: Path, *, keep_text: bool = False, **options: Any
) -> AsyncIterator[tuple[RedisStores, Engine]]:
    config = EngineConfig.from_mapping(
        {
            "cache_dir": str(directory),
            "warmup": {"wait": True},
            "learning": {"keep_text": keep_text},
        }
    )
    options.setdefault("deadline_s", 1.0)  # not about a slow Redis: no outage from a pause
    async with (
        open_redis_stores(url, config=config, **options) as shared,
        open_engine(
            TOOLS,
            config=config,
            embedder=ScriptedEmbedder(dim=4, vectors=VECTORS),
            stores=shared.stores,
        ) as engine,
    ):
        yield shared, engine


async def top(engine: Engine, query: str = "ledger please") -> str:
    selection = await engine.select(query, strategy="semantic")
    return str(selection.tool_ids[0])


async def ranks_first(engine: Engine, tool_id: str) -> bool:
    """Whether ``tool_id`` comes to rank first (the evidence loads after the engine starts)."""
    with trio.move_on_after(10):
        while await top(engine) != tool_id:  # noqa: ASYNC110 (loaded in the background)
            await trio.sleep(0.05)
        return True
    return False


async def stored_values(url: str) -> list[bytes]:
    client: coredis.Redis[bytes] = coredis.Redis.from_url(url)
    async with client:
        keys = [k async for k in client.scan_iter(match=b"toolroute:learn:*")]
        return [v for key in keys for v in (await client.hgetall(key)).values()]


def holds_text(value: bytes, text: str) -> bool:
    with np.load(io.BytesIO(value), allow_pickle=False) as data:
        has_texts = "texts" in data.files
    encodings = (text.encode("utf-8"), text.encode("utf-32-le"))
    return has_texts or any(encoded in value for encoded in encodings)


async def test_a_tool_learned_on_one_node_ranks_on_another_without_its_text(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with open_node(redis_server.url, tmp_path / "a") as (_, first):
        assert await top(first) == "alpha"
        assert await first.learn(LEARNED, ["gamma"]) is True
        assert await top(first) == "gamma"
    (value,) = await stored_values(redis_server.url)
    assert not holds_text(value, LEARNED)
    with np.load(io.BytesIO(value), allow_pickle=False) as data:
        # The request is kept as its vector and a hash of its text.
        assert [len(str(d)) for d in data["digests"]] == [64]
        assert data["vectors"].shape == (1, 4)
    # A new replica, its cache directory empty, ranks by what the first one learned.
    async with open_node(redis_server.url, tmp_path / "b") as (shared, second):
        assert await ranks_first(second, "gamma")
        assert shared.learning.from_redis == 1
        assert shared.statistics().failures == 0
        await second.forget(["gamma"])
    assert await stored_values(redis_server.url) == []
    async with open_node(redis_server.url, tmp_path / "c") as (shared, third):
        await third.ready()
        identity = ScriptedEmbedder(dim=4, vectors=VECTORS).identity
        assert await trio.to_thread.run_sync(shared.learning.load, identity) == {}
        assert await top(third) == "alpha"


async def test_a_running_node_reads_what_another_node_learns_and_forgets(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with (
        open_node(redis_server.url, tmp_path / "a", node="a") as (shared_a, first),
        open_node(redis_server.url, tmp_path / "b", node="b") as (shared_b, second),
        shared_a.attach(first),
        shared_b.attach(second),
    ):
        await second.ready()
        assert await top(second) == "alpha"
        # Learned on the first node while the second runs: the second reads it again.
        assert await first.learn(LEARNED, ["gamma"]) is True
        assert await ranks_first(second, "gamma")
        # Forgotten there: gone here too.
        await first.forget(["gamma"])
        assert await ranks_first(second, "alpha")
        assert shared_b.statistics().failures == 0


async def test_request_text_reaches_redis_only_when_kept(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with open_node(redis_server.url, tmp_path / "a", keep_text=True) as (_, first):
        await first.ready()
        assert await first.learn(LEARNED, ["beta"]) is True
    (value,) = await stored_values(redis_server.url)
    assert holds_text(value, LEARNED)
    async with open_node(redis_server.url, tmp_path / "b", keep_text=True) as (shared, second):
        assert await ranks_first(second, "beta")
        identity = ScriptedEmbedder(dim=4, vectors=VECTORS).identity
        loaded = await trio.to_thread.run_sync(shared.learning.load, identity)
        (entry,) = loaded["beta"]
        assert entry.text == LEARNED


async def test_a_node_learns_while_redis_is_down_and_sends_it_when_it_returns(
    tmp_path: Path,
) -> None:
    server = RedisServer(tmp_path)  # not started yet
    try:
        async with open_node(server.url, tmp_path / "a", deadline_s=0.1) as (shared, first):
            await first.ready()
            assert not shared.statistics().up
            # Learning works on the node's own stores; the write waits for Redis.
            assert await first.learn(LEARNED, ["gamma"]) is True
            assert await top(first) == "gamma"
            assert shared.learning.pending() == 1
            server.start()
            with trio.fail_after(30):
                while shared.learning.pending() or not shared.statistics().up:  # noqa: ASYNC110
                    await trio.sleep(0.05)
        async with open_node(server.url, tmp_path / "b") as (_, later):
            assert await ranks_first(later, "gamma")
    finally:
        server.stop()


def example(name: str) -> LearnedExample:
    vector = np.zeros(4, dtype=np.float32)
    vector[3] = 1.0
    return LearnedExample(
        digest=hashlib.sha256(name.encode()).hexdigest(), vector=vector, source="use"
    )


async def test_what_a_node_forgot_and_learned_while_cut_off_reaches_redis_in_order(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    proxy = FaultProxy(redis_server.port)
    try:
        config = EngineConfig.from_mapping({"cache_dir": str(tmp_path / "node")})
        async with open_redis_stores(proxy.url, config=config, deadline_s=0.2) as shared:
            store = shared.learning
            for tool_id in ("alpha", "beta"):
                await trio.to_thread.run_sync(store.save, "m", tool_id, [example(tool_id)])
            await trio.to_thread.run_sync(store.save, "other", "alpha", [example("x")])
            proxy.drop()  # every connection closed, new ones refused
            with trio.fail_after(30):
                while shared.statistics().up:
                    await trio.to_thread.run_sync(store.load, "m")
            await trio.to_thread.run_sync(store.forget, "m", None)
            await trio.to_thread.run_sync(store.save, "m", "gamma", [example("gamma")])
            await trio.to_thread.run_sync(store.forget, "other", ["alpha"])
            assert set(await trio.to_thread.run_sync(store.load, "m")) == {"gamma"}
            assert store.pending() == 3  # forget all of "m", gamma, and other's alpha
            proxy.heal()
            with trio.fail_after(30):
                while store.pending() or not shared.statistics().up:  # noqa: ASYNC110
                    await trio.sleep(0.05)
        client: coredis.Redis[bytes] = coredis.Redis.from_url(redis_server.url)
        async with client:
            keys = [k async for k in client.scan_iter(match=b"toolroute:learn:*")]
            fields = {key: set(await client.hkeys(key)) for key in keys}
        assert list(fields.values()) == [{b"gamma"}]  # "other" has no tool left: no key
    finally:
        proxy.close()


async def test_two_nodes_learning_one_tool_at_once_keep_both_nodes_evidence(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    config = [EngineConfig.from_mapping({"cache_dir": str(tmp_path / name)}) for name in ("a", "b")]
    async with (
        open_redis_stores(redis_server.url, config=config[0], node="a") as first,
        open_redis_stores(redis_server.url, config=config[1], node="b") as second,
    ):
        await trio.to_thread.run_sync(first.learning.save, "m", "alpha", [example("base")])
        for shared in (first, second):
            await trio.to_thread.run_sync(shared.learning.load, "m")

        async def learn(shared: RedisStores, name: str) -> None:
            # As an engine does: its own book (what it loaded, and what it learned since),
            # the whole of it saved after each learn.
            book = [example("base")]
            for i in range(10):
                book.append(example(f"{name}{i}"))
                await trio.to_thread.run_sync(shared.learning.save, "m", "alpha", list(book))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(learn, first, "a")
            nursery.start_soon(learn, second, "b")
        loaded = await trio.to_thread.run_sync(first.learning.load, "m")
    wanted = {example(n).digest for n in ("base", *(f"{x}{i}" for x in "ab" for i in range(10)))}
    assert {e.digest for e in loaded["alpha"]} == wanted
    [value] = await stored_values(redis_server.url)
    with np.load(io.BytesIO(value), allow_pickle=False) as data:
        assert set(data["digests"].tolist()) == wanted


async def test_what_a_node_learned_while_cut_off_merges_with_what_another_learned_meanwhile(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    proxy = FaultProxy(redis_server.port)
    try:
        config = [EngineConfig.from_mapping({"cache_dir": str(tmp_path / n)}) for n in "ab"]
        async with (
            open_redis_stores(proxy.url, config=config[0], node="a", deadline_s=0.2) as cut,
            open_redis_stores(redis_server.url, config=config[1], node="b") as other,
        ):
            base = [example("base"), example("old")]
            await trio.to_thread.run_sync(cut.learning.save, "m", "alpha", base)
            await trio.to_thread.run_sync(other.learning.load, "m")
            proxy.drop()
            with trio.fail_after(30):
                while cut.statistics().up:
                    await trio.to_thread.run_sync(cut.learning.load, "m")
            # Cut off, "a" forgets "old" and learns "a1"; "b" learns "b1" meanwhile.
            mine = [example("base"), example("a1")]
            await trio.to_thread.run_sync(cut.learning.save, "m", "alpha", mine)
            theirs = [*base, example("b1")]
            await trio.to_thread.run_sync(other.learning.save, "m", "alpha", theirs)
            proxy.heal()
            with trio.fail_after(30):
                while cut.learning.pending() or not cut.statistics().up:  # noqa: ASYNC110
                    await trio.sleep(0.05)
        [value] = await stored_values(redis_server.url)
        with np.load(io.BytesIO(value), allow_pickle=False) as data:
            digests = set(data["digests"].tolist())
        assert digests == {example(n).digest for n in ("base", "a1", "b1")}
    finally:
        proxy.close()

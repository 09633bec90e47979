"""An asyncio host (no trio of its own) sharing its stores through a real ``redis-server``:
``toolroute.asyncio.open_redis_stores`` runs them on the loop's guest run, beside the engine."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import trio

pytest.importorskip("coredis", reason="the Redis stores need the redis extra (coredis)")

from redisbox.nodes import CATALOG, open_nodes
from redisbox.server import REDIS_SERVER, RedisServer

import toolroute.asyncio as tr
from toolroute import ConfigError, EngineConfig, Tool
from toolroute.events import StepFinished
from toolroute.providers import HashingEmbedder
from toolroute.redis import open_event_consumer

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")

NEW_TOOL = Tool(id="track_parcel", name="track_parcel", description="Track a parcel delivery")


def test_an_asyncio_node_shares_vectors_sessions_events_and_changes(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    config = EngineConfig(cache_dir=str(tmp_path / "asyncio-node"))

    async def asyncio_node() -> tuple[int, bool]:
        async with (
            tr.open_redis_stores(redis_server.url, config=config, deadline_s=2.0) as shared,
            tr.open_engine(
                CATALOG,
                config=config,
                embedder=HashingEmbedder(),
                decider=None,
                stores=shared.stores,
            ) as engine,
            shared.attach(engine),
        ):
            await engine.ready()
            await engine.prepare_step("book a flight to rome", session="trip")
            found = await engine.search_tools(
                {"query": "refund a card payment"}, session="trip", k=1
            )
            await shared.update(engine, add=[NEW_TOOL])
            tracked = await engine.select("track my parcel delivery", max_tools=3)
            assert "track_parcel" in tracked.tool_ids
            return len(found["tools"]), shared.statistics().up

    found, up = asyncio.run(asyncio_node())
    assert (found, up) == (1, True)

    async def trio_node() -> None:
        async with open_nodes(redis_server.url, tmp_path / "trio", 1) as [node]:
            # The asyncio node's vectors are in Redis: none embedded again here.
            assert node.shared.embeddings.from_redis == len(CATALOG)
            # Its session too: the tool it found is shown on this node's next step.
            step = await node.engine.prepare_step("book a flight to rome", session="trip")
            assert step.tool_ids is not None
            assert "refund_payment" in step.tool_ids
        async with open_event_consumer(
            redis_server.url, group="g", consumer="c", start="0"
        ) as consumer:
            with trio.fail_after(60):
                events = [e.event for e in await consumer.read(count=1000)]
        assert any(isinstance(e, StepFinished) and e.session == "trip" for e in events)

    trio.run(trio_node)


def test_a_bad_url_is_the_asyncio_callers_clear_error() -> None:
    async def main() -> None:
        async with tr.open_redis_stores("http://not-redis"):
            pass

    with pytest.raises(ConfigError, match="redis"):
        asyncio.run(main())

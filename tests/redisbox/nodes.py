"""Engines that share one Redis, for the tests: each node has its own cache directory (its
near tier) and its own ``open_redis_stores``, as separate replicas would."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs

from toolroute import Catalog, Engine, EngineConfig, ToolSet, open_engine
from toolroute.providers import HashingEmbedder
from toolroute.redis import RedisStores, open_redis_stores

CATALOG = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city", "server": "weather"},
        {"name": "get_alerts", "description": "Severe weather alerts", "server": "weather"},
        {"name": "send_email", "description": "Send an email message", "server": "mail"},
        {"name": "read_inbox", "description": "Read the email inbox", "server": "mail"},
        {"name": "create_invoice", "description": "Create a customer invoice", "server": "billing"},
        {"name": "refund_payment", "description": "Refund a card payment", "server": "billing"},
        {"name": "book_flight", "description": "Book a plane ticket", "server": "travel"},
        {"name": "cancel_flight", "description": "Cancel a flight booking", "server": "travel"},
    ]
)
SETS = (ToolSet(name="mail", members=("send_email", "read_inbox"), anchors=("send_email",)),)


def node_config(directory: Path, **sections: Any) -> EngineConfig:
    return EngineConfig.from_mapping(
        {
            "cache_dir": str(directory),
            "warmup": {"wait": True},
            "selection": {"max_tools": 3},
            **sections,
        }
    )


@attrs.frozen
class Node:
    name: str
    shared: RedisStores
    engine: Engine


@asynccontextmanager
async def open_nodes(
    url: str,
    root: Path,
    count: int,
    *,
    catalog: Catalog = CATALOG,
    sets: Sequence[ToolSet] = SETS,
    attach: bool = True,
    deciders: Sequence[Any] = (),
    sections: Mapping[str, Any] | None = None,
    **options: Any,
) -> AsyncIterator[list[Node]]:
    """``count`` nodes over the Redis at ``url``, each attached (events out, catalogue in).

    The link's deadline is 1 s unless given: a test that is not about a slow Redis must not
    see an outage because the shared machine paused a process."""
    options.setdefault("deadline_s", 1.0)
    async with AsyncExitStack() as stack:
        nodes = []
        for i in range(count):
            name = f"node{i}"
            config = node_config(root / name, **(sections or {}))
            shared = await stack.enter_async_context(
                open_redis_stores(url, config=config, node=name, **options)
            )
            engine = await stack.enter_async_context(
                open_engine(
                    catalog,
                    config=config,
                    embedder=HashingEmbedder(),
                    decider=deciders[i] if deciders else None,
                    tool_sets=sets,
                    stores=shared.stores,
                )
            )
            if attach:
                await stack.enter_async_context(shared.attach(engine))
            nodes.append(Node(name, shared, engine))
        yield nodes

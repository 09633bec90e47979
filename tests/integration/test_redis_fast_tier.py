"""The fast tier's cache folder shared through a real ``redis-server``: a new node fetches
the folder another node shared instead of fitting its own, a torn or stale copy is never
written into a folder, a node whose folder knows as much does not fetch, and a share Redis
could not take is made when it returns. One test builds the real MiniLM tier (slow).

Time bounds are loose (the machine is shared).
"""

from __future__ import annotations

import gc
import hashlib
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import trio

pytest.importorskip("coredis", reason="the Redis stores need the redis extra (coredis)")

import coredis
from redisbox.nodes import CATALOG
from redisbox.server import REDIS_SERVER, RedisServer

from toolroute import Engine, EngineConfig, open_engine
from toolroute.providers import HashingEmbedder
from toolroute.redis import RedisStores, open_redis_stores

pytestmark = [
    pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed"),
    # coredis 6.9 leaves the anyio memory streams of a connection that failed to open for
    # the garbage collector (a warning per refused connect); nothing of ours is unclosed.
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <function MemoryObject:pytest.PytestUnraisableExceptionWarning"
    ),
]

MODEL = "ab" * 32  # a model's sha256


@pytest.fixture(autouse=True)
def _collect_failed_connections() -> Iterator[None]:
    yield
    gc.collect()  # their warnings come now, under this module's filter, not at exit


def write_tier_folder(folder: Path, texts: int, *, size: int = 1_300_000) -> dict[str, bytes]:
    """A folder as the fast tier saves it: files, then the manifest vouching for them (the
    larger file spans several of the store's chunks)."""
    rng = np.random.default_rng(texts)
    files = {"rows.npy": rng.bytes(size), "tokens.npy": rng.bytes(1000)}
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_bytes(content)
    manifest = {
        "format": 3,
        "model_sha256": MODEL,
        "texts": texts,
        "distilled": "shipped",
        "sha256": {n: hashlib.sha256(c).hexdigest() for n, c in files.items()},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return {**files, "manifest.json": (folder / "manifest.json").read_bytes()}


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if not p.name.startswith(".")}


@asynccontextmanager
async def open_shared(url: str, directory: Path, **options: Any) -> AsyncIterator[RedisStores]:
    config = EngineConfig.from_mapping({"cache_dir": str(directory)})
    options.setdefault("deadline_s", 1.0)  # not about a slow Redis: no outage from a pause
    async with open_redis_stores(url, config=config, **options) as shared:
        yield shared


async def in_thread(fn: Any, *args: Any) -> Any:
    return await trio.to_thread.run_sync(fn, *args)  # the store is called from threads


async def test_a_new_node_fetches_the_folder_another_node_shared(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    first_folder, new_folder = tmp_path / "a" / MODEL, tmp_path / "b" / MODEL
    saved = write_tier_folder(first_folder, texts=40)
    async with open_shared(redis_server.url, tmp_path / "a") as first:
        await in_thread(first.fast_tier.share, MODEL, str(first_folder))
        assert first.fast_tier.shared == 1
        await in_thread(first.fast_tier.share, MODEL, str(first_folder))
        assert first.fast_tier.shared == 1  # Redis has this version already: nothing sent
    async with open_shared(redis_server.url, tmp_path / "b") as second:
        assert await in_thread(second.fast_tier.fetch, MODEL, str(new_folder)) is True
        assert folder_bytes(new_folder) == saved
        # The near tier now knows as much: no second transfer.
        assert await in_thread(second.fast_tier.fetch, MODEL, str(new_folder)) is False
        # Another model's tier is not this one.
        assert await in_thread(second.fast_tier.fetch, "cd" * 32, str(tmp_path / "x")) is False
        assert second.statistics().failures == 0


async def test_a_folder_that_learned_more_is_kept_and_a_newer_share_replaces_the_old(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    mine = tmp_path / "mine" / MODEL
    kept = write_tier_folder(mine, texts=90)
    async with open_shared(redis_server.url, tmp_path / "shared") as shared:
        write_tier_folder(tmp_path / "old" / MODEL, texts=40)
        await in_thread(shared.fast_tier.share, MODEL, str(tmp_path / "old" / MODEL))
        assert await in_thread(shared.fast_tier.fetch, MODEL, str(mine)) is False
        assert folder_bytes(mine) == kept
        newer = write_tier_folder(tmp_path / "new" / MODEL, texts=120)
        await in_thread(shared.fast_tier.share, MODEL, str(tmp_path / "new" / MODEL))
        assert await in_thread(shared.fast_tier.fetch, MODEL, str(mine)) is True
        assert folder_bytes(mine) == newer
    client: coredis.Redis[bytes] = coredis.Redis.from_url(redis_server.url)
    async with client:
        versions = [k async for k in client.scan_iter(match=b"toolroute:fast-tier:*:*")]
        ttls = sorted([await client.ttl(k) for k in versions])
    assert len(versions) == 2
    assert ttls[0] == -1  # the version in use does not expire
    assert 0 < ttls[1] <= 600  # the older one is left to expire, not deleted under a reader


async def test_a_torn_copy_in_redis_never_reaches_the_folder(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    write_tier_folder(tmp_path / "a" / MODEL, texts=40)
    target = tmp_path / "b" / MODEL
    before = write_tier_folder(target, texts=10)
    async with open_shared(redis_server.url, tmp_path / "a") as shared:
        await in_thread(shared.fast_tier.share, MODEL, str(tmp_path / "a" / MODEL))
        client: coredis.Redis[bytes] = coredis.Redis.from_url(redis_server.url)
        async with client:
            (version,) = [k async for k in client.scan_iter(match=b"toolroute:fast-tier:*:*")]
            await client.hset(version, {"rows.npy:1": b"torn"})
        assert await in_thread(shared.fast_tier.fetch, MODEL, str(target)) is False
        assert folder_bytes(target) == before


async def test_a_share_while_redis_is_down_is_made_when_it_returns(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)  # not started yet
    folder = tmp_path / "a" / MODEL
    saved = write_tier_folder(folder, texts=40)
    try:
        async with open_shared(server.url, tmp_path / "a", deadline_s=0.1) as shared:
            assert not shared.statistics().up
            # A fetch while Redis is down answers at once: the tier is fitted locally.
            assert await in_thread(shared.fast_tier.fetch, MODEL, str(tmp_path / "c")) is False
            await in_thread(shared.fast_tier.share, MODEL, str(folder))
            assert shared.statistics().writes_pending == 1
            server.start()
            with trio.fail_after(30):
                while shared.statistics().writes_pending or not shared.statistics().up:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            assert shared.fast_tier.shared == 1
        async with open_shared(server.url, tmp_path / "b") as later:
            target = tmp_path / "b" / MODEL
            assert await in_thread(later.fast_tier.fetch, MODEL, str(target)) is True
            assert folder_bytes(target) == saved
    finally:
        server.stop()


class TierBuildingEmbedder(HashingEmbedder):
    """A model with a fast tier of its own (``BuildsFastTier``): it loads the tier from the
    cache folder when the folder holds one, and otherwise fits one (counted) and saves it."""

    model_sha256 = MODEL

    def __init__(self) -> None:
        super().__init__()
        self.fits = 0
        self.loads = 0

    def open_fast_tier(
        self,
        *,
        cache_dir: str | None,
        tool_texts: Sequence[str],
        tool_vectors: npt.NDArray[np.float32],
        should_stop: Any,
        fit_from: int = 0,
    ) -> TierFromHashes:
        assert cache_dir is not None
        folder = Path(cache_dir) / "fast-tier" / MODEL
        if (folder / "manifest.json").exists():
            self.loads += 1
        else:
            self.fits += 1
            write_tier_folder(folder, texts=len(tool_texts))
        return TierFromHashes(self)


class TierFromHashes:
    served_texts = 0

    def __init__(self, model: HashingEmbedder) -> None:
        self.embed = model.embed

    def learn(self, texts: Sequence[str], vectors: npt.NDArray[np.float32]) -> None:
        pass

    def learn_tools(self, texts: Sequence[str], vectors: npt.NDArray[np.float32]) -> None:
        pass

    def refit(self, *, should_stop: Any = None) -> None:
        pass

    def save(self) -> None:
        pass


@asynccontextmanager
async def open_node(
    url: str, directory: Path, model: TierBuildingEmbedder
) -> AsyncIterator[tuple[RedisStores, Engine]]:
    config = EngineConfig.from_mapping({"cache_dir": str(directory), "warmup": {"wait": True}})
    async with (
        open_redis_stores(url, config=config, deadline_s=1.0) as shared,
        open_engine(CATALOG, config=config, embedder=model, stores=shared.stores) as engine,
    ):
        yield shared, engine


async def tier_opened(model: TierBuildingEmbedder) -> None:
    with trio.fail_after(30):  # the tier opens in the background after warm-up
        while model.fits + model.loads == 0:  # noqa: ASYNC110
            await trio.sleep(0.02)


async def test_an_engine_on_a_new_node_opens_the_tier_another_node_fitted(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    first_model, new_model = TierBuildingEmbedder(), TierBuildingEmbedder()
    async with open_node(redis_server.url, tmp_path / "a", first_model) as (shared, _):
        await tier_opened(first_model)
        with trio.fail_after(30):
            while shared.fast_tier.shared == 0:  # noqa: ASYNC110 (shared after the open)
                await trio.sleep(0.02)
    assert (first_model.fits, first_model.loads) == (1, 0)
    async with open_node(redis_server.url, tmp_path / "b", new_model) as (shared, _):
        await tier_opened(new_model)
        assert shared.fast_tier.fetched == 1
    assert (new_model.fits, new_model.loads) == (0, 1)  # loaded what the first node fitted
    assert folder_bytes(tmp_path / "b" / "fast-tier" / MODEL) == folder_bytes(
        tmp_path / "a" / "fast-tier" / MODEL
    )

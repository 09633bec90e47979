"""Fail-open invariants of the engine under generated catalogues, requests and faults.

Each example runs its own ``trio.run`` under a ``MockClock`` (virtual time), with CPU work
inline: a "hang" is a long virtual sleep, so deadlines are exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute import Catalog, EngineConfig, Outcome, ToolIndex
from toolroute._core.config import Deadlines, WarmupConfig
from toolroute._runtime.engine import open_engine
from toolroute.providers import HashingEmbedder

EMBED_S = 0.05
WORDS = [
    "weather",
    "email",
    "issue",
    "calendar",
    "file",
    "song",
    "flight",
    "invoice",
    "map",
    "news",
]

FAULTS = ("ok", "raise", "hang", "wrong_count", "wrong_width", "nan", "zero")


class FaultyEmbedder:
    """A working embedder that misbehaves according to a schedule, one fault per call."""

    def __init__(self, schedule: Sequence[str]) -> None:
        self.inner = HashingEmbedder(dim=64)
        self.identity, self.dim, self.max_batch = "faulty", 64, 8
        self.schedule = list(schedule)
        self.calls = 0
        self.hang = False

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        fault = self.schedule[self.calls % len(self.schedule)] if self.schedule else "ok"
        self.calls += 1
        self.hang = fault == "hang"
        vectors = self.inner.embed(texts)
        if fault == "raise":
            raise RuntimeError("injected")
        if fault == "wrong_count":
            return vectors[:-1] if len(vectors) else np.zeros((1, 64), np.float32)
        if fault == "wrong_width":
            return np.ones((len(texts), 3), np.float32)
        if fault == "nan":
            return np.full_like(vectors, np.nan)
        if fault == "zero":
            return np.zeros_like(vectors)
        return vectors


def virtual_cpu(embedder: FaultyEmbedder) -> Callable[..., Any]:
    async def run_cpu(fn: Callable[..., Any], *args: Any, limiter: trio.CapacityLimiter) -> Any:
        async with limiter:
            result = fn(*args)  # may raise: the embedder runs inline
            if embedder.hang:
                await trio.sleep(3600)  # a hung model, in virtual time
            return result

    return run_cpu


catalogs = st.lists(
    st.tuples(st.sampled_from(WORDS), st.lists(st.sampled_from(WORDS), min_size=0, max_size=4)),
    min_size=1,
    max_size=12,
)
requests = st.lists(
    st.lists(st.sampled_from([*WORDS, "please", "🙂", ""]), max_size=5).map(" ".join),
    min_size=1,
    max_size=5,
)


@given(
    catalogs,
    requests,
    st.lists(st.sampled_from(FAULTS), max_size=6),
    st.integers(0, 2),
    st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_faults_never_cost_tools_or_time(
    raw_tools: list[tuple[str, list[str]]],
    queries: list[str],
    schedule: list[str],
    n_always: int,
    wait: bool,
) -> None:
    catalog = Catalog.from_plain(
        [
            {"name": f"{name}_{i}", "description": " ".join(words)}
            for i, (name, words) in enumerate(raw_tools)
        ]
    )
    always = list(catalog.ids[:n_always])
    keyword = ToolIndex(catalog, embedder=None, cache=None)
    embedder = FaultyEmbedder(schedule)
    config = EngineConfig(
        cache=False, deadlines=Deadlines(embed_s=EMBED_S), warmup=WarmupConfig(wait=wait)
    )

    async def main() -> None:
        tasks = trio.lowlevel.current_root_task().child_nurseries[0].child_tasks
        before = len(tasks)
        async with open_engine(
            catalog, config=config, embedder=embedder, run_cpu=virtual_cpu(embedder)
        ) as engine:
            for query in queries:
                started = trio.current_time()
                selection = await engine.select(query, always_active=always)
                elapsed = trio.current_time() - started
                # Every operation returns by its deadline (+5 ms of virtual time).
                assert elapsed <= EMBED_S + 0.005
                # Results come from the catalogue; always-active tools are always there.
                assert set(selection.tool_ids) <= set(catalog.ids)
                assert selection.tool_ids[: len(always)] == tuple(always)
                # A failure never shows fewer tools than keyword-only recall would.
                if selection.outcome is Outcome.DEGRADED:
                    baseline = keyword.select(query, always_active=always)
                    assert len(selection.tool_ids) >= len(baseline.tool_ids)
                    assert selection.reason
        # No task outlives the engine.
        assert len(tasks) == before
        assert not trio.lowlevel.current_task().child_nurseries

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

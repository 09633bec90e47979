"""Every long-running task ``open_engine`` starts runs under the supervisor.

The test reads the running engine's task tree: each child of the engine's nursery must be a
``run_supervised`` task, with the service it supervises as its one child. The list of
services is written out, so a new background task (or a service started around the
supervisor) fails here until it is listed and supervised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
import pytest
import trio
import trio.testing

from toolroute import Catalog
from toolroute._core.config import EngineConfig, LoadConfig
from toolroute._runtime import engine as engine_module
from toolroute._runtime.fast_tier_service import FastTierService
from toolroute._runtime.supervisor import run_supervised
from toolroute._runtime.tool_index import ToolIndex
from toolroute._runtime.workers import WorkerCalls
from toolroute.providers import HashingEmbedder

TOOLS = Catalog.from_plain(
    [
        {"name": "send_email", "description": "Send an email message to a person"},
        {"name": "read_file", "description": "Read a file from disk"},
    ]
)

#: The engine's long-running services: name given to the supervisor → the task it runs.
SERVICES = {
    "catalogue keeper": "toolroute._runtime.catalog_keeper.CatalogKeeper.run",
    "query batcher": "toolroute._runtime.batcher.QueryBatcher.run",
    "steps": "toolroute._runtime.steps.Steps.run",
    "fast tier": "toolroute._runtime.fast_tier_service.FastTierService.run",
    "decision actor": "toolroute._decisions.actor.DecisionActor.run",
    "event hub": "toolroute._runtime.hub.EventHub.run",
    "learning": "toolroute._runtime.learning.Learning.run",
}


class StubTier:
    """A fast tier that opens at once (the real one distils the model first)."""

    served_texts = 0

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return HashingEmbedder(dim=64).embed(texts)

    def learn(self, texts: Sequence[str], vectors: npt.NDArray[np.float32]) -> None: ...

    def learn_tools(self, texts: Sequence[str], vectors: npt.NDArray[np.float32]) -> None: ...

    def refit(self) -> None: ...

    def save(self) -> None: ...


def stub_fast_tier(
    embedder: object,
    config: EngineConfig,
    workers: WorkerCalls,
    hub: object,
    shared: object = None,
) -> FastTierService:
    def opener(index: ToolIndex, should_stop: Callable[[], bool]) -> StubTier:
        return StubTier()

    return FastTierService(opener, config=config.load, workers=workers, publish=hub.publish)  # type: ignore[attr-defined]


async def inline(fn: Callable[..., object], *args: object, limiter: trio.CapacityLimiter) -> object:
    return fn(*args)


async def engine_tasks(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """The services the engine's nursery runs: task name → whether it runs under
    ``run_supervised``."""
    monkeypatch.setattr(engine_module, "_fast_tier_service", stub_fast_tier)
    config = EngineConfig(cache=False, load=LoadConfig(fast_tier=True))
    found: dict[str, bool] = {}
    async with engine_module.open_engine(
        TOOLS, config=config, embedder=HashingEmbedder(dim=64), run_cpu=inline
    ) as engine:
        await engine.ready()
        await trio.testing.wait_all_tasks_blocked()
        nursery = trio.lowlevel.current_task().child_nurseries[-1]  # the engine's own
        for task in nursery.child_tasks:
            if task.coro.cr_code is run_supervised.__code__:
                (inner,) = [t for n in task.child_nurseries for t in n.child_tasks]
                found[inner.name] = True
            else:
                found[task.name] = False
    return found


async def test_the_engine_runs_no_long_running_task_beyond_its_listed_services(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    assert set(await engine_tasks(monkeypatch)) == set(SERVICES.values())


@pytest.mark.parametrize(
    "service",
    [
        "catalogue keeper",
        "query batcher",
        "steps",
        "fast tier",
        "decision actor",
        "learning",
    ],
)
async def test_each_long_running_service_is_started_by_the_supervisor(
    service: str, monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    tasks = await engine_tasks(monkeypatch)
    assert tasks[SERVICES[service]], f"{service} runs outside the supervisor"

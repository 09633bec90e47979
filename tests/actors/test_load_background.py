"""The fast tier's background work: started by the supervisor, found through a capability,
never holding the engine's exit."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import trio
import trio.testing

from toolroute import Catalog, EngineConfig
from toolroute._core.config import Deadlines, WarmupConfig
from toolroute._core.events import Event, ServiceRestarted
from toolroute._core.protocols import BuildsFastTier, FastTierModel
from toolroute._runtime.engine import open_engine
from toolroute._runtime.fast_tier_service import at_low_priority
from toolroute._runtime.foreground import FOREGROUND, Foreground
from toolroute._runtime.hub import EventHub
from toolroute._runtime.workers import SHUTDOWN_GRACE_S
from toolroute.providers import HashingEmbedder
from toolroute.providers._embedders.minilm import MiniLMEmbedder
from toolroute.testing import ScriptedEmbedder, inline_cpu

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message"},
        {"name": "play_song", "description": "Play a song from the library"},
    ]
)
Vectors = npt.NDArray[np.float32]


class Tier:
    """A fast tier whose first ``served_texts`` read crashes (``crash``), or whose build
    spins until it is told to stop (``spin``)."""

    def __init__(self, model: ScriptedEmbedder, *, crash: bool = False) -> None:
        self._model = model
        self.crash = crash

    @property
    def served_texts(self) -> int:
        if self.crash:
            self.crash = False
            raise RuntimeError("a bug in the fast tier service")
        return 0

    def embed(self, texts: Sequence[str]) -> Vectors:
        return self._model.embed(texts)

    def learn(self, texts: Sequence[str], vectors: Vectors) -> None: ...

    def learn_tools(self, texts: Sequence[str], vectors: Vectors) -> None: ...

    def refit(self, *, should_stop: Callable[[], bool] | None = None) -> None: ...

    def save(self) -> None: ...


class Builder(ScriptedEmbedder):
    """A scripted embedder with the ``BuildsFastTier`` capability."""

    def __init__(self, *, crash: bool = False, spin: bool = False) -> None:
        super().__init__(dim=32)
        self.builds = 0
        self.crash, self.spin = crash, spin
        self.stopped = threading.Event()
        self.spinning = threading.Event()
        self.steps = 0  # steps of the spinning build that went on

    def open_fast_tier(
        self,
        *,
        cache_dir: str | None,
        tool_texts: Sequence[str],
        tool_vectors: Vectors,
        should_stop: Callable[[], bool],
        fit_from: int = 0,
    ) -> FastTierModel:
        self.builds += 1
        self.fit_from, self.cache_dir = fit_from, cache_dir
        assert len(tool_texts) == len(tool_vectors) == len(TOOLS)
        while self.spin:  # a long fit, asked between its steps whether to go on
            self.spinning.set()
            if should_stop():
                self.stopped.set()
                raise RuntimeError("stopped: the engine is leaving")
            self.steps += 1
            time.sleep(0.005)
        crash, self.crash = self.crash, False  # the restarted service builds a sound one
        return Tier(ScriptedEmbedder(dim=32), crash=crash)


def test_the_fast_tier_is_found_by_its_capability_not_by_class() -> None:
    assert isinstance(Builder(), BuildsFastTier)
    assert issubclass(MiniLMEmbedder, BuildsFastTier)
    assert not isinstance(HashingEmbedder(), BuildsFastTier)
    assert not isinstance(ScriptedEmbedder(), BuildsFastTier)


async def test_the_fast_tier_runs_under_the_supervisor_and_restarts_after_a_crash(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every event the engine publishes, from its first: the crash can come before any
    # subscription could open.
    published: list[object] = []
    real_publish = EventHub.publish

    def recording(self: EventHub, event: Event) -> None:
        published.append(event)
        real_publish(self, event)

    monkeypatch.setattr(EventHub, "publish", recording)
    builder = Builder(crash=True)
    config = EngineConfig(cache_dir=str(tmp_path), warmup=WarmupConfig(wait=True))
    async with open_engine(TOOLS, config=config, embedder=builder, run_cpu=inline_cpu()) as engine:
        await trio.sleep(5)  # the crash, the backoff, the second build
        assert engine.statistics().recall.fast_tier_open
    restarts = [e for e in published if isinstance(e, ServiceRestarted)]
    assert [e.service for e in restarts] == ["fast tier"]
    assert "a bug in the fast tier service" in restarts[0].error
    assert builder.builds == 2
    assert builder.fit_from == config.load.min_served  # no fit that could not answer yet


async def test_with_caching_off_the_fast_tier_is_fitted_in_memory(
    autojump_clock: trio.testing.MockClock,
) -> None:
    builder = Builder()
    config = EngineConfig(cache=False, warmup=WarmupConfig(wait=True))
    async with open_engine(TOOLS, config=config, embedder=builder, run_cpu=inline_cpu()) as engine:
        await trio.sleep(5)
        assert engine.statistics().recall.fast_tier_open
    assert builder.builds == 1
    assert builder.cache_dir is None


async def test_an_embedder_without_the_capability_gets_no_fast_tier(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    config = EngineConfig(cache_dir=str(tmp_path), warmup=WarmupConfig(wait=True))
    model = ScriptedEmbedder()
    async with open_engine(TOOLS, config=config, embedder=model, run_cpu=inline_cpu()) as engine:
        assert engine._selector._recall.fast_tier is None


async def test_leaving_an_engine_stops_a_build_between_its_steps(tmp_path: Path) -> None:
    """Real threads: the build spins in the background until it is asked to stop. Without
    the stop, leaving would wait the whole grace (``SHUTDOWN_GRACE_S``); the bound below is
    half of it, loose enough for a loaded machine."""
    builder = Builder(spin=True)
    config = EngineConfig(cache_dir=str(tmp_path), warmup=WarmupConfig(wait=True))
    async with open_engine(TOOLS, config=config, embedder=builder) as engine:
        await trio.to_thread.run_sync(builder.spinning.wait, 30)
        assert builder.spinning.is_set()
        assert not engine.statistics().recall.fast_tier_open
        leaving = time.monotonic()
    left_after = time.monotonic() - leaving
    assert builder.stopped.is_set()
    assert left_after < SHUTDOWN_GRACE_S / 2


class SlowRequests(Builder):
    """A ``Builder`` whose request embeddings wait (in their worker thread) for ``release``."""

    def __init__(self) -> None:
        super().__init__(spin=True)
        self.release = threading.Event()
        self.waiting = threading.Event()

    def embed(self, texts: Sequence[str]) -> Vectors:
        if any(text.startswith("a slow request") for text in texts):
            self.waiting.set()
            self.release.wait(60)
        return super().embed(texts)


async def test_background_work_stands_aside_while_requests_crowd_and_not_for_a_lone_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real threads. The build takes a step every ~5 ms when nothing holds it. With one
    select in flight it goes on; with two it stands aside (here without the ``MAX_ASIDE_S``
    bound, which its own test covers). No bound on real time but generous timeouts: a
    loaded machine only makes the build slower, which the assertions allow."""
    monkeypatch.setattr(FOREGROUND, "_max_aside_s", 3600.0)
    builder = SlowRequests()
    config = EngineConfig(
        cache_dir=str(tmp_path), warmup=WarmupConfig(wait=True), deadlines=Deadlines(embed_s=60)
    )
    async with open_engine(TOOLS, config=config, embedder=builder) as engine:
        await trio.to_thread.run_sync(builder.spinning.wait, 30)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(engine.select, "a slow request")
            await trio.to_thread.run_sync(builder.waiting.wait, 30)
            lone = builder.steps
            with trio.fail_after(30):  # a lone call does not stop it
                while builder.steps < lone + 3:  # noqa: ASYNC110 (a thread's counter)
                    await trio.sleep(0.01)
            nursery.start_soon(engine.select, "a slow request too")
            await trio.sleep(0.1)  # a step already past its check may finish
            before = builder.steps
            await trio.sleep(0.3)
            assert builder.steps == before  # stood aside while two calls are in flight
            builder.release.set()
        resumed = builder.steps
        with trio.fail_after(30):
            while builder.steps <= resumed + 3:  # noqa: ASYNC110 (a thread's counter)
                await trio.sleep(0.01)
    assert builder.stopped.is_set()  # and it still stopped when the engine left


async def test_background_work_run_inline_never_waits_for_the_loop_it_runs_on() -> None:
    foreground = Foreground(max_aside_s=60)
    with foreground.serving(), foreground.serving():
        assert foreground.busy()
        assert foreground.stand_aside(lambda: False) is False  # returns at once, inline
        assert foreground.stand_aside(lambda: True) is True


def test_a_background_thread_waits_while_calls_crowd_then_goes_on() -> None:
    foreground = Foreground(quiet_s=0.05, max_aside_s=60)
    went_on = threading.Event()
    with foreground.serving():
        assert not foreground.busy()  # a lone call
        with foreground.serving():
            thread = threading.Thread(
                target=lambda: foreground.stand_aside(lambda: False) or went_on.set()
            )
            thread.start()
            assert not went_on.wait(0.3)  # waits while they crowd
    assert went_on.wait(30)  # and goes on after the quiet time
    thread.join()
    assert not foreground.busy()


def test_a_process_that_is_always_busy_still_takes_a_background_step() -> None:
    foreground = Foreground(max_aside_s=0.05)
    took = threading.Event()
    with foreground.serving(), foreground.serving():
        thread = threading.Thread(
            target=lambda: foreground.stand_aside(lambda: False) or took.set()
        )
        thread.start()
        assert took.wait(30)  # after max_aside_s, though the crowd is still there
    thread.join()


def test_leaving_is_never_held_by_standing_aside() -> None:
    foreground = Foreground(max_aside_s=60)
    answers: list[bool] = []
    with foreground.serving(), foreground.serving():
        thread = threading.Thread(
            target=lambda: answers.append(foreground.stand_aside(lambda: True))
        )
        thread.start()
        thread.join(30)  # asked while it waits: at once
    assert answers == [True]


def test_background_work_runs_in_a_fresh_thread_and_hands_back_its_result() -> None:
    caller = threading.get_ident()
    assert at_low_priority(threading.get_ident) != caller
    assert at_low_priority(lambda a, b: a + b, 2, 3) == 5


def test_background_work_hands_back_its_exception() -> None:
    def fails() -> None:
        raise ValueError("a fit failed")

    with pytest.raises(ValueError, match="a fit failed"):
        at_low_priority(fails)


def test_background_work_does_not_lower_the_calling_thread() -> None:
    import os
    import sys

    if sys.platform != "linux":
        return
    me = threading.get_native_id()
    before = os.getpriority(os.PRIO_PROCESS, me)
    seen = at_low_priority(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
    assert os.getpriority(os.PRIO_PROCESS, me) == before
    assert seen == max(before, 19)

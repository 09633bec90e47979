"""What ``open_engine`` raises: the caller's own error as itself, engine failures as
``EngineCrashed`` from the whole group, and never an unwrapped group otherwise."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from toolroute import Catalog, EngineConfig
from toolroute._core.errors import EngineCrashed
from toolroute._runtime.engine import _from_group, open_engine

TOOLS = Catalog.from_plain([{"name": "get_weather", "description": "Weather for a city"}])


def test_the_callers_error_alone_comes_out_as_itself() -> None:
    mine = KeyError("boom")
    assert _from_group(BaseExceptionGroup("nursery", [mine]), mine) is mine


def test_an_engine_failure_is_engine_crashed_naming_it() -> None:
    error = _from_group(BaseExceptionGroup("nursery", [RuntimeError("bug in a service")]), None)
    assert isinstance(error, EngineCrashed)
    assert "RuntimeError: bug in a service" in str(error)


def test_the_callers_error_during_an_engine_failure_is_engine_crashed() -> None:
    mine = KeyError("boom")
    group = BaseExceptionGroup("nursery", [mine, RuntimeError("bug")])
    error = _from_group(group, mine)
    assert isinstance(error, EngineCrashed)
    assert "RuntimeError: bug" in str(error)  # the cause (the group) holds the caller's error


def test_a_supervisor_verdict_keeps_its_message() -> None:
    crashed = EngineCrashed("service 'query batcher' crashed 3 times within 60 s")
    error = _from_group(BaseExceptionGroup("nursery", [crashed]), None)
    assert isinstance(error, EngineCrashed)
    assert str(error) == str(crashed)


def test_a_keyboard_interrupt_is_never_unwrapped_nor_renamed() -> None:
    group = BaseExceptionGroup("nursery", [KeyboardInterrupt()])
    assert _from_group(group, None) is group


async def test_errors_from_the_body_keep_their_own_type(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with pytest.raises(ValueError, match="the caller's") as caught:
        async with open_engine(TOOLS, config=EngineConfig(cache=False), embedder=None):
            raise ValueError("the caller's own mistake")
    assert not isinstance(caught.value, BaseExceptionGroup)


async def test_a_group_from_the_callers_own_nursery_is_not_an_engine_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    mine = ValueError("the caller's own mistake")

    async def fail_in_a_nursery() -> None:
        async with (
            open_engine(TOOLS, config=EngineConfig(cache=False), embedder=None),
            trio.open_nursery(),
        ):
            raise mine

    with pytest.raises(BaseExceptionGroup) as caught:
        await fail_in_a_nursery()
    assert not isinstance(caught.value, EngineCrashed)
    assert caught.value.exceptions == (mine,)  # the caller's group, as its nursery raised it


async def test_engine_crashed_comes_from_the_group(autojump_clock: trio.testing.MockClock) -> None:
    from toolroute._runtime.supervisor import RestartPolicy
    from toolroute.providers import HashingEmbedder

    config = EngineConfig(cache=False, restarts=RestartPolicy(max_restarts=0, backoff_s=0.01))

    def broken() -> object:
        raise RuntimeError("bug")

    async def inline(fn: object, *args: object, limiter: trio.CapacityLimiter) -> object:
        return fn(*args)  # type: ignore[operator]

    async def crash_it() -> None:
        async with open_engine(
            TOOLS, config=config, embedder=HashingEmbedder(), run_cpu=inline
        ) as engine:
            assert engine._selector._recall.batcher is not None
            engine._selector._recall.batcher._embed_batch = broken  # type: ignore[assignment]
            await engine.ready()
            await engine.select("weather")
            await trio.sleep_forever()

    with pytest.raises(EngineCrashed, match="query batcher") as caught:
        await crash_it()
    assert isinstance(caught.value.__cause__, BaseExceptionGroup)

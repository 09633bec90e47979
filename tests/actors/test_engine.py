"""The engine: keyword-only at once, embeddings after warm-up, fail-open deadlines."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import trio
from event_snapshot import skip_snapshot

from toolroute import Catalog, ConfigError, Outcome
from toolroute._core.config import Deadlines, EngineConfig, SelectionDefaults, WarmupConfig
from toolroute._runtime.engine import open_engine
from toolroute.providers import HashingEmbedder

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message to a person"},
        {"name": "create_issue", "description": "Open an issue in a GitHub repository"},
        {"name": "search_web", "description": "Search the web for pages"},
        {"name": "read_file", "description": "Read a file from disk"},
        {"name": "list_events", "description": "List calendar events"},
        {"name": "book_flight", "description": "Book a flight ticket"},
    ]
)
CONFIG = EngineConfig(cache=False)


class SlowEmbedder:
    """A hashing embedder whose calls take ``delay`` seconds of trio time (see ``run_cpu``)."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.inner = HashingEmbedder(dim=256)
        self.identity, self.dim, self.max_batch = "slow", 256, 16
        self.delay = delay
        self.fail = fail
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(len(texts))
        if self.fail:
            raise RuntimeError("model crashed")
        return self.inner.embed(texts)


def virtual_cpu(embedder: SlowEmbedder) -> Callable[..., Any]:
    """CPU work inline, after the embedder's delay in trio time (no threads under MockClock)."""

    async def run_cpu(fn: Callable[..., Any], *args: Any, limiter: trio.CapacityLimiter) -> Any:
        async with limiter:
            await trio.sleep(embedder.delay)
            return fn(*args)

    return run_cpu


async def test_keyword_only_engine_selects(autojump_clock: trio.testing.MockClock) -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        await engine.ready()
        selection = await engine.select("send an email", max_tools=2)
        assert selection.tool_ids[0] == "send_email"
        assert selection.strategy == "keyword"
        assert selection.outcome is Outcome.APPLIED


async def test_serves_keyword_only_until_warm_up_then_combined(
    autojump_clock: trio.testing.MockClock,
) -> None:
    embedder = SlowEmbedder(delay=0.1)
    config = EngineConfig(cache=False, deadlines=Deadlines(embed_s=1.0))
    async with open_engine(
        TOOLS, config=config, embedder=embedder, run_cpu=virtual_cpu(embedder)
    ) as engine:
        early = await engine.select("weather in Paris")
        assert early.outcome is Outcome.DEGRADED
        assert early.reason == "warming up"
        await engine.ready()
        late = await engine.select("weather in Paris")
        assert late.outcome is Outcome.APPLIED
        assert late.strategy == "combined"
        assert late.tool_ids[0] == "get_weather"


async def test_wait_config_starts_ready(autojump_clock: trio.testing.MockClock) -> None:
    embedder = SlowEmbedder(delay=0.1)
    config = EngineConfig(cache=False, warmup=WarmupConfig(wait=True))
    async with open_engine(
        TOOLS, config=config, embedder=embedder, run_cpu=virtual_cpu(embedder)
    ) as engine:
        assert engine.index.vectors is not None


async def test_late_embedding_fails_open_by_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    embedder = SlowEmbedder(delay=0.0)
    config = EngineConfig(
        cache=False, deadlines=Deadlines(embed_s=0.05), warmup=WarmupConfig(wait=True)
    )
    async with open_engine(
        TOOLS, config=config, embedder=embedder, run_cpu=virtual_cpu(embedder)
    ) as engine:
        embedder.delay = 10.0  # the model hangs from now on
        started = trio.current_time()
        selection = await engine.select("email my boss")
        assert trio.current_time() - started <= 0.05 + 0.005
        assert selection.outcome is Outcome.DEGRADED
        assert "longer than 0.05" in selection.reason
        assert "send_email" in selection.tool_ids  # keyword recall still answers


async def test_failed_warm_up_stays_keyword_only(autojump_clock: trio.testing.MockClock) -> None:
    embedder = SlowEmbedder(fail=True)
    async with open_engine(
        TOOLS, config=CONFIG, embedder=embedder, run_cpu=virtual_cpu(embedder)
    ) as engine:
        await engine.ready()
        selection = await engine.select("read the file")
        assert selection.outcome is Outcome.DEGRADED
        assert "model crashed" in selection.reason
        assert selection.tool_ids[0] == "read_file"


async def test_caller_cancellation_cancels_and_engine_stays_usable(
    autojump_clock: trio.testing.MockClock,
) -> None:
    embedder = SlowEmbedder()
    config = EngineConfig(
        cache=False, deadlines=Deadlines(embed_s=100.0), warmup=WarmupConfig(wait=True)
    )
    async with open_engine(
        TOOLS, config=config, embedder=embedder, run_cpu=virtual_cpu(embedder)
    ) as engine:
        embedder.delay = 50.0
        with trio.move_on_after(1.0) as scope:
            await engine.select("flight to Rome")
        assert scope.cancelled_caught
        embedder.delay = 0.0
        again = await engine.select("flight to Rome")
        assert again.outcome is Outcome.APPLIED
        assert again.tool_ids[0] == "book_flight"


async def test_events_report_selections_without_the_query(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        async with engine.subscribe(buffer=8) as events:
            skip_snapshot(events)
            await engine.select("secret plans for the weather")
            delivery = await events.__anext__()
        event = getattr(delivery, "event", delivery)
        assert event.type == "selection.finished"
        assert event.query is None
        assert "secret" not in repr(event)


async def test_prepare_step_pages_then_shows_everything(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = EngineConfig(cache=False, selection=SelectionDefaults(max_tools=2))
    user = {"role": "user", "content": "search the web for pages about flights"}
    async with open_engine(TOOLS, config=config, embedder=None) as engine:
        first = await engine.prepare_step([user], session="s1")
        assert first.page == 0
        assert first.tool_ids is not None
        assert len(first.tool_ids) <= 2
        no_call = {"role": "assistant", "content": "Let me think."}
        second = await engine.prepare_step([user, no_call], session="s1")
        assert second.page == 1
        assert second.query == "Let me think."
        third = await engine.prepare_step([user, no_call, no_call], session="s1")
        assert third.page == 2
        assert third.tool_ids is None  # every tool
        called = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "1",
                    "type": "function",
                    "function": {"name": "search_web", "arguments": "{}"},
                }
            ],
        }
        reset = await engine.prepare_step(
            [user, no_call, called, {"role": "tool", "tool_call_id": "1", "content": "ok"}]
        )
        assert reset.page == 0


async def test_prepare_step_without_text_is_skipped(autojump_clock: trio.testing.MockClock) -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        step = await engine.prepare_step([{"role": "system", "content": ""}])
        assert step.outcome is Outcome.SKIPPED
        assert step.tool_ids is None


async def test_unknown_options_are_config_errors(autojump_clock: trio.testing.MockClock) -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        # Explicit keyword arguments since 0.2: Python names the unknown one.
        with pytest.raises(TypeError, match="max_toolz"):
            await engine.select("x", max_toolz=3)  # type: ignore[call-arg]
        with pytest.raises(ConfigError, match="nope"):
            await engine.select("x", always_active=["nope"])


async def test_no_task_outlives_the_engine(autojump_clock: trio.testing.MockClock) -> None:
    embedder = SlowEmbedder(delay=1000.0)  # warm-up still running at exit
    before = len(trio.lowlevel.current_root_task().child_nurseries[0].child_tasks)
    async with open_engine(TOOLS, config=CONFIG, embedder=embedder, run_cpu=virtual_cpu(embedder)):
        pass
    after = len(trio.lowlevel.current_root_task().child_nurseries[0].child_tasks)
    assert after == before


async def test_concurrent_requests_share_model_calls(
    autojump_clock: trio.testing.MockClock,
) -> None:
    embedder = SlowEmbedder(delay=0.0)
    config = EngineConfig(
        cache=False, deadlines=Deadlines(embed_s=5.0), warmup=WarmupConfig(wait=True)
    )
    async with open_engine(
        TOOLS, config=config, embedder=embedder, run_cpu=virtual_cpu(embedder)
    ) as engine:
        embedder.delay = 0.01
        embedder.calls.clear()
        results: list[str] = []

        async def one(query: str) -> None:
            results.append((await engine.select(query)).tool_ids[0])

        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(one, "weather forecast in Paris")
        assert results == ["get_weather"] * 10
        assert len(embedder.calls) < 10  # batched
        assert sum(embedder.calls) == 10


async def test_a_lone_request_does_not_wait_for_company(
    autojump_clock: trio.testing.MockClock,
) -> None:
    embedder = SlowEmbedder(delay=0.0)
    config = EngineConfig(cache=False, warmup=WarmupConfig(wait=True))
    async with open_engine(
        TOOLS, config=config, embedder=embedder, run_cpu=virtual_cpu(embedder)
    ) as engine:
        started = trio.current_time()
        selection = await engine.select("book a flight")
        assert trio.current_time() == started  # no batching window
        assert selection.outcome is Outcome.APPLIED


async def test_requests_pending_at_shutdown_do_not_hang() -> None:
    embedder = SlowEmbedder(delay=0.0)
    config = EngineConfig(
        cache=False, deadlines=Deadlines(embed_s=30.0), warmup=WarmupConfig(wait=True)
    )
    outcomes: list[Outcome] = []
    with trio.fail_after(10):
        async with (
            trio.open_nursery() as outer,
            open_engine(
                TOOLS, config=config, embedder=embedder, run_cpu=virtual_cpu(embedder)
            ) as engine,
        ):
            embedder.delay = 5.0

            async def one() -> None:
                outcomes.append((await engine.select("read a file")).outcome)

            for _ in range(3):
                outer.start_soon(one)
            await trio.sleep(0.1)
    assert outcomes == [Outcome.DEGRADED] * 3


async def test_update_re_embeds_only_what_changed(autojump_clock: trio.testing.MockClock) -> None:
    from toolroute import Tool

    embedder = SlowEmbedder()
    config = EngineConfig(cache=False, warmup=WarmupConfig(wait=True))
    async with open_engine(
        TOOLS, config=config, embedder=embedder, run_cpu=virtual_cpu(embedder)
    ) as engine:
        embedder.calls.clear()
        async with engine.subscribe(buffer=8) as events:
            skip_snapshot(events)
            await engine.update(
                add=[Tool("play_music", "play_music", "Play a song or playlist")],
                remove=["book_flight"],
                replace=[Tool("read_file", "read_file", "Read a text file and return its lines")],
            )
            delivery = await events.__anext__()
        assert sum(embedder.calls) == 2  # the new tool and the changed description
        assert "book_flight" not in engine.catalog
        assert engine.catalog.ids[-1] == "play_music"
        assert delivery.event.type == "catalog.updated"
        assert delivery.event.version == 1
        selection = await engine.select("play a song")
        assert selection.tool_ids[0] == "play_music"
        assert selection.outcome is Outcome.APPLIED


async def test_update_naming_unknown_tools_changes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        with pytest.raises(ConfigError, match="nope"):
            await engine.update(remove=["nope"])
        assert engine.catalog is TOOLS


async def test_update_during_warm_up_is_not_overwritten(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from toolroute import Tool

    embedder = SlowEmbedder(delay=1.0)
    async with open_engine(
        TOOLS, config=CONFIG, embedder=embedder, run_cpu=virtual_cpu(embedder)
    ) as engine:
        await engine.update(add=[Tool("play_music", "play_music", "Play a song")])
        await engine.ready()
        assert "play_music" in engine.catalog
        assert engine.index.vectors is not None
        assert len(engine.index.vectors) == len(TOOLS) + 1


async def test_search_tools_finds_and_activates_for_the_next_step(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = EngineConfig(cache=False, selection=SelectionDefaults(max_tools=1))
    async with open_engine(TOOLS, config=config, embedder=None) as engine:
        result = await engine.search_tools('{"query": "calendar events"}', session="s")
        assert result["tools"][0]["name"] == "list_events"
        assert "hint" in result
        user = {"role": "user", "content": "what is the weather in Oslo"}
        step = await engine.prepare_step([user], session="s")
        assert step.tool_ids is not None
        assert "list_events" in step.tool_ids  # found through search_tools
        assert "get_weather" in step.tool_ids
        again = await engine.prepare_step([user], session="s")
        assert again.tool_ids is not None
        assert "list_events" not in again.tool_ids  # shown once


@pytest.mark.parametrize("arguments", ["not json", {"q": 1}, ["query"]])
async def test_search_tools_rejects_bad_arguments(
    arguments: object, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        with pytest.raises(ConfigError, match="search_tools"):
            await engine.search_tools(arguments)


def test_search_tools_definitions_read_back_as_catalogues() -> None:
    from toolroute._core.select.search_tool import search_tools_definition

    assert Catalog.from_openai([search_tools_definition("openai")]).ids == ("search_tools",)
    assert Catalog.from_openai([search_tools_definition("openai-responses")]).ids == (
        "search_tools",
    )
    assert Catalog.from_anthropic([search_tools_definition("anthropic")]).ids == ("search_tools",)
    mcp = Catalog.from_mcp({"tools": [search_tools_definition("mcp")]})
    assert mcp["search_tools"].annotations["readOnlyHint"] is True
    with pytest.raises(ConfigError, match="unknown tool format"):
        search_tools_definition("cohere")


async def test_steps_of_one_session_apply_in_arrival_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    running: dict[str | None, int] = {}
    most: dict[str | None, int] = {}
    order: list[str] = []

    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:

        async def slow_step(messages: Any, session: str | None, *state: Any) -> Any:
            running[session] = running.get(session, 0) + 1
            most[session] = max(most.get(session, 0), running[session])
            await trio.sleep(0.1)
            order.append(messages[0]["content"])
            running[session] -= 1

        engine._steps._step = slow_step  # type: ignore[method-assign]
        async with trio.open_nursery() as nursery:
            for text in ("one", "two", "three"):
                step = functools.partial(engine.prepare_step, session="s")
                nursery.start_soon(step, [{"role": "user", "content": text}])
                await trio.sleep(0.01)
            other = functools.partial(engine.prepare_step, session="t")
            nursery.start_soon(other, [{"role": "user", "content": "x"}])
    assert most["s"] == 1  # one step of a session at a time
    assert [t for t in order if t != "x"] == ["one", "two", "three"]


async def test_keyword_select_and_step_are_checkpoints() -> None:
    # Nothing in a keyword-only selection on a small catalogue awaits; the call must still
    # honour the caller's cancel scope and let other tasks run between calls.
    catalog = Catalog.from_plain([{"name": "get_weather", "description": "Weather in a city"}])
    async with open_engine(catalog, embedder=None, config=EngineConfig(cache=False)) as engine:
        with trio.CancelScope() as scope:
            scope.cancel()
            await engine.select("weather in Oslo")
        assert scope.cancelled_caught
        with trio.CancelScope() as scope:
            scope.cancel()
            await engine.prepare_step("weather in Oslo", session="s")
        assert scope.cancelled_caught

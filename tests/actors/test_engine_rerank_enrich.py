"""Re-ranking in ``Engine.select`` and enrichment at warm-up, with a scripted generator."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import trio
import trio.testing
from event_snapshot import skip_snapshot

from toolroute import Catalog, Outcome
from toolroute._core.config import EngineConfig, EnrichmentConfig, RerankConfig
from toolroute._core.events import FailOpen
from toolroute._runtime.engine import open_engine

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message to a person"},
        {"name": "create_issue", "description": "Open an issue in a GitHub repository"},
        {"name": "search_web", "description": "Search the web for pages"},
        {"name": "read_file", "description": "Read a file from disk"},
    ]
)


class ScriptedGenerator:
    """Answers re-rank prompts with ``picks`` and enrichment prompts with ``phrases``."""

    identity = "scripted-model"

    def __init__(
        self,
        picks: list[str] | None = None,
        phrases: Mapping[str, list[str]] | None = None,
        *,
        hang: bool = False,
        fail: bool = False,
        delay: float = 0.0,
    ) -> None:
        self.picks = picks or []
        self.phrases = dict(phrases or {})
        self.hang = hang
        self.fail = fail
        self.delay = delay
        self.prompts: list[str] = []

    async def generate_json(self, prompt: str, schema: Mapping[str, Any]) -> object:
        self.prompts.append(prompt)
        await trio.sleep(self.delay)
        if self.hang:
            await trio.sleep_forever()
        if self.fail:
            raise RuntimeError("model unavailable")
        items = schema["properties"]["tools"]["items"]
        if items.get("type") == "string":
            return {"tools": self.picks}
        return {"tools": [{"name": n, "phrases": p} for n, p in self.phrases.items()]}


def config(**sections: Any) -> EngineConfig:
    return EngineConfig(cache=False, **sections)


async def test_rerank_orders_by_the_model_and_shows_small_catalogues_whole(
    autojump_clock: trio.testing.MockClock,
) -> None:
    generator = ScriptedGenerator(picks=["read_file", "nonexistent", "send_email", "read_file"])
    cfg = config(rerank=RerankConfig(enabled=True))
    async with open_engine(TOOLS, config=cfg, embedder=None, generator=generator) as engine:
        selection = await engine.select("mail the report", max_tools=3)
    assert selection.tool_ids == ("read_file", "send_email")
    assert selection.strategy == "keyword+rerank"
    assert all(tool.name in generator.prompts[0] for tool in TOOLS)  # ≤ 50 tools: all shown


async def test_rerank_failure_serves_recall_order_degraded_by_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cfg = config(rerank=RerankConfig(enabled=True, deadline_s=0.5))
    for generator in (ScriptedGenerator(hang=True), ScriptedGenerator(fail=True)):
        async with (
            open_engine(TOOLS, config=cfg, embedder=None, generator=generator) as engine,
            engine.subscribe() as events,
        ):
            skip_snapshot(events)
            start = trio.current_time()
            selection = await engine.select("send an email", max_tools=2)
            assert trio.current_time() - start <= 0.5 + 1e-6
            assert selection.tool_ids[0] == "send_email"
            assert selection.outcome is Outcome.DEGRADED
            failure = (await events.__anext__()).event
            assert isinstance(failure, FailOpen)
            assert failure.what_failed == "reranker"


async def test_rerank_off_by_default(autojump_clock: trio.testing.MockClock) -> None:
    generator = ScriptedGenerator(picks=["read_file"])
    async with open_engine(TOOLS, config=config(), embedder=None, generator=generator) as engine:
        selection = await engine.select("send an email", max_tools=2)
    assert selection.tool_ids[0] == "send_email"
    assert generator.prompts == []


def enrichment(tmp_path: Path | None = None) -> Callable[[], EngineConfig]:
    def build() -> EngineConfig:
        return EngineConfig(
            cache=tmp_path is not None,
            cache_dir=tmp_path,
            enrichment=EnrichmentConfig(enabled=True),
        )

    return build


async def test_enrichment_feeds_recall_only_and_is_cached(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    phrases = {tool.name: [f"{tool.name} please"] for tool in TOOLS}
    generator = ScriptedGenerator(phrases={**phrases, "send_email": ["shoot someone a note"]})
    cfg = enrichment(tmp_path)()
    async with open_engine(TOOLS, config=cfg, embedder=None, generator=generator) as engine:
        await engine.ready()
        selection = await engine.select("shoot a note to Bob", max_tools=1)
        assert selection.tool_ids == ("send_email",)
        # The definitions the agent's model sees are untouched.
        assert engine.catalog["send_email"] == TOOLS["send_email"]
        assert engine.index.catalog["send_email"].description == TOOLS["send_email"].description
    calls = len(generator.prompts)
    async with open_engine(TOOLS, config=cfg, embedder=None, generator=generator) as engine:
        await engine.ready()
        assert (await engine.select("shoot a note", max_tools=1)).tool_ids == ("send_email",)
    assert len(generator.prompts) == calls  # the second start reads the disk cache


async def test_enrichment_failure_keeps_the_original_text(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The failure comes a little later in trio time, so the subscription below is in place
    # whatever order the engine's services start in.
    generator = ScriptedGenerator(fail=True, delay=0.01)
    async with (
        open_engine(TOOLS, config=enrichment()(), embedder=None, generator=generator) as engine,
        engine.subscribe() as events,
    ):
        skip_snapshot(events)
        await engine.ready()
        with trio.fail_after(60):  # trio time: a lost event fails the test instead of hanging
            failure = (await events.__anext__()).event
        assert isinstance(failure, FailOpen)
        assert failure.what_failed == "enrichment"
        assert engine.index.extra_text == {}
        assert (await engine.select("send an email", max_tools=1)).tool_ids == ("send_email",)

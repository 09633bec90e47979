"""Prompt-cache mode through the engine: across the scripted 20-step conversation the
restriction changes only where the topic does, and the tool block never."""

from __future__ import annotations

import json
from pathlib import Path

from toolroute import Catalog, EngineConfig
from toolroute._runtime.engine import open_engine
from toolroute.prompt_cache import StickyPicks, permitted_call, restriction

CONVERSATION = (
    Path(__file__).parent.parent / "fixtures" / "tool_search" / "prompt_cache_conversation.json"
)


async def test_the_restriction_changes_only_at_topic_changes() -> None:
    steps = json.loads(CONVERSATION.read_text())["steps"]
    topics = [step["topic"] for step in steps]
    boundaries = {i for i in range(1, len(steps)) if topics[i] != topics[i - 1]}
    catalog = Catalog.demo()
    choices: list[object] = []
    narrowed: list[tuple[str, ...]] = []
    async with open_engine(catalog, config=EngineConfig(cache=False), embedder=None) as engine:
        picks = StickyPicks()
        for step in steps:
            selection = await engine.select(step["user"], max_tools=5)
            picks = picks.advance(selection.tool_ids, catalog)
            narrowed.append(selection.tool_ids)
            choices.append(restriction("openai-responses", picks.tool_ids))
    changed = {i for i in range(1, len(steps)) if choices[i] != choices[i - 1]}
    assert changed <= boundaries, f"changed inside a topic at steps {sorted(changed - boundaries)}"
    assert picks.changes == len(changed)
    # Before: the narrowed block (the picks, best first) changes on most steps.
    before = sum(narrowed[i] != narrowed[i - 1] for i in range(1, len(steps)))
    assert len(changed) < before
    # The last topic is the database: its tools may be called, the weather's may not.
    assert permitted_call(picks.tool_ids, "run_query")
    assert not permitted_call(picks.tool_ids, "get_forecast")

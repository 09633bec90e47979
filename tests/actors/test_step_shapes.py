"""prepare_step over every conversation shape agents pass, through a keyword-only engine."""

from __future__ import annotations

from typing import Any

import trio

from toolroute import Catalog
from toolroute._core.config import EngineConfig, SelectionDefaults
from toolroute._runtime.engine import open_engine

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message to a person"},
        {"name": "search_web", "description": "Search the web for pages"},
        {"name": "read_file", "description": "Read a file from disk"},
    ]
)
CONFIG = EngineConfig(cache=False, selection=SelectionDefaults(max_tools=2))
ASK = "search the web for the weather"

SHAPES: dict[str, list[dict[str, Any]]] = {
    "chat": [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": "Still thinking."},
    ],
    "responses": [
        {"role": "user", "content": [{"type": "input_text", "text": ASK}]},
        {"type": "reasoning", "summary": []},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Still thinking."}],
        },
    ],
    "anthropic": [
        {"role": "user", "content": [{"type": "text", "text": ASK}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Still thinking."}]},
    ],
    "gemini": [
        {"role": "user", "parts": [{"text": ASK}]},
        {"role": "model", "parts": [{"text": "Still thinking."}]},
    ],
}


async def test_a_plain_string_is_a_first_step(autojump_clock: trio.testing.MockClock) -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None, decider=None) as engine:
        from_string = await engine.prepare_step(ASK)  # type: ignore[arg-type]
        from_chat = await engine.prepare_step([{"role": "user", "content": ASK}])
    assert from_string.query == ASK
    assert from_string.page == 0
    assert from_string.tool_ids == from_chat.tool_ids
    assert from_string.tool_ids


async def test_every_shape_pages_alike(autojump_clock: trio.testing.MockClock) -> None:
    steps = {}
    async with open_engine(TOOLS, config=CONFIG, embedder=None, decider=None) as engine:
        for name, messages in SHAPES.items():
            steps[name] = await engine.prepare_step(messages)
    assert {(s.query, s.page, s.tool_ids) for s in steps.values()} == {
        ("Still thinking.", 1, steps["chat"].tool_ids)
    }


async def test_a_responses_function_call_resets_paging(
    autojump_clock: trio.testing.MockClock,
) -> None:
    items = [
        *SHAPES["responses"],
        {"type": "function_call", "call_id": "c1", "name": "search_web", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    async with open_engine(TOOLS, config=CONFIG, embedder=None, decider=None) as engine:
        step = await engine.prepare_step(items)
    assert step.page == 0
    assert step.query == "Still thinking."

"""The agent part of ``toolroute demo``: a scripted conversation through ``prepare_step``,
with the engine's events streamed as they happen."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._core.catalog.catalog import Catalog
from .._core.config import EngineConfig, WarmupConfig
from .._core.events import Event, StepFinished, to_json
from .._runtime.engine import Engine, open_engine

USER = (
    "Find the open GitHub issues about the login bug and post a summary in the #eng Slack channel"
)


def tool_call(name: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": name, "type": "function", "function": {"name": name, "arguments": "{}"}}
        ],
    }


def tool_result(name: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": name, "content": text}


# Each entry is the conversation as the agent's next step sees it.
SCRIPT: list[tuple[str, list[dict[str, Any]]]] = [
    ("the user's request", [{"role": "user", "content": USER}]),
    # Agents re-ask a step (a retry, a re-sample): the same request costs no model call.
    ("the same step again (the agent retries it)", [{"role": "user", "content": USER}]),
    (
        "after a tool call",
        [
            {"role": "user", "content": USER},
            tool_call("list_issues"),
            tool_result("list_issues", "3 issues: #41 login fails on Safari, #44 ..."),
        ],
    ),
    (
        "after a step with no tool call (next page)",
        [
            {"role": "user", "content": USER},
            tool_call("list_issues"),
            tool_result("list_issues", "3 issues ..."),
            {"role": "assistant", "content": "I have the issues; now I need to tell the team."},
        ],
    ),
    (
        "after two steps with no tool call (every tool)",
        [
            {"role": "user", "content": USER},
            tool_call("list_issues"),
            tool_result("list_issues", "3 issues ..."),
            {"role": "assistant", "content": "I have the issues; now I need to tell the team."},
            {"role": "assistant", "content": "Which tool posts to a channel?"},
        ],
    ),
]


async def converse(engine: Engine, write: Callable[[str], None], json_lines: bool) -> None:
    """Run ``SCRIPT`` through ``engine``, each step's heading followed by that step's events.

    Events arrive on a subscription; printing them as they come would interleave them with
    the headings differently on each run. So after each step its events are read here,
    up to and including its ``step.finished`` (published before ``prepare_step`` returns):
    the output is in the same order every time.
    """

    def show(event: Event) -> None:
        if json_lines:
            write(to_json(event))
        elif isinstance(event, StepFinished):
            shown = "every tool" if event.tool_ids is None else ", ".join(event.tool_ids)
            write(
                f"  event {event.type}: page {event.page}, {event.outcome}, "
                f"{event.latency_ms:.1f} ms -> {shown}"
            )
        else:
            write(f"  event {event.type}")

    async with engine.subscribe(buffer=64) as events:
        show((await events.receive()).event)  # subscription.started: the state before
        for label, messages in SCRIPT:
            step = await engine.prepare_step(messages, session="demo")
            if not json_lines:
                write(f"\nstep {label}\n  query: {step.query[:90]}")
            while True:
                delivery = await events.receive()
                show(delivery.event)
                # A loss (never expected at this buffer) may have taken the step's own event.
                if isinstance(delivery.event, StepFinished) or delivery.dropped:
                    break
    if not json_lines:
        stats = engine.statistics().recall
        lookups = stats.query_cache_hits + stats.query_cache_misses
        write(
            f"\nquery cache: {stats.query_cache_hits} of {lookups} request embeddings reused"
            f" ({stats.query_cache_hit_rate:.0%}); model calls saved: {stats.query_cache_hits}"
        )


def run_agent_demo(
    catalog: Catalog, embedder: Any, cache_dir: str | None, json_lines: bool
) -> None:
    config = EngineConfig(cache_dir=cache_dir, warmup=WarmupConfig(wait=True))

    async def main() -> None:
        async with open_engine(catalog, config=config, embedder=embedder) as engine:
            await converse(engine, print, json_lines)

    import trio

    trio.run(main)

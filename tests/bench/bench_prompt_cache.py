"""Prefix stability of the tool block across a scripted 20-step conversation, before and after
prompt-cache mode, side by side in one run.

    python tests/bench/bench_prompt_cache.py [--embedder keyword|minilm|both] [--max-tools 5]
        [--datasets ../shared/datasets]

Two conversations, five topics of four steps each: ``prompt_cache_conversation.json`` over the
demo catalogue (its tools have servers: a topic is a server) and the held-out
``prompt_cache_conversation_saas.json`` over the toolpick SaaS catalogue (no servers: each tool
is its own group), both in ``tests/fixtures/tool_search/``. Each step selects for the user's message
(``Engine.select``, ``max_tools`` picks) and renders what the host would send, as OpenAI
Responses JSON. Counted: how many of the 19 step-to-step transitions change

- ``narrowed, rank order`` (before): the selected tools as the tool block, best first;
- ``narrowed, stable order``: the same tools in catalogue order;
- ``narrowed, sticky + stable``: the sticky set (``StickyPicks``) as the tool block;
- ``prompt-cache mode``: the whole list as the tool block (it never changes) and the sticky
  set as ``tool_choice`` ``allowed_tools`` (its changes are counted).

A change counts as "at a topic change" when it happens on a step whose topic differs from the
previous step's.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from toolroute import Catalog, EngineConfig, open_engine
from toolroute._core.config import Deadlines, WarmupConfig
from toolroute.prompt_cache import StickyPicks, restriction, stable_order
from toolroute.providers import default_embedder

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures" / "tool_search"
CONVERSATIONS = ("prompt_cache_conversation.json", "prompt_cache_conversation_saas.json")


def rendered(ids: Sequence[str], catalog: Catalog) -> str:
    return json.dumps(
        [
            {
                "type": "function",
                "name": tool_id,
                "description": catalog[tool_id].description,
                "parameters": dict(catalog[tool_id].parameters),
            }
            for tool_id in ids
        ]
    )


def changes(blocks: Sequence[str]) -> list[int]:
    """The steps whose block differs from the previous step's."""
    return [i for i in range(1, len(blocks)) if blocks[i] != blocks[i - 1]]


def catalog_of(conversation: dict[str, Any], datasets: Path) -> Catalog:
    if conversation["catalog"] == "demo":
        return Catalog.demo()
    return Catalog.from_file(datasets / conversation["catalog"] / "tools.json", format="plain")


async def run(label: str, embedder: Any, max_tools: int, name: str, datasets: Path) -> None:
    conversation = json.loads((FIXTURES / name).read_text())
    steps = conversation["steps"]
    catalog = catalog_of(conversation, datasets)
    config = EngineConfig(
        cache=False, warmup=WarmupConfig(wait=True), deadlines=Deadlines(embed_s=5.0)
    )
    topics = [step["topic"] for step in steps]
    boundaries = {i for i in range(1, len(topics)) if topics[i] != topics[i - 1]}
    blocks: dict[str, list[str]] = {
        "narrowed, rank order (before)": [],
        "narrowed, stable order": [],
        "narrowed, sticky + stable": [],
        "prompt-cache mode: tool block": [],
        "prompt-cache mode: allowed_tools": [],
    }
    outcomes: dict[str, int] = {}
    async with open_engine(catalog, config=config, embedder=embedder) as engine:
        picks = StickyPicks()
        whole = rendered(catalog.ids, catalog)
        for step in steps:
            selection = await engine.select(step["user"], max_tools=max_tools)
            outcomes[selection.outcome.value] = outcomes.get(selection.outcome.value, 0) + 1
            picks = picks.advance(selection.tool_ids, catalog)
            blocks["narrowed, rank order (before)"].append(rendered(selection.tool_ids, catalog))
            ordered = stable_order(selection.tool_ids, catalog.ids)
            blocks["narrowed, stable order"].append(rendered(ordered, catalog))
            blocks["narrowed, sticky + stable"].append(rendered(picks.tool_ids, catalog))
            blocks["prompt-cache mode: tool block"].append(whole)
            choice = restriction("openai-responses", picks.tool_ids)
            blocks["prompt-cache mode: allowed_tools"].append(json.dumps(choice))
    seen = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items()))
    print(f"{name} ({conversation['catalog']}, {len(catalog)} tools), {label}:")
    print(f"  {len(steps)} steps, {len(boundaries)} topic changes, max_tools={max_tools}")
    print(f"  selections: {seen}")
    for name, values in blocks.items():
        changed = changes(values)
        inside = [i for i in changed if i not in boundaries]
        print(
            f"  {name:34s} changes {len(changed):2d} of {len(values) - 1}"
            f"  (at a topic change {len(changed) - len(inside)}, inside a topic {len(inside)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedder", choices=("keyword", "minilm", "both"), default="both")
    parser.add_argument("--max-tools", type=int, default=5)
    parser.add_argument("--datasets", default=str(HERE.parents[2] / "shared" / "datasets"))
    args = parser.parse_args()
    datasets = Path(args.datasets)
    for name in CONVERSATIONS:
        if args.embedder in ("keyword", "both"):
            trio.run(run, "keyword recall", None, args.max_tools, name, datasets)
        if args.embedder in ("minilm", "both"):
            model = default_embedder()
            trio.run(
                run, "minilm recall (the default model)", model, args.max_tools, name, datasets
            )


if __name__ == "__main__":
    main()

"""The "no tool needed" outcome with the local decider: MetaTool awareness, BFCL irrelevance.

    python tests/bench/bench_no_tool.py [--out tests/bench/results] [--skip-engine]

For every request of MetaTool awareness (``queries_awareness.json``, the 199 tools) and of
BFCL relevance (``queries.json`` + ``queries_irrelevance.json``, each with the functions
offered with it), the engine's no-tool question (``needs_tool_request``: the request and the
listed tools) is answered by ``LocalDecider()`` (the bundled model and calibration) and read
with the engine's rule (``read_verdict``) at several gates (``selection.no_tool_min_confidence``).
Printed per split and gate:

- **recognised**: the share of no-tool requests told "no tool needed";
- **wrongly told no tool**: the share (and count) of tool-needing requests told so, which
  hides every tool the request needs.

The gate is chosen on dev (the default, 0.9, marked ``*``); test is the figure to quote.
Then, unless ``--skip-engine``, the MetaTool test requests go through a real engine
(``open_engine(MetaTool, decider=LocalDecider(), selection.no_tool on)``, ``select``) as the
end-to-end check that the engine asks the same question.

Prints Markdown; ``--out DIR`` also writes it to ``DIR/no_tool.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import trio

from toolroute import Catalog, EngineConfig, Tool
from toolroute._core.config import SelectionDefaults
from toolroute._core.decide.no_tool import needs_tool_request, read_verdict
from toolroute._runtime.engine import open_engine
from toolroute.evaluate import split_of
from toolroute.providers import LocalDecider

DATASETS = Path(os.environ.get("TOOLROUTE_DATASETS", "/work/shared/datasets"))
GATES = (0.8, 0.86, 0.9, 0.94, 0.96)
CHOSEN = SelectionDefaults().no_tool_min_confidence


def _load(path: Path) -> Any:
    return json.loads(path.read_text("utf-8"))


def _tools(items: list[dict[str, Any]]) -> list[Tool]:
    return [
        Tool(id=t["name"], name=t["name"], description=t.get("description") or "") for t in items
    ]


def pairs(tools: list[Tool]) -> list[tuple[str, str]]:
    return [(t.name, t.description) for t in tools]


def metatool() -> Iterator[tuple[str, list[Tool], bool]]:
    tools = _tools(_load(DATASETS / "metatool/tools.json"))
    for item in _load(DATASETS / "metatool/queries_awareness.json"):
        yield item["query"], tools, bool(item["expected"])


def bfcl() -> Iterator[tuple[str, list[Tool], bool]]:
    by_name = {t["name"]: t for t in _load(DATASETS / "bfcl/tools.json")}
    for file in ("queries.json", "queries_irrelevance.json"):
        for item in _load(DATASETS / "bfcl" / file):
            offered = [by_name[n] for n in item.get("candidates", []) if n in by_name]
            if offered:  # a request offered no function has nothing to be told about
                yield item["query"], _tools(offered), bool(item["expected"])


async def probabilities(rows: list[tuple[str, list[Tool], bool]]) -> np.ndarray:
    decider = LocalDecider()
    out = []
    for query, tools, _needs in rows:
        result = await decider.decide(needs_tool_request(query, pairs(tools), timeout_s=60.0))
        verdict = read_verdict(result, 0.0)
        assert verdict.probability is not None, "the local decider left the question unanswered"
        out.append(verdict.probability)
    return np.array(out)


def table(name: str, rows: list[tuple[str, list[Tool], bool]], p: np.ndarray) -> list[str]:
    needs = np.array([r[2] for r in rows])
    splits = np.array([split_of(r[0]) for r in rows])
    lines = []
    for split in ("dev", "test"):
        m = splits == split
        for gate in GATES:
            # The engine's rule: a confident false, |p - 0.5| * 2 >= gate and p < 0.5.
            told = np.array([read_verdict_at(x, gate) for x in p[m]])
            none, some = ~needs[m], needs[m]
            wrong = int((told & some).sum())
            mark = " *" if gate == CHOSEN else ""
            lines.append(
                f"| {name} | {split} | {gate:g}{mark} (p ≤ {(1 - gate) / 2:.3g}) |"
                f" {none.sum()} | {(told & none).sum() / none.sum():.1%} |"
                f" {some.sum()} | {wrong / some.sum():.2%} ({wrong}) |"
            )
    return lines


def read_verdict_at(probability: float, gate: float) -> bool:
    from toolroute.decisions import BooleanAnswer, DecisionResult

    result = DecisionResult(
        model="local", provider="local", answers={"needs_tool": BooleanAnswer(float(probability))}
    )
    return read_verdict(result, gate).no_tool


async def engine_check(rows: list[tuple[str, list[Tool], bool]]) -> str:
    """MetaTool test through ``Engine.select`` with the option on, at the default gate."""
    tools = rows[0][1]
    catalog = Catalog(tools)
    config = EngineConfig(cache=False, selection=SelectionDefaults(no_tool=True))
    test = [r for r in rows if split_of(r[0]) == "test"]
    told = []
    decider = LocalDecider()
    # The first question embeds the 199 tool texts (then cached): outside the measurement.
    await decider.decide(needs_tool_request("warm up", pairs(tools), timeout_s=60.0))
    async with open_engine(catalog, config=config, decider=decider) as engine:
        await engine.ready()
        for query, *_ in test:
            told.append((await engine.select(query)).no_tool_needed)
    t, needs = np.array(told), np.array([r[2] for r in test])
    return (
        f"Engine path, MetaTool awareness test, gate {CHOSEN:g}: recognised"
        f" {(t & ~needs).sum() / (~needs).sum():.1%} of {(~needs).sum()} no-tool requests;"
        f" wrongly told no tool {(t & needs).sum()} of {needs.sum()} tool-needing requests."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--skip-engine", action="store_true")
    args = parser.parse_args()
    out = [
        "## No tool needed (LocalDecider, engine rule)",
        "",
        "| dataset | split | gate (hide at) | no-tool requests | recognised |"
        " tool-needing requests | wrongly told no tool |",
        "|---|---|---|---|---|---|---|",
    ]
    meta = list(metatool())
    for name, rows in (("MetaTool awareness", meta), ("BFCL relevance", list(bfcl()))):
        out += table(name, rows, trio.run(probabilities, rows))
    if not args.skip_engine:
        out += ["", trio.run(engine_check, meta)]
    text = "\n".join(out)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "no_tool.md").write_text(text + "\n", "utf-8")


if __name__ == "__main__":
    sys.exit(main())

"""What reading a conversation costs, shape by shape, and what the reader before this branch
made of each shape.

    python tests/bench/bench_conversations.py [--base c148f74] [--events 40] [--rounds 9]

One conversation of ``--events`` asks and steps (tool calls and their results included) is
rendered in every shape the property test uses (tests/unit/test_conversation_shapes.py);
the frameworks' shapes need their extras installed. For each shape it prints the median
time of ``extract_query`` over ``--rounds`` rounds, the current reader and the one at
``--base`` (loaded from git) alternating in each round, and what the old reader answered:
the same query, an empty one (a silent "show every tool") or an error.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolroute._core.select import conversation

ROOT = Path(__file__).resolve().parents[2]
READER = "engine/_core/select/conversation.py"


def load_shapes() -> Any:
    spec = importlib.util.spec_from_file_location(
        "conversation_shapes", ROOT / "tests/unit/test_conversation_shapes.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def base_reader(revision: str) -> types.ModuleType:
    """The conversation reader as it was at ``revision``, as a sibling module of today's."""
    source = subprocess.run(
        ["git", "show", f"{revision}:{READER}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType("toolroute._core.select._conversation_base")
    module.__package__ = "toolroute._core.select"
    sys.modules[module.__name__] = module
    exec(compile(source, f"{revision}:{READER}", "exec"), module.__dict__)
    return module


def events(shapes: Any, count: int, seed: int) -> list[Any]:
    rng = random.Random(seed)
    out: list[Any] = []
    for _ in range(count):
        words = " ".join(rng.choice(["send", "email", "weather", "file", "read"]) for _ in range(6))
        if rng.random() < 0.4:
            out.append(shapes.Ask(words))
        else:
            calls = tuple(rng.sample(shapes.TOOL_NAMES, rng.randint(0, 2)))
            out.append(shapes.Step(words if rng.random() < 0.5 or not calls else "", calls))
    return out


def timed(read: Callable[[Any], str], messages: Any, repeat: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        read(messages)
    return (time.perf_counter() - started) / repeat * 1e6


def old_answer(read: Callable[[Any], str], messages: Any, expected: str) -> str:
    try:
        query = read(messages)
    except Exception as exc:  # what the old reader raised, for the table
        return f"error: {type(exc).__name__}: {str(exc)[:50]}"
    if query == expected:
        return "same query"
    return "empty query (every tool shown)" if not query else "another query"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="c148f74", help="git revision of the old reader")
    parser.add_argument("--events", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    shapes = load_shapes()
    old = base_reader(args.base)
    conversation_events = events(shapes, args.events, seed=7)
    print(f"conversation: {args.events} events; median of {args.rounds} rounds x {args.repeat}")
    print("| shape | messages | new µs | old µs | old reader answered |")
    print("|---|---|---|---|---|")
    for render in [*shapes.SHAPES, *shapes.FRAMEWORK_SHAPES]:
        for variant in (False, True):
            try:
                messages = render(conversation_events, variant)
            except BaseException as exc:  # pytest's Skipped: the framework is not installed
                print(f"| {render.__name__} ({variant}) | – | skipped: {exc} | | |")
                break
            expected = conversation.extract_query(messages)
            new_times, old_times = [], []
            answered = old_answer(old.extract_query, messages, expected)
            for _ in range(args.rounds):
                new_times.append(timed(conversation.extract_query, messages, args.repeat))
                if answered != "same query" and answered.startswith("error"):
                    continue
                old_times.append(timed(old.extract_query, messages, args.repeat))
            old_cell = f"{statistics.median(old_times):.0f}" if old_times else "–"
            size = len(messages) if isinstance(messages, list) else f"{len(messages)} bytes"
            print(
                f"| {render.__name__} ({variant}) | {size} | "
                f"{statistics.median(new_times):.0f} | {old_cell} | {answered} |"
            )


if __name__ == "__main__":
    main()

"""Benchmark: the step actor against the direct call it replaced, side by side.

    python tests/bench/bench_actors.py --old CHECKOUT [--rounds 3] [--steps 3000]

Each round runs the same workload twice, alternately, each in a fresh interpreter: once
against this checkout (``prepare_step`` through the step actor's inbox) and once against
``--old``, a checkout of the code before the actor (``prepare_step`` run in the caller's
task under a per-session lock). Both engines are keyword-only over the same 200 tools, so a
step is almost all engine overhead, the part the actor changes. Prints, per round and side:

- one caller, one session, ``--steps`` steps in a row: per-step latency p50 / p99 (µs);
- 1,000 concurrent steps across 100 sessions (10 each), all started at once: wall time and
  steps per second (the median of 5 bursts);

and the difference of the medians over the rounds (new - old): the actor's round trip.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
WORDS = (
    "send read write list create delete update search book cancel fetch open close get set "
    "email file issue flight hotel calendar event invoice song playlist weather map news"
).split()


def package_tree(checkout: Path, into: Path) -> Path:
    """A directory importing ``checkout`` as the installed package would (``toolroute`` +
    ``toolroute.providers``), made of symbolic links: the checkout is only read."""
    package = into / "toolroute"
    package.mkdir(parents=True)
    for item in (checkout / "engine").iterdir():
        (package / item.name).symlink_to(item)
    (package / "providers").symlink_to(checkout / "providers")
    return into


def child(steps: int) -> dict[str, float | str]:
    """The workload, in this interpreter (``toolroute`` is whichever tree is first on the
    path)."""
    import numpy as np
    import trio

    import toolroute
    from toolroute import Catalog, EngineConfig
    from toolroute._runtime.engine import open_engine

    tools = [
        {
            "name": f"{WORDS[i % 15]}_{WORDS[15 + i % 13]}_{i}",
            "description": f"{WORDS[i % 15]} the {WORDS[15 + (i * 7) % 13]} for user {i}",
        }
        for i in range(200)
    ]
    catalog = Catalog.from_plain(tools)
    messages = [{"role": "user", "content": "book a flight and email the invoice"}]
    result: dict[str, float | str] = {"package": str(Path(toolroute.__file__).parent.resolve())}

    async def main() -> None:
        async with open_engine(catalog, config=EngineConfig(cache=False), embedder=None) as engine:
            for _ in range(200):  # warm caches and code paths
                await engine.prepare_step(messages, session="warm")
            latencies = []
            for _ in range(steps):
                started = time.perf_counter()
                await engine.prepare_step(messages, session="one")
                latencies.append(time.perf_counter() - started)
            result["p50_us"] = float(np.percentile(latencies, 50)) * 1e6
            result["p99_us"] = float(np.percentile(latencies, 99)) * 1e6

            walls = []
            for _ in range(5):
                started = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for i in range(1000):
                        nursery.start_soon(
                            lambda s=f"s{i % 100}": engine.prepare_step(messages, session=s)
                        )
                walls.append(time.perf_counter() - started)
            wall = statistics.median(walls)
            result["burst_ms"] = wall * 1e3
            result["burst_steps_per_s"] = 1000 / wall

    trio.run(main)
    return result


def run_side(tree: Path, steps: int) -> dict[str, float | str]:
    code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]); sys.path.insert(1, sys.argv[2]);"
        "import bench_actors; print(json.dumps(bench_actors.child(int(sys.argv[3]))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tree), str(HERE), str(steps)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--old", type=Path, required=True, help="a checkout of the code before the step actor"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        trees = {
            "new": package_tree(ROOT, Path(temp) / "new"),
            "old": package_tree(args.old.resolve(), Path(temp) / "old"),
        }
        rows: dict[str, list[dict[str, float | str]]] = {"new": [], "old": []}
        for round_ in range(args.rounds):
            for side in ("old", "new") if round_ % 2 == 0 else ("new", "old"):
                row = run_side(trees[side], args.steps)
                rows[side].append(row)
                print(
                    f"round {round_ + 1} {side}: one session p50 {row['p50_us']:7.1f} µs  "
                    f"p99 {row['p99_us']:7.1f} µs | 1,000 steps / 100 sessions "
                    f"{row['burst_ms']:6.1f} ms = {row['burst_steps_per_s']:6.0f} steps/s"
                    f"   ({row['package']})",
                    flush=True,
                )
    print()
    for key, unit in (("p50_us", "µs"), ("p99_us", "µs"), ("burst_steps_per_s", "steps/s")):
        old = statistics.median(float(r[key]) for r in rows["old"])
        new = statistics.median(float(r[key]) for r in rows["new"])
        print(f"{key:18} old {old:8.1f}  new {new:8.1f}  new - old {new - old:+8.1f} {unit}")


if __name__ == "__main__":
    main()

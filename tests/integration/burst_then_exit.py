"""Two waves of concurrent selects through one engine, then leave it and end at once.

Run as a script by ``test_shutdown.py``: the interpreter must exit with status 0. Model
calls abandoned at their deadline used to keep running in worker threads, and the process
aborted at exit while ONNX Runtime was still inside them.

Usage: python burst_then_exit.py DATASET_DIR [CONCURRENCY]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

from toolroute import Catalog, open_engine


async def main(dataset: Path, concurrency: int) -> None:
    catalog = Catalog.from_file(dataset / "tools.json")
    queries = [row["query"] for row in json.loads((dataset / "queries.json").read_text())]
    async with open_engine(catalog) as engine:
        await engine.ready()
        for wave in range(2):
            chosen = queries[wave * concurrency : (wave + 1) * concurrency]
            async with trio.open_nursery() as nursery:
                for query in chosen:  # distinct requests: no two share a batch slot
                    nursery.start_soon(engine.select, query)
    # Leave at once: nothing may still be running inside the model.


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 200)

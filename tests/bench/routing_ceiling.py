"""How far a ranking of the 70 LiveMCPBench servers by the bundled model can get.

    python tests/bench/routing_ceiling.py

The offline routing target asks that the servers a task needs are all kept for ≥ 98 % of
tasks while ≥ 40 % of the servers are dropped, i.e. keeping at most 42 of 70. Whatever
probabilities a calibration gives, a drop rule that only reads one score per server keeps
all needed servers no more often than the best rule "keep the top K by that score" does.
This prints, per split, the share of tasks whose needed servers all rank within the top K
for three scores:

- ``server text``: the local decider's feature for the text routing sends for a server
  (its id, description and tool names: ``route_servers``' state);
- ``best tool``: the best cosine between the task and any one of the server's tools
  (name and description), text that routing does not send today;
- ``best two tools``: the mean of the server's two best tool cosines;
- ``best tool, combined``: the rank of the server's best tool in toolroute's own combined
  ranking (keyword and model) of all 527 tools;
- ``best tool, combined, by clauses``: the same over the task and each of its clauses (split
  at sentence ends, commas and "and"/"then"), a server ranked by its best tool in any of them.

Then a per-task cut on the server-text score (keep what scores within a margin of the
task's best server), which may drop many servers for one task and few for another.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from local_decider_data import DATASETS, livemcp_rows, livemcp_servers, livemcp_tasks  # noqa: E402

from toolroute import Catalog, ToolIndex  # noqa: E402
from toolroute._core.text import split_identifier  # noqa: E402
from toolroute.evaluate import split_of  # noqa: E402
from toolroute.providers import LocalDecider, default_embedder  # noqa: E402

KEEP = (10, 20, 30, 42, 50, 60)
_CLAUSE = re.compile(r"(?<=[.;!?])\s+|,\s*(?:and\s+|then\s+)?|\s+(?:and\s+)?then\s+|\s+and\s+")


def clauses(task: str) -> list[str]:
    return [c.strip() for c in _CLAUSE.split(task) if len(c.strip()) > 12]


def shares(worst: list[int]) -> str:
    ranks = np.array(worst)
    return " | ".join(f"{(ranks <= k).mean():.1%}" for k in KEEP)


def main() -> None:
    servers, _owner = livemcp_servers()
    ids = [s.id for s in servers]
    tasks = list(livemcp_tasks())
    rows = livemcp_rows(LocalDecider())
    cosine = rows.features[:, 0].reshape(len(tasks), len(servers))

    tools = json.loads((DATASETS / "livemcpbench/tools.json").read_text("utf-8"))
    embedder = default_embedder()
    texts = [
        " ".join(split_identifier(t["name"])) + ": " + (t.get("description") or "") for t in tools
    ]
    tool_vectors = embedder.embed(texts)
    task_vectors = embedder.embed([q for q, _ in tasks])
    by_tool = task_vectors @ tool_vectors.T
    owner = np.array([ids.index(t["server"]) for t in tools])

    def best(k: int) -> np.ndarray:
        out = np.empty((len(tasks), len(servers)))
        for j in range(len(servers)):
            top = np.sort(by_tool[:, owner == j], axis=1)[:, ::-1][:, :k]
            out[:, j] = top.mean(axis=1)
        return out

    # Servers by their best tool's place in the combined ranking (higher is better).
    index = ToolIndex(Catalog.from_file(DATASETS / "livemcpbench/tools.json"), embedder=embedder)
    server_of = {tool.id: ids.index(tool.server) for tool in index.catalog}

    def combined(texts: list[list[str]]) -> np.ndarray:
        flat = [text for group in texts for text in group]
        rankings = iter(index.search_many(flat, len(index.catalog)))
        out = np.full((len(texts), len(servers)), -float(len(index.catalog)))
        for i, group in enumerate(texts):
            for _ in group:
                for place, tool_id in enumerate(next(rankings).tool_ids):
                    j = server_of[tool_id]
                    out[i, j] = max(out[i, j], -place)
        return out

    print("| score | split | tasks | " + " | ".join(f"top {k}" for k in KEEP) + " |")
    print("|---|---|---|" + "---|" * len(KEEP))
    for name, score in (
        ("server text", cosine),
        ("best tool", best(1)),
        ("best two tools", best(2)),
        ("best tool, combined", combined([[q] for q, _ in tasks])),
        ("best tool, combined, by clauses", combined([[q, *clauses(q)] for q, _ in tasks])),
    ):
        for split in ("dev", "test"):
            worst = []
            for i, (query, needed) in enumerate(tasks):
                if split_of(query) != split:
                    continue
                rank = (-score[i]).argsort().argsort() + 1
                worst.append(max(int(rank[ids.index(s)]) for s in needed))
            print(f"| {name} | {split} | {len(worst)} | {shares(worst)} |")
    # A per-task cut instead of a fixed K: keep what scores within ``delta`` of the task's
    # best server (a drop rule may drop many servers for one task and few for another).
    print()
    print("| server text, keep within delta of the best | split | all needed kept | dropped |")
    print("|---|---|---|---|")
    needed = np.array([[s in n for s in ids] for _, n in tasks])
    splits = np.array([split_of(q) for q, _ in tasks])
    for delta in (0.1, 0.2, 0.25, 0.3):
        for split in ("dev", "test"):
            m = splits == split
            keep = cosine[m] >= cosine[m].max(axis=1, keepdims=True) - delta
            kept_all = (needed[m] <= keep).all(axis=1).mean()
            print(f"| {delta:g} | {split} | {kept_all:.1%} | {1 - keep.mean():.1%} |")


if __name__ == "__main__":
    main()

"""The labelled decision questions the local decider is fitted and measured on.

Shared by ``fit_local_decider.py`` and ``bench_local_decider.py`` so that both read the same
requests, built the way the engine builds them:

- **MetaTool awareness** — ``queries_awareness.json``: "does the request need any of the
  199 tools?" (positive: a tool is labelled; negative: none is).
- **BFCL relevance** — ``queries.json`` (relevant) + ``queries_irrelevance.json``: "does the
  request need any of the functions offered with it?" (items without candidates skipped).
- **LiveMCPBench servers** — the routing request ``route_servers`` sends for the 70 servers
  (measured wording): one boolean per server, true when the task uses one of its tools.

Every row carries the split of its request (``toolroute.evaluate.split_of``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from toolroute import RoutingConfig, Server
from toolroute._core.recall.parts import request_vectors
from toolroute._core.routing.usage import SIMILAR_REQUESTS, UseLog
from toolroute._routing.questions import Candidate, routing_request
from toolroute.decisions import BooleanQuestion, DecisionRequest
from toolroute.evaluate import split_of
from toolroute.providers import LocalDecider

DATASETS = Path(os.environ.get("TOOLROUTE_DATASETS", "/work/shared/datasets"))

ANY_TOOL = BooleanQuestion(
    "The request needs one of available_tools to be carried out.",
    true="A tool in available_tools does what the request asks.",
    false="No tool in available_tools is needed; the request is answered without tools.",
)


@attrs.frozen
class Rows:
    """One dataset's questions as feature rows."""

    name: str
    kind: str
    features: np.ndarray
    labels: np.ndarray
    splits: np.ndarray  # "dev" / "test" per row
    groups: np.ndarray  # the request each row belongs to (routing: one task, many rows)


def _load(path: Path) -> Any:
    return json.loads(path.read_text("utf-8"))


def awareness_requests() -> Iterator[tuple[DecisionRequest, int, str]]:
    tools = [
        {"name": t["name"], "description": t["description"]}
        for t in _load(DATASETS / "metatool/tools.json")
    ]
    for item in _load(DATASETS / "metatool/queries_awareness.json"):
        state = {"request": item["query"], "available_tools": tools}
        yield (
            DecisionRequest(state=state, questions={"any": ANY_TOOL}),
            int(bool(item["expected"])),
            item["query"],
        )


def bfcl_requests() -> Iterator[tuple[DecisionRequest, int, str]]:
    by_name = {t["name"]: t for t in _load(DATASETS / "bfcl/tools.json")}
    for file in ("queries.json", "queries_irrelevance.json"):
        for item in _load(DATASETS / "bfcl" / file):
            offered = [by_name[n] for n in item.get("candidates", []) if n in by_name]
            if not offered:
                continue
            tools = [{"name": t["name"], "description": t["description"]} for t in offered]
            state = {"request": item["query"], "available_tools": tools}
            yield (
                DecisionRequest(state=state, questions={"any": ANY_TOOL}),
                int(bool(item["expected"])),
                item["query"],
            )


def livemcp_servers() -> tuple[list[Server], dict[str, str]]:
    tools = _load(DATASETS / "livemcpbench/tools.json")
    members: dict[str, list[str]] = {}
    about: dict[str, str] = {}
    for tool in tools:
        members.setdefault(tool["server"], []).append(tool["name"])
        about.setdefault(tool["server"], tool.get("server_description") or "")
    servers = [Server(s, about[s], tuple(ids)) for s, ids in members.items()]
    return servers, {t["name"]: t["server"] for t in tools}


def livemcp_tasks() -> Iterator[tuple[str, set[str]]]:
    _servers, owner = livemcp_servers()
    for query, tools in livemcp_task_tools():
        yield query, {owner[t] for t in tools}


def livemcp_task_tools() -> Iterator[tuple[str, frozenset[str]]]:
    """Each task that uses a known tool, with the tools it uses."""
    _servers, owner = livemcp_servers()
    for item in _load(DATASETS / "livemcpbench/queries.json"):
        tools = frozenset(n for n in item["expected"] if n in owner)
        if tools:
            yield item["query"], tools


def livemcp_shifts(
    decider: LocalDecider, embedder: Any, limit: int = SIMILAR_REQUESTS
) -> np.ndarray:
    """The usage shift of every row of ``livemcp_rows`` (same order), as an engine that
    learned the dev tasks with their tools (``Engine.learn``) would send them: a dev task
    counts the other dev tasks (leave one out), a test task every dev task."""
    servers, _owner = livemcp_servers()
    entries = [Candidate(s, s.tool_ids) for s in servers]
    tasks = list(livemcp_task_tools())
    vectors = request_vectors(embedder, [q for q, _ in tasks])
    dev = [i for i, (q, _) in enumerate(tasks) if split_of(q) == "dev"]
    shifts = []
    for i, (query, _tools) in enumerate(tasks):
        learned = [j for j in dev if j != i]
        log = UseLog(vectors[learned], tuple(tasks[j][1] for j in learned))
        similar = log.similar(vectors[i], servers, limit)
        found = decider.features(routing_request(query, entries, RoutingConfig(), similar=similar))
        shifts.extend(found[f"server__{j}"][2] for j in range(len(servers)))
    return np.array(shifts, dtype=np.float64)


def awareness_rows(decider: LocalDecider) -> Rows:
    return _any_rows("MetaTool awareness", awareness_requests(), decider)


def bfcl_rows(decider: LocalDecider) -> Rows:
    return _any_rows("BFCL relevance", bfcl_requests(), decider)


def _any_rows(name: str, requests: Any, decider: LocalDecider) -> Rows:
    feats, labels, splits, groups = [], [], [], []
    for i, (request, label, query) in enumerate(requests):
        kind, row, _shift = decider.features(request)["any"]
        assert kind == "any", kind
        feats.append(row)
        labels.append(label)
        splits.append(split_of(query))
        groups.append(i)
    return Rows(name, "any", np.array(feats), np.array(labels), np.array(splits), np.array(groups))


def livemcp_rows(decider: LocalDecider) -> Rows:
    servers, _owner = livemcp_servers()
    entries = [Candidate(s, s.tool_ids) for s in servers]
    feats, labels, splits, groups = [], [], [], []
    for i, (query, needed) in enumerate(livemcp_tasks()):
        request = routing_request(query, entries, RoutingConfig())
        found = decider.features(request)
        for j, server in enumerate(servers):
            kind, row, _shift = found[f"server__{j}"]
            assert kind == "one", kind
            feats.append(row)
            labels.append(int(server.id in needed))
            splits.append(split_of(query))
            groups.append(i)
    return Rows(
        "LiveMCPBench servers",
        "one",
        np.array(feats),
        np.array(labels),
        np.array(splits),
        np.array(groups),
    )

"""Retrieval metrics, Wilson intervals and the fixed dev/test split of a query set."""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterable, Sequence

import attrs
import numpy as np

from . import files
from .errors import ConfigError

#: A query is in the test split when the first byte of sha1(query) is below this (~20 %).
TEST_SPLIT_BYTE = 52


def split_of(query: str) -> str:
    """``"test"`` or ``"dev"``: fixed once and for all by the query's sha1."""
    return "test" if hashlib.sha1(query.encode("utf-8")).digest()[0] < TEST_SPLIT_BYTE else "dev"


@attrs.frozen(kw_only=True)
class Query:
    """A labelled request: the tools a good selection must surface.

    ``groups`` lists alternatives: a group counts as found when any member is retrieved
    (LiveMCPBench's ``expected_groups``). Without groups each expected tool is its own group.
    """

    text: str
    expected: tuple[str, ...]
    groups: tuple[tuple[str, ...], ...]

    @property
    def split(self) -> str:
        return split_of(self.text)


def load_queries(path: str | os.PathLike[str]) -> list[Query]:
    """Read ``[{"query": str, "expected": str | [str], "expected_groups"?: [[str]]}]``.

    Raises:
        ConfigError: ``path`` is not a path, or the file is missing, not JSON, or an item
            has the wrong shape.
    """
    data = files.read_json(path, what="queries file", error=ConfigError)
    return queries_from_data(data, os.fspath(path))


def queries_from_data(data: object, where: str) -> list[Query]:
    """Like ``load_queries`` for an already parsed JSON value; ``where`` names its source.

    Raises:
        ConfigError: an item has the wrong shape.
    """
    if not isinstance(data, list):
        raise ConfigError(
            f"{where}: expected a list of {{query, expected}} objects, got {type(data).__name__}"
        )
    return [_query(index, item, where) for index, item in enumerate(data)]


def _query(index: int, item: object, where: str) -> Query:
    if not isinstance(item, dict) or not isinstance(item.get("query"), str):
        raise ConfigError(f"{where}: item {index}: expected an object with a string 'query'")
    expected = item.get("expected", [])
    if isinstance(expected, str):
        expected = [expected]
    if not isinstance(expected, list) or not all(isinstance(e, str) for e in expected):
        raise ConfigError(
            f"{where}: item {index}: 'expected' must be a string or a list of strings"
        )
    raw_groups = item.get("expected_groups")
    if raw_groups is None:
        groups = tuple((e,) for e in expected)
    elif isinstance(raw_groups, list) and all(
        isinstance(g, list) and g and all(isinstance(e, str) for e in g) for g in raw_groups
    ):
        groups = tuple(tuple(g) for g in raw_groups)
    else:
        raise ConfigError(
            f"{where}: item {index}: 'expected_groups' must be a list of non-empty lists of strings"
        )
    return Query(text=item["query"], expected=tuple(expected), groups=groups)


def wilson(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score 95 % interval of a rate (``successes`` may be fractional for recall)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


@attrs.frozen(kw_only=True)
class Rate:
    value: float
    low: float
    high: float

    @classmethod
    def of(cls, successes: float, n: int) -> Rate:
        low, high = wilson(successes, n)
        return cls(value=successes / n if n else 0.0, low=low, high=high)


def evaluate(
    queries: Sequence[Query],
    rankings: Sequence[Sequence[str]],
    latencies_ms: Sequence[float] = (),
    *,
    ks: Iterable[int] = (1, 3, 5),
    misses: int = 20,
) -> dict[str, object]:
    """Score rankings against labelled queries.

    Queries with no expected tool are counted apart (``n_no_tool``), never as hits or misses.
    Returns a JSON-ready dict: ``n``, ``top1``, ``hit@k``, ``recall@k``, ``completeness@k``
    (each a value with its Wilson interval under ``ci``), ``mrr``, ``latency_ms`` and the first
    ``misses`` queries whose top 5 found no expected tool.
    """
    ks = sorted(set(ks) | {1, 5})
    scored = [(q, r) for q, r in zip(queries, rankings, strict=True) if q.groups]
    n = len(scored)
    hit = dict.fromkeys(ks, 0.0)
    recall = dict.fromkeys(ks, 0.0)
    complete = dict.fromkeys(ks, 0.0)
    reciprocal = 0.0
    missed: list[dict[str, object]] = []
    for query, ranking in scored:
        ranks = [_group_rank(group, ranking) for group in query.groups]
        found_at = min(ranks)
        if found_at < math.inf:
            reciprocal += 1.0 / (found_at + 1)
        for k in ks:
            inside = sum(rank < k for rank in ranks)
            hit[k] += inside > 0
            recall[k] += inside / len(ranks)
            complete[k] += inside == len(ranks)
        if found_at >= 5 and len(missed) < misses:
            missed.append(
                {"query": query.text, "expected": list(query.expected), "got": list(ranking[:5])}
            )
    report: dict[str, object] = {
        "n": n,
        "n_no_tool": len(queries) - n,
        "top1": hit[1] / n if n else 0.0,
    }
    ci: dict[str, list[float]] = {}
    for k in ks:
        for name, counts in (("hit", hit), ("recall", recall), ("completeness", complete)):
            rate = Rate.of(counts[k], n)
            report[f"{name}@{k}"] = rate.value
            ci[f"{name}@{k}"] = [rate.low, rate.high]
    report["mrr"] = reciprocal / n if n else 0.0
    report["ci"] = ci
    report["latency_ms"] = latency_summary(latencies_ms)
    report["misses"] = missed
    return report


def _group_rank(group: Sequence[str], ranking: Sequence[str]) -> float:
    positions = [ranking.index(name) for name in group if name in ranking]
    return min(positions) if positions else math.inf


def latency_summary(latencies_ms: Sequence[float]) -> dict[str, float]:
    if not latencies_ms:
        return {"p50": 0.0, "p95": 0.0, "mean": 0.0}
    values = np.asarray(latencies_ms, dtype=np.float64)
    return {
        "p50": float(np.percentile(values, 50)),
        "p95": float(np.percentile(values, 95)),
        "mean": float(values.mean()),
    }

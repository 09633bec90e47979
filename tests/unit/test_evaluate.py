"""Metrics, Wilson intervals, the dev/test split and query files (engine/_evaluate.py)."""

from __future__ import annotations

import hashlib
import json
import random
import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute import ConfigError
from toolroute._core.evaluate import TEST_SPLIT_BYTE, latency_summary, wilson
from toolroute.evaluate import Query, evaluate, load_queries, split_of

# -- split --------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=80))
def test_split_of_is_stable_and_follows_the_sha1_byte(text: str) -> None:
    split = split_of(text)
    assert split in {"dev", "test"}
    assert split_of(text) == split
    assert Query(text=text, expected=(), groups=()).split == split
    first = hashlib.sha1(text.encode("utf-8")).digest()[0]
    assert (split == "test") == (first < TEST_SPLIT_BYTE)


def test_split_of_known_values_never_change() -> None:
    # Pinned so a change to the split rule (which would leak test queries into dev) is caught.
    # First sha1 bytes: "" 0xda, "hello" 0xaa, "a" 0x86, "h" 0x27, "i" 0x04.
    assert [split_of(q) for q in ("", "hello", "a", "h", "i")] == [
        "dev",
        "dev",
        "dev",
        "test",
        "test",
    ]


def test_split_of_puts_about_a_fifth_in_test() -> None:
    rng = random.Random(20240601)
    alphabet = string.ascii_letters + string.digits + " éü漢字"
    queries = {"".join(rng.choices(alphabet, k=rng.randint(1, 40))) for _ in range(10_000)}
    share = sum(split_of(q) == "test" for q in queries) / len(queries)
    # Expected 52/256 = 0.203; the binomial standard deviation at n=10,000 is about 0.004.
    assert 0.185 < share < 0.222


# -- metrics ------------------------------------------------------------------------------------


def hand_made() -> tuple[list[Query], list[list[str]]]:
    queries = [
        # found first
        Query(text="q1", expected=("a",), groups=(("a",),)),
        # two tools, found at ranks 1 and 5 (0-based)
        Query(text="q2", expected=("a", "b"), groups=(("a",), ("b",))),
        # alternatives group (p or q) found at rank 1, group r at rank 4
        Query(text="q3", expected=("p", "q", "r"), groups=(("p", "q"), ("r",))),
        # nothing expected: counted apart
        Query(text="q4", expected=(), groups=()),
        # found only at rank 5, just outside the top 5
        Query(text="q5", expected=("z",), groups=(("z",),)),
    ]
    rankings = [
        ["a", "b", "c"],
        ["x", "a", "y", "v", "w", "b"],
        ["x", "q", "y", "v", "r", "p"],
        ["a"],
        ["a", "b", "c", "d", "e", "z"],
    ]
    return queries, rankings


def test_metrics_on_a_hand_made_set() -> None:
    queries, rankings = hand_made()
    report = evaluate(queries, rankings, [10.0, 20.0, 30.0])
    assert report["n"] == 4
    assert report["n_no_tool"] == 1
    # top1: only q1.
    assert report["top1"] == pytest.approx(1 / 4)
    assert report["hit@1"] == pytest.approx(1 / 4)
    # hit@3: q1 (rank 0), q2 (rank 1), q3 (rank 1).
    assert report["hit@3"] == pytest.approx(3 / 4)
    assert report["hit@5"] == pytest.approx(3 / 4)
    # recall@k: share of groups inside the top k, averaged over the 4 scored queries.
    assert report["recall@1"] == pytest.approx((1 + 0 + 0 + 0) / 4)
    assert report["recall@3"] == pytest.approx((1 + 1 / 2 + 1 / 2 + 0) / 4)
    assert report["recall@5"] == pytest.approx((1 + 1 / 2 + 2 / 2 + 0) / 4)
    # completeness@k: every group inside the top k.
    assert report["completeness@1"] == pytest.approx(1 / 4)
    assert report["completeness@3"] == pytest.approx(1 / 4)
    assert report["completeness@5"] == pytest.approx(2 / 4)
    # MRR over the best group rank (0-based 0, 1, 1, 5): 1, 1/2, 1/2, 1/6.
    assert report["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 2 + 1 / 6) / 4)
    assert report["misses"] == [
        {"query": "q5", "expected": ["z"], "got": ["a", "b", "c", "d", "e"]}
    ]
    assert report["latency_ms"] == {"p50": 20.0, "p95": pytest.approx(29.0), "mean": 20.0}


def test_metrics_carry_wilson_intervals() -> None:
    queries, rankings = hand_made()
    report = evaluate(queries, rankings)
    ci = report["ci"]
    assert isinstance(ci, dict)
    assert ci["hit@3"] == list(wilson(3, 4))
    assert ci["recall@5"] == list(wilson(2.5, 4))
    assert set(ci) == {f"{m}@{k}" for m in ("hit", "recall", "completeness") for k in (1, 3, 5)}


def test_extra_ks_are_reported_and_1_and_5_always_are() -> None:
    queries, rankings = hand_made()
    report = evaluate(queries, rankings, ks=(2,))
    assert {"hit@1", "hit@2", "hit@5"} <= set(report)
    assert "hit@3" not in report
    assert report["hit@2"] == pytest.approx(3 / 4)


def test_queries_without_expected_tools_are_never_hits_or_misses() -> None:
    queries = [
        Query(text="none", expected=(), groups=()),
        Query(text="also none", expected=(), groups=()),
    ]
    report = evaluate(queries, [["a"], []])
    assert report["n"] == 0
    assert report["n_no_tool"] == 2
    assert report["top1"] == 0.0
    assert report["hit@5"] == 0.0
    assert report["mrr"] == 0.0
    assert report["misses"] == []
    ci = report["ci"]
    assert isinstance(ci, dict)
    assert ci["hit@1"] == [0.0, 1.0]


def test_misses_are_capped() -> None:
    queries = [Query(text=f"q{i}", expected=("z",), groups=(("z",),)) for i in range(5)]
    report = evaluate(queries, [["a"]] * 5, misses=2)
    assert [m["query"] for m in report["misses"]] == ["q0", "q1"]  # type: ignore[attr-defined]
    assert report["mrr"] == 0.0  # never found: no reciprocal rank at all


def test_rankings_must_match_queries() -> None:
    queries, rankings = hand_made()
    with pytest.raises(ValueError, match="zip"):
        evaluate(queries, rankings[:-1])


def test_latency_summary_of_nothing_is_zero() -> None:
    assert latency_summary([]) == {"p50": 0.0, "p95": 0.0, "mean": 0.0}


# -- Wilson -------------------------------------------------------------------------------------


def test_wilson_half_of_ten() -> None:
    low, high = wilson(5, 10)
    assert low == pytest.approx(0.2366, abs=1e-4)
    assert high == pytest.approx(0.7634, abs=1e-4)


@pytest.mark.parametrize(
    ("successes", "n", "expected"),
    [
        (0, 10, (0.0, 0.2775)),
        (10, 10, (0.7225, 1.0)),
        (1, 10, (0.0179, 0.4042)),
        (81, 100, (0.7222, 0.8749)),
    ],
)
def test_wilson_known_values(successes: int, n: int, expected: tuple[float, float]) -> None:
    assert wilson(successes, n) == pytest.approx(expected, abs=1e-4)


def test_wilson_of_no_trials_is_the_whole_range() -> None:
    assert wilson(0, 0) == (0.0, 1.0)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 2000).flatmap(lambda n: st.tuples(st.floats(0, n), st.just(n))))
def test_wilson_interval_contains_the_rate_within_unit_range(pair: tuple[float, int]) -> None:
    successes, n = pair
    low, high = wilson(successes, n)
    assert 0.0 <= low <= successes / n + 1e-12
    assert successes / n - 1e-12 <= high <= 1.0


# -- load_queries -------------------------------------------------------------------------------


def write(tmp_path: Path, data: object, *, raw: str | None = None) -> Path:
    path = tmp_path / "queries.json"
    path.write_text(raw if raw is not None else json.dumps(data), encoding="utf-8")
    return path


def test_load_queries_reads_every_shape(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            {"query": "one", "expected": "a"},
            {"query": "many", "expected": ["a", "b"]},
            {"query": "groups", "expected": ["a", "b"], "expected_groups": [["a", "b"], ["c"]]},
            {"query": "none"},
        ],
    )
    assert load_queries(path) == [
        Query(text="one", expected=("a",), groups=(("a",),)),
        Query(text="many", expected=("a", "b"), groups=(("a",), ("b",))),
        Query(text="groups", expected=("a", "b"), groups=(("a", "b"), ("c",))),
        Query(text="none", expected=(), groups=()),
    ]


def test_load_queries_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read queries file .*absent\.json"):
        load_queries(tmp_path / "absent.json")


def test_load_queries_not_json(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_queries(write(tmp_path, None, raw="[{"))


def test_load_queries_not_a_list(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"expected a list of .*got dict"):
        load_queries(write(tmp_path, {"query": "x"}))


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("just a string", r"item 1: expected an object with a string 'query'"),
        ({"expected": "a"}, r"item 1: expected an object with a string 'query'"),
        ({"query": 5}, r"item 1: expected an object with a string 'query'"),
        ({"query": "q", "expected": 3}, r"item 1: 'expected' must be"),
        ({"query": "q", "expected": ["a", 1]}, r"item 1: 'expected' must be"),
        ({"query": "q", "expected_groups": [[]]}, r"item 1: 'expected_groups' must be"),
        ({"query": "q", "expected_groups": ["a"]}, r"item 1: 'expected_groups' must be"),
        ({"query": "q", "expected_groups": [["a", 2]]}, r"item 1: 'expected_groups' must be"),
    ],
)
def test_load_queries_names_the_bad_item(tmp_path: Path, item: object, message: str) -> None:
    path = write(tmp_path, [{"query": "fine", "expected": "a"}, item])
    with pytest.raises(ConfigError, match=message):
        load_queries(path)

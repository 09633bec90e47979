"""Ridge fit of static token rows from sufficient statistics (providers/_embedders/fast_tier/ridge.py)."""

from __future__ import annotations

import numpy as np
import pytest

from toolroute.providers._embedders.fast_tier.ridge import RidgeStats, SpaceMap, solve
from toolroute.providers._embedders.fast_tier.table import MappedRows, TokenTable

VOCAB, DIM = 40, 6


def _texts(seed: int, count: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 30, size=rng.integers(1, 8)).tolist() for _ in range(count)]


def _dense_solution(texts: list[list[int]], targets: np.ndarray, start: np.ndarray, ridge: float):
    a = np.zeros((len(texts), VOCAB))
    for row, ids in enumerate(texts):
        for token in ids:
            a[row, token] += 1.0 / len(ids)
    return np.linalg.solve(a.T @ a + ridge * np.eye(VOCAB), a.T @ targets + ridge * start)


def test_solution_matches_the_dense_ridge_solution() -> None:
    texts = _texts(1, 120)
    rng = np.random.default_rng(2)
    targets = rng.normal(size=(len(texts), DIM)).astype(np.float32)
    start = rng.normal(size=(VOCAB, DIM)).astype(np.float32)
    stats = RidgeStats(VOCAB, DIM)
    stats.add(texts, targets)
    tokens, rows = solve(stats.snapshot(), start, vocab_size=VOCAB, ridge=0.05, iterations=200)
    expected = _dense_solution(texts, targets, start, 0.05)
    np.testing.assert_allclose(rows, expected[tokens], atol=2e-3)


def test_tokens_never_seen_are_not_fitted() -> None:
    stats = RidgeStats(VOCAB, DIM)
    stats.add([[1, 2], [2, 3]], np.ones((2, DIM), dtype=np.float32))
    tokens, rows = solve(stats.snapshot(), np.zeros((VOCAB, DIM), np.float32), vocab_size=VOCAB,
                         ridge=0.1)  # fmt: skip
    assert sorted(tokens.tolist()) == [1, 2, 3]
    assert rows.shape == (3, DIM)


def test_adding_in_parts_equals_adding_at_once() -> None:
    texts = _texts(3, 50)
    targets = np.random.default_rng(4).normal(size=(50, DIM)).astype(np.float32)
    whole, parts = RidgeStats(VOCAB, DIM), RidgeStats(VOCAB, DIM)
    whole.add(texts, targets)
    parts.add(texts[:20], targets[:20])
    parts.add(texts[20:], targets[20:])
    one, two = whole.snapshot(), parts.snapshot()
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_allclose(one[1], two[1], rtol=1e-6)
    assert one[4] == two[4] == 50


def test_snapshot_and_restore_round_trip() -> None:
    stats = RidgeStats(VOCAB, DIM)
    stats.add(_texts(5, 30), np.ones((30, DIM), dtype=np.float32))
    snapshot = stats.snapshot()
    restored = RidgeStats.restore(VOCAB, *snapshot).snapshot()
    for saved, again in zip(snapshot[:4], restored[:4], strict=True):
        np.testing.assert_array_equal(saved, again)
    assert restored[4] == 30


def test_pairs_stay_within_the_bound_and_keep_the_diagonal() -> None:
    stats = RidgeStats(VOCAB, DIM, max_pairs=35)
    stats.add(_texts(6, 200), np.ones((200, DIM), dtype=np.float32))
    keys = stats.snapshot()[0]
    assert keys.size <= 35
    seen = set(stats.tokens)
    assert {int(k) // VOCAB for k in keys if k // VOCAB == k % VOCAB} == seen


def test_rejects_targets_of_the_wrong_shape_or_not_finite() -> None:
    stats = RidgeStats(VOCAB, DIM)
    with pytest.raises(ValueError, match="2 finite target rows of width 6"):
        stats.add([[1], [2]], np.ones((2, DIM + 1), dtype=np.float32))
    with pytest.raises(ValueError, match="finite"):
        stats.add([[1]], np.full((1, DIM), np.nan, dtype=np.float32))


def test_restore_rejects_inconsistent_arrays() -> None:
    with pytest.raises(ValueError, match="inconsistent"):
        RidgeStats.restore(
            VOCAB, np.array([VOCAB * VOCAB]), np.array([1.0], np.float32),
            np.array([1]), np.ones((1, DIM), np.float32), 1,
        )  # fmt: skip


def test_space_map_recovers_a_linear_map_and_leaves_start_alone_without_data() -> None:
    rng = np.random.default_rng(8)
    mapping = rng.normal(size=(DIM, DIM)).astype(np.float32)
    features = rng.normal(size=(200, DIM)).astype(np.float32)
    space = SpaceMap(DIM)
    assert space.mapping(1e-3) is None
    space.add(features[:120], features[:120] @ mapping)
    space.add(features[120:], features[120:] @ mapping)
    recovered = space.mapping(1e-6)
    assert recovered is not None
    np.testing.assert_allclose(recovered, mapping, atol=1e-3)
    again = SpaceMap.restore(*space.snapshot())
    np.testing.assert_array_equal(again.mapping(1e-6), recovered)


def test_a_token_table_reads_fitted_rows_and_maps_the_others_when_read() -> None:
    # Mean first, then the map (linear): the same vector as mapping every row first.
    rng = np.random.default_rng(9)
    distilled = rng.normal(size=(VOCAB, DIM)).astype(np.float32)
    mapping = rng.normal(size=(DIM, DIM)).astype(np.float32)
    tokens = np.array([1, 4, 6], dtype=np.int64)
    rows = rng.normal(size=(3, DIM)).astype(np.float32)
    table = TokenTable(MappedRows(distilled, mapping), tokens, rows)
    full = distilled @ mapping
    full[tokens] = rows
    np.testing.assert_allclose(table.dense(), full, rtol=1e-5, atol=1e-4)
    for ids in ([1, 4], [0, 2, 3], [1, 2, 2, 7], list(range(VOCAB))):
        np.testing.assert_allclose(table.mean(ids), full[ids].mean(axis=0), rtol=1e-5, atol=1e-4)
    assert table.mean([]).tolist() == [0.0] * DIM
    unmapped = TokenTable(MappedRows(distilled, None), tokens, rows)
    np.testing.assert_array_equal(unmapped[np.array([0, 4])], np.stack([distilled[0], rows[1]]))
    with pytest.raises(ValueError, match="rows of width"):
        TokenTable(MappedRows(distilled, None), tokens, rows[:2])


def test_space_map_restore_rejects_inconsistent_arrays() -> None:
    with pytest.raises(ValueError, match="inconsistent"):
        SpaceMap.restore(np.zeros((3, 3)), np.zeros((3, 4)))
    with pytest.raises(ValueError, match="not finite"):
        SpaceMap.restore(np.full((3, 3), np.nan), np.zeros((3, 3)))

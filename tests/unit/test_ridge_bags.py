"""The solver's two forms of ``G`` (bags learned in this process, pairs restored from disk)
give one solution, and a solve stops when asked (providers/_embedders/fast_tier/ridge.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute.providers._embedders.fast_tier import ridge as _ridge
from toolroute.providers._embedders.fast_tier.ridge import RidgeStats, RidgeSystem, Stopped, solve

VOCAB, DIM = 30, 4

texts_strategy = st.lists(
    st.lists(st.integers(0, VOCAB - 1), min_size=0, max_size=9), min_size=1, max_size=40
)


def _targets(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(count, DIM)).astype(np.float32)


@settings(max_examples=60, deadline=None)
@given(texts=texts_strategy, split=st.integers(0, 40), seed=st.integers(0, 2**16))
def test_bags_and_pairs_give_the_same_solution(texts: list[list[int]], split: int, seed: int) -> None:
    targets = _targets(len(texts), seed)
    start = np.random.default_rng(seed + 1).normal(size=(VOCAB, DIM)).astype(np.float32)
    bags = RidgeStats(VOCAB, DIM)
    bags.add(texts, targets)
    # The same texts, part restored from disk (pairs) and part learned since (bags).
    cut = min(split, len(texts))
    first = RidgeStats(VOCAB, DIM)
    first.add(texts[:cut], targets[:cut])
    mixed = RidgeStats.restore(VOCAB, *first.snapshot())
    mixed.add(texts[cut:], targets[cut:])
    options = {"vocab_size": VOCAB, "ridge": 0.05, "iterations": 60, "tolerance": 1e-7}
    reference = solve(bags.snapshot(), start, **options)  # every entry of G as pairs
    for system in (bags.system(), mixed.system()):
        tokens, rows = solve(system, start, **options)
        np.testing.assert_array_equal(tokens, reference[0])
        np.testing.assert_allclose(rows, reference[1], atol=2e-4)


def test_bags_past_their_bound_fold_into_pairs_with_the_same_solution(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts = [[1, 2, 3], [3, 4], [5, 5, 6, 7], [1, 7, 8, 9], [2, 9]]
    targets = _targets(len(texts), 3)
    start = np.zeros((VOCAB, DIM), dtype=np.float32)
    whole = RidgeStats(VOCAB, DIM)
    whole.add(texts, targets)
    monkeypatch.setattr(_ridge, "MAX_BAG_ENTRIES", 6)
    folded = RidgeStats(VOCAB, DIM)
    folded.add(texts[:3], targets[:3])  # 9 entries > 6: folded into pairs
    folded.add(texts[3:], targets[3:])
    system = folded.system()
    assert system.keys.size > 0
    assert system.bag_starts.tolist() == [0, 4, 6]  # only what came after the fold
    options = {"vocab_size": VOCAB, "ridge": 0.1, "iterations": 60, "tolerance": 1e-7}
    np.testing.assert_allclose(
        solve(system, start, **options)[1], solve(whole.system(), start, **options)[1], atol=1e-4
    )


def test_a_solve_asked_to_stop_raises_before_its_next_step() -> None:
    stats = RidgeStats(VOCAB, DIM)
    stats.add([[1, 2], [2, 3]], _targets(2, 0))
    asked: list[int] = []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) == 2

    with pytest.raises(Stopped):
        solve(stats.system(), np.zeros((VOCAB, DIM), np.float32), vocab_size=VOCAB, ridge=0.1,
              should_stop=should_stop)  # fmt: skip
    assert len(asked) == 2


def test_an_empty_system_solves_to_nothing() -> None:
    system = RidgeStats(VOCAB, DIM).system()
    assert isinstance(system, RidgeSystem)
    tokens, rows = solve(system, np.zeros((VOCAB, DIM), np.float32), vocab_size=VOCAB, ridge=0.1)
    assert tokens.size == 0
    assert rows.shape == (0, DIM)


def test_a_solve_stops_inside_a_long_product_not_only_between_steps() -> None:
    # 2,000 texts of 12 tokens: each product runs many chunks; with no iterations at all the
    # only chances to stop are inside the first product.
    rng = np.random.default_rng(5)
    vocab = 400
    stats = RidgeStats(vocab, DIM)
    stats.add(rng.integers(0, vocab, size=(2_000, 12)).tolist(), _targets(2_000, 6))
    start = np.zeros((vocab, DIM), np.float32)
    with pytest.raises(Stopped):
        solve(stats.system(), start, vocab_size=vocab, ridge=0.1, iterations=0,
              should_stop=lambda: True)  # fmt: skip
    tokens, _ = solve(stats.system(), start, vocab_size=vocab, ridge=0.1, iterations=0,
                      should_stop=lambda: False)  # fmt: skip
    assert tokens.size > 0

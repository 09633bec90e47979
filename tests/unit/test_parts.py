"""Long requests read by parts: splitting, packing and fusing (pure core)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from toolroute import Catalog, Tool, ToolIndex
from toolroute._core.recall.parts import (
    MAX_PARTS,
    PartsPlan,
    fused,
    pieces,
    plan_parts,
    request_parts,
    request_vectors,
)
from toolroute.testing import ScriptedEmbedder


def words(texts: Sequence[str]) -> list[int]:
    """A stand-in tokenizer: one word piece per word."""
    return [len(text.split()) for text in texts]


sentence = st.lists(
    st.text(alphabet="abcdefghij", min_size=1, max_size=6), min_size=1, max_size=12
).map(lambda ws: " ".join(ws) + ".")
request = st.lists(sentence, min_size=1, max_size=30).map(" ".join)


def test_a_request_the_model_reads_whole_is_one_part_without_counting() -> None:
    def refuses(texts: Sequence[str]) -> list[int]:
        raise AssertionError("a text shorter than the reach in characters needs no count")

    assert request_parts("book a flight", refuses, 126) == ("book a flight",)


def test_a_request_within_reach_is_returned_as_given() -> None:
    text = "find the weather in Paris and then book a table for two tonight"
    assert request_parts(text, words, 20) == (text,)


def test_steps_are_split_at_sentence_ends_numbers_lines_and_then() -> None:
    text = "Open the repo. 1. list issues 2) close stale ones\nthen email the team; done"
    assert pieces(text) == [
        "Open the repo.",
        "1. list issues",
        "2) close stale ones",
        "then email the team;",
        "done",
    ]


def test_a_long_request_is_packed_into_parts_that_fit() -> None:
    text = "one two three. four five six. seven eight nine. ten eleven twelve."
    assert request_parts(text, words, 6) == (
        "one two three. four five six.",
        "seven eight nine. ten eleven twelve.",
    )


def test_a_sentence_longer_than_the_reach_is_cut_at_words() -> None:
    text = " ".join(f"w{i}" for i in range(10))
    assert request_parts(text, words, 4) == ("w0 w1 w2 w3", "w4 w5 w6 w7", "w8 w9")


def test_parts_past_the_bound_are_not_read() -> None:
    text = " ".join(f"step {i} done." for i in range(40))
    parts = request_parts(text, words, 3, max_parts=MAX_PARTS)
    assert len(parts) == MAX_PARTS
    assert parts[0] == "step 0 done."


@pytest.mark.parametrize(("reach", "max_parts"), [(0, 4), (4, 0)])
def test_a_bound_below_one_is_a_clear_error(reach: int, max_parts: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        request_parts("a b c", words, reach, max_parts=max_parts)


@given(request, st.integers(1, 40), st.integers(1, 8))
def test_parts_fit_keep_the_words_in_order_and_drop_only_a_tail(
    text: str, reach: int, max_parts: int
) -> None:
    parts = request_parts(text, words, reach, max_parts=max_parts)
    assert 1 <= len(parts) <= max_parts
    if len(parts) > 1:
        assert all(n <= reach for n in words(parts))
    read = " ".join(parts).split()
    assert read == text.split()[: len(read)]
    if len(read) < len(text.split()):
        assert len(parts) == max_parts  # only the bound drops text


@settings(max_examples=50)
@given(st.lists(request, max_size=4), st.integers(1, 30))
def test_a_plan_folds_back_to_one_unit_row_per_request(texts: list[str], reach: int) -> None:
    plan = plan_parts(texts, words, reach)
    rng = np.random.default_rng(len(plan.texts))
    rows = rng.normal(size=(len(plan.texts), 8)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    folded = plan.fold(rows)
    assert folded.shape == (len(texts), 8)
    assert np.allclose(np.linalg.norm(folded, axis=1), 1.0, atol=1e-5)
    assert list(plan.owners) == sorted(plan.owners)
    for position in range(len(texts)):
        mine = [i for i, owner in enumerate(plan.owners) if owner == position]
        if len(mine) == 1:
            assert np.array_equal(folded[position], rows[mine[0]])


def test_an_unsplit_plan_returns_the_rows_as_they_came() -> None:
    plan = plan_parts(["a", "b"], words, 126)
    rows = np.eye(2, dtype=np.float32)
    assert not plan.split
    assert plan.fold(rows) is rows or np.array_equal(plan.fold(rows), rows)


def test_fused_weights_parts_by_the_weights_given() -> None:
    rows = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    got = fused(rows, [3, 1])
    expected = np.array([3.0, 1.0]) / np.sqrt(10.0)
    assert np.allclose(got, expected)


@settings(max_examples=50)
@given(
    hnp.arrays(
        np.float32, st.tuples(st.integers(1, 5), st.just(4)), elements=st.floats(-1, 1, width=32)
    )
)
def test_fused_is_a_finite_unit_row_even_when_parts_cancel(rows: np.ndarray) -> None:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    units = np.where(norms > 1e-3, rows / np.maximum(norms, 1e-12), np.eye(1, 4, dtype=np.float32))
    got = fused(units.astype(np.float32), [1] * len(units))
    assert np.isfinite(got).all()
    assert abs(float(np.linalg.norm(got)) - 1.0) < 1e-4


def test_parts_that_cancel_fall_back_to_the_first_part() -> None:
    rows = np.array([[1.0, 0.0], [-1.0, 0.0]], dtype=np.float32)
    assert np.array_equal(fused(rows, [1, 1]), rows[0])


def test_a_fold_of_the_wrong_shape_says_what_it_expected() -> None:
    plan = PartsPlan(("a", "b"), (0, 0), (1, 1), 1)
    with pytest.raises(ValueError, match=r"one vector per part \(2\), got shape \(3, 4\)"):
        plan.fold(np.zeros((3, 4), dtype=np.float32))


def test_fused_refuses_mismatched_weights() -> None:
    with pytest.raises(ValueError, match="one vector per part"):
        fused(np.zeros((2, 3), dtype=np.float32), [1])
    with pytest.raises(ValueError, match="positive"):
        fused(np.eye(2, dtype=np.float32), [1, 0])


class WindowEmbedder(ScriptedEmbedder):
    """Reads only the first ``reach`` words of a text, as MiniLM reads 128 word pieces."""

    def __init__(self, reach: int, *, broken_count: bool = False) -> None:
        super().__init__(dim=256)
        self.reach = reach
        self.broken_count = broken_count

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        if self.broken_count:
            raise RuntimeError("tokenizer gone")
        return words(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return super().embed([" ".join(t.split()[: self.reach]) for t in texts])


FILLER = "Please read the weekly weather forecast for the city of Lyon carefully. " * 3
LONG = FILLER + "Then send an email invoice reminder to the customer."
CATALOG = Catalog(
    [
        Tool("weather_forecast", "weather_forecast", "weekly weather forecast for a city"),
        Tool("send_email", "send_email", "send an email invoice reminder to a customer"),
    ]
)


def test_a_step_past_the_models_reach_reaches_the_ranking() -> None:
    reading = ToolIndex(CATALOG, embedder=WindowEmbedder(12), cache=None)
    ranking = reading.search(LONG, k=2, strategy="semantic")
    part_vectors = reading.embedder.embed(list(request_parts(LONG, words, 12)))  # type: ignore[union-attr]
    assert len(part_vectors) > 1
    email = ranking.tool_ids.index("send_email")
    # Read whole, the request's vector holds the email step: it scores the email tool above
    # what the first window alone (all weather) gives it.
    first_window = reading.embedder.embed([LONG])[0]  # type: ignore[union-attr]
    email_row = reading.vectors.matrix[1]  # type: ignore[union-attr]
    assert ranking.scores[email] > float(first_window @ email_row) + 0.05
    assert ranking.outcome.value == "applied"


def test_a_failing_token_count_reads_the_request_as_before() -> None:
    embedder = WindowEmbedder(12, broken_count=True)
    got = request_vectors(embedder, [LONG, "short one"])
    assert np.array_equal(got, embedder.embed([LONG, "short one"]))


def test_parts_of_several_requests_go_to_the_model_in_one_call() -> None:
    embedder = WindowEmbedder(12)
    got = request_vectors(embedder, ["short one", LONG, "another short"])
    assert got.shape == (3, 256)
    assert len(embedder.calls) == 1
    assert embedder.calls[0] == 2 + len(request_parts(LONG, words, 12))


def test_an_embedder_that_cannot_count_reads_as_before() -> None:
    embedder = ScriptedEmbedder(dim=32)
    got = request_vectors(embedder, [LONG])
    assert embedder.texts == [LONG]
    assert got.shape == (1, 32)


def test_a_wrong_count_of_part_vectors_degrades_the_selection_to_keyword_only() -> None:
    index = ToolIndex(CATALOG, embedder=WindowEmbedder(12), cache=None)
    broken = WindowEmbedder(12)
    broken.faults = ["wrong_count"]
    degraded = index.with_vectors(broken, index.vectors.matrix).search(LONG, k=2)  # type: ignore[union-attr]
    assert degraded.outcome.value == "degraded"
    assert "embedder failed" in degraded.reason


def test_the_engines_query_path_reads_long_requests_by_parts() -> None:
    from toolroute._runtime.recall import query_vectors

    embedder = WindowEmbedder(12)
    got = query_vectors(embedder, [LONG], 256)
    plan = plan_parts([LONG], words, 12)
    assert plan.split
    assert np.allclose(got, plan.fold(WindowEmbedder(12).embed(list(plan.texts))))

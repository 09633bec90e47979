"""BM25, TF-IDF cosine and coverage against hand-computed values (engine/_keyword.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute._core.recall.keyword import KeywordIndex

# Three documents of lengths 2, 3 and 4 (average length 3).
DOCS = [
    ["read", "file"],
    ["write", "file", "file"],
    ["list", "dir", "read", "dir"],
]
N = 3
K1, B = 1.2, 0.75

# BM25 (Lucene): idf = ln(1 + (N - df + 0.5) / (df + 0.5)).
IDF_DF2 = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))  # "read", "file": ln(1.6)
IDF_DF1 = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))  # "write", "list", "dir": ln(8/3)
# Length normalisation k1 * (1 - b + b * len / avglen) for lengths 2, 3 and 4.
NORM_LEN2 = 1.2 * (0.25 + 0.75 * 2 / 3)  # 0.9
NORM_LEN3 = 1.2 * (0.25 + 0.75 * 3 / 3)  # 1.2
NORM_LEN4 = 1.2 * (0.25 + 0.75 * 4 / 3)  # 1.5

# TF-IDF: idf = ln((N + 1) / (df + 1)) + 1.
TFIDF_DF2 = math.log(4 / 3) + 1
TFIDF_DF1 = math.log(4 / 2) + 1

REL = 1e-5  # the index stores float32


@pytest.fixture
def index() -> KeywordIndex:
    return KeywordIndex(DOCS)


def test_idf_tables_match_the_formulas(index: KeywordIndex) -> None:
    assert index.size == N
    assert index.bm25_idf[index.vocabulary["read"]] == pytest.approx(math.log(1.6))
    assert index.bm25_idf[index.vocabulary["dir"]] == pytest.approx(math.log(8 / 3))
    assert index.tfidf_idf[index.vocabulary["file"]] == pytest.approx(TFIDF_DF2)
    assert index.tfidf_idf[index.vocabulary["write"]] == pytest.approx(TFIDF_DF1)


def test_bm25_matches_hand_computed_scores(index: KeywordIndex) -> None:
    scores = index.bm25(["read", "file"])
    # doc 0: "read" tf 1 + "file" tf 1, length 2
    doc0 = IDF_DF2 * 1 * 2.2 / (1 + NORM_LEN2) + IDF_DF2 * 1 * 2.2 / (1 + NORM_LEN2)
    # doc 1: "file" tf 2, length 3
    doc1 = IDF_DF2 * 2 * 2.2 / (2 + NORM_LEN3)
    # doc 2: "read" tf 1, length 4
    doc2 = IDF_DF2 * 1 * 2.2 / (1 + NORM_LEN4)
    assert scores.dtype == np.float32
    assert scores.tolist() == pytest.approx([doc0, doc1, doc2], rel=REL)
    assert doc0 == pytest.approx(2 * math.log(1.6) * 2.2 / 1.9)


def test_bm25_rare_repeated_term_in_a_long_document(index: KeywordIndex) -> None:
    # "dir" occurs twice in doc 2 only (length 4).
    expected = IDF_DF1 * 2 * 2.2 / (2 + NORM_LEN4)
    assert index.bm25(["dir"]).tolist() == pytest.approx([0.0, 0.0, expected], rel=REL)
    assert expected == pytest.approx(math.log(8 / 3) * 4.4 / 3.5)


def test_bm25_counts_a_repeated_query_term_once(index: KeywordIndex) -> None:
    np.testing.assert_array_equal(index.bm25(["read", "read", "read"]), index.bm25(["read"]))


def test_bm25_respects_k1_and_b() -> None:
    plain = KeywordIndex(DOCS, k1=2.0, b=0.0)  # no length normalisation
    # doc 1: "file" tf 2 -> idf * 2 * 3 / (2 + 2)
    assert plain.bm25(["file"])[1] == pytest.approx(math.log(1.6) * 2 * 3.0 / 4.0, rel=REL)


def test_tfidf_matches_hand_computed_cosines(index: KeywordIndex) -> None:
    scores = index.tfidf(["read", "file"])
    a, c = TFIDF_DF2, TFIDF_DF1
    # Query vector: read a/2, file a/2 -> unit (1/sqrt2, 1/sqrt2).
    # doc 0: read a/2, file a/2 -> the same direction.
    doc0 = 1.0
    # doc 1: write c/3, file 2a/3.
    doc1 = (1 / math.sqrt(2)) * (2 * a) / math.sqrt(c * c + 4 * a * a)
    # doc 2: list c/4, dir 2c/4, read a/4.
    doc2 = (1 / math.sqrt(2)) * a / math.sqrt(c * c + 4 * c * c + a * a)
    assert scores.tolist() == pytest.approx([doc0, doc1, doc2], rel=REL)


def test_tfidf_uses_only_known_query_terms(index: KeywordIndex) -> None:
    a, c = TFIDF_DF2, TFIDF_DF1
    scores = index.tfidf(["file", "unknownword", "zzz"])
    expected = [1 / math.sqrt(2), 2 * a / math.sqrt(c * c + 4 * a * a), 0.0]
    assert scores.tolist() == pytest.approx(expected, rel=REL)
    np.testing.assert_array_equal(scores, index.tfidf(["file"]))


def test_tfidf_counts_repeated_query_terms() -> None:
    index = KeywordIndex([["x"], ["y"], ["x", "y"]])
    a = math.log(4 / 3) + 1  # df 2 for both terms
    # query x twice, y once: weights 2a/3, a/3 -> unit (2, 1)/sqrt5; doc 2 is unit (1, 1)/sqrt2
    scores = index.tfidf(["x", "x", "y"])
    assert a > 0
    assert scores.tolist() == pytest.approx(
        [2 / math.sqrt(5), 1 / math.sqrt(5), 3 / math.sqrt(10)], rel=REL
    )


def test_coverage_is_the_share_of_query_idf_mass(index: KeywordIndex) -> None:
    scores = index.coverage(["read", "dir"])
    total = math.log(1.6) + math.log(8 / 3)
    assert scores.tolist() == pytest.approx([math.log(1.6) / total, 0.0, 1.0], rel=REL)


def test_coverage_counts_unknown_terms_at_the_highest_idf(index: KeywordIndex) -> None:
    scores = index.coverage(["read", "zzz"])
    unseen = math.log(1 + (N + 0.5) / 0.5)  # ln(8)
    share = math.log(1.6) / (math.log(1.6) + unseen)
    assert scores.tolist() == pytest.approx([share, 0.0, share], rel=REL)
    assert unseen > IDF_DF1 > IDF_DF2


def test_coverage_of_only_unknown_terms_is_zero(index: KeywordIndex) -> None:
    assert index.coverage(["zzz", "qqq"]).tolist() == [0.0, 0.0, 0.0]


def test_coverage_counts_a_repeated_term_once(index: KeywordIndex) -> None:
    np.testing.assert_array_equal(
        index.coverage(["read", "read", "dir"]), index.coverage(["read", "dir"])
    )


def test_unknown_query_terms_score_zero_everywhere(index: KeywordIndex) -> None:
    assert index.bm25(["nothing", "here"]).tolist() == [0.0, 0.0, 0.0]
    assert index.tfidf(["nothing", "here"]).tolist() == [0.0, 0.0, 0.0]


def test_empty_query_gives_zeros(index: KeywordIndex) -> None:
    for scores in (index.bm25([]), index.tfidf([]), index.coverage([])):
        assert scores.dtype == np.float32
        assert scores.tolist() == [0.0, 0.0, 0.0]


def test_empty_corpus_gives_empty_scores() -> None:
    index = KeywordIndex([])
    assert index.size == 0
    for scores in (index.bm25(["a"]), index.tfidf(["a"]), index.coverage(["a"])):
        assert scores.shape == (0,)


def test_all_documents_empty_give_zeros() -> None:
    index = KeywordIndex([[], []])
    for scores in (index.bm25(["a"]), index.tfidf(["a"]), index.coverage(["a"])):
        assert scores.tolist() == [0.0, 0.0]


def test_an_empty_document_scores_zero_and_counts_in_the_average() -> None:
    index = KeywordIndex([[], ["a"]])
    idf = math.log(1 + (2 - 1 + 0.5) / (1 + 0.5))  # ln(2)
    norm = 1.2 * (0.25 + 0.75 * 1 / 0.5)  # average length 0.5
    assert index.bm25(["a"]).tolist() == pytest.approx([0.0, idf * 2.2 / (1 + norm)], rel=REL)
    assert index.tfidf(["a"]).tolist() == pytest.approx([0.0, 1.0], rel=REL)
    assert index.coverage(["a"]).tolist() == pytest.approx([0.0, 1.0], rel=REL)


words = st.sampled_from(["a", "b", "c", "d", "e"])


@settings(max_examples=80, deadline=None)
@given(
    docs=st.lists(st.lists(words, max_size=6), min_size=1, max_size=6),
    query=st.lists(st.sampled_from(["a", "b", "c", "d", "e", "unknown"]), max_size=5),
)
def test_coverage_and_tfidf_stay_in_unit_range_and_bm25_is_non_negative(
    docs: list[list[str]], query: list[str]
) -> None:
    index = KeywordIndex(docs)
    coverage = index.coverage(query)
    tfidf = index.tfidf(query)
    bm25 = index.bm25(query)
    eps = 1e-5
    assert ((coverage >= 0) & (coverage <= 1 + eps)).all()
    assert ((tfidf >= 0) & (tfidf <= 1 + eps)).all()
    assert (bm25 >= 0).all()
    # A document scores on any measure exactly when it shares a term with the query.
    for doc, tokens in enumerate(docs):
        shares = bool(set(tokens) & set(query))
        assert (bm25[doc] > 0) == shares
        assert (coverage[doc] > 0) == shares


@settings(max_examples=80, deadline=None)
@given(
    docs=st.lists(st.lists(words, max_size=6), min_size=1, max_size=6),
    names=st.lists(st.lists(words, max_size=3), min_size=6, max_size=6),
    query=st.lists(st.sampled_from(["a", "b", "c", "d", "e", "unknown"]), max_size=5),
    data=st.data(),
)
def test_what_an_explanation_reads_of_some_rows_equals_the_whole_catalogues(
    docs: list[list[str]], names: list[list[str]], query: list[str], data: st.DataObject
) -> None:
    index = KeywordIndex(docs, names=names[: len(docs)])
    rows = data.draw(st.lists(st.integers(0, len(docs) - 1), unique=True))
    whole = index.name_coverage(query)
    assert index.name_coverage_of(query, rows).tolist() == pytest.approx(whole[rows].tolist())
    matched = index.matched_terms(query, rows)
    for row, terms in zip(rows, matched, strict=True):
        assert terms == [t for t in dict.fromkeys(query) if t in docs[row]]

"""Keyword recall: BM25 and TF-IDF cosine over one inverted index, in numpy."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Scores = npt.NDArray[np.float32]


class KeywordIndex:
    """An inverted index over pre-tokenised documents, built once.

    Each posting stores a precomputed BM25 weight and a TF-IDF weight (already divided by the
    document's norm), so scoring a query is a handful of vector additions.

    BM25 follows Lucene: ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))`` and
    ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avglen))``; a query term counts once.
    TF-IDF is the cosine of ``tf/len * idf`` vectors with ``idf = ln((N + 1) / (df + 1)) + 1``;
    a query uses only the terms the index knows.
    """

    def __init__(
        self,
        documents: Sequence[Sequence[str]],
        *,
        names: Sequence[Sequence[str]] | None = None,
        k1: float = 1.2,
        b: float = 0.75,
    ):
        self.size = len(documents)
        vocabulary: dict[str, int] = {}
        term_ids: list[int] = []
        doc_ids: list[int] = []
        counts: list[int] = []
        lengths = np.zeros(self.size, dtype=np.float64)
        for doc, tokens in enumerate(documents):
            lengths[doc] = len(tokens)
            for term, count in Counter(tokens).items():
                term_ids.append(vocabulary.setdefault(term, len(vocabulary)))
                doc_ids.append(doc)
                counts.append(count)
        self.vocabulary = vocabulary
        terms = np.asarray(term_ids, dtype=np.int64)
        order = np.argsort(terms, kind="stable")  # postings grouped by term, docs ascending
        self._docs = np.asarray(doc_ids, dtype=np.int32)[order]
        tf = np.asarray(counts, dtype=np.float64)[order]
        terms = terms[order]
        df = np.bincount(terms, minlength=len(vocabulary)).astype(np.float64)
        self._indptr = np.concatenate(([0], np.cumsum(df))).astype(np.int64)
        n = float(self.size)
        self.bm25_idf = np.log1p((n - df + 0.5) / (df + 0.5))
        self.tfidf_idf = np.log((n + 1.0) / (df + 1.0)) + 1.0

        doc_len = lengths[self._docs]
        average = float(lengths.mean()) if self.size and lengths.mean() > 0 else 1.0
        norm = tf + k1 * (1.0 - b + b * doc_len / average)
        self._bm25 = (self.bm25_idf[terms] * tf * (k1 + 1.0) / norm).astype(np.float32)

        tfidf = tf / np.maximum(doc_len, 1.0) * self.tfidf_idf[terms]
        doc_norm = np.sqrt(np.bincount(self._docs, weights=tfidf * tfidf, minlength=self.size))
        self._tfidf = (tfidf / np.maximum(doc_norm[self._docs], 1e-12)).astype(np.float32)
        self._names = _NamePostings(names or [[] for _ in documents], vocabulary, self.bm25_idf)
        # Plain ints: slicing with them is cheaper than with numpy scalars on the hot path.
        self._bounds: list[int] = self._indptr.tolist()
        self._idf_list: list[float] = self.bm25_idf.tolist()

    def document_frequency(self, token: str) -> int:
        """How many documents hold ``token`` (0: none, or a token the index never saw)."""
        term = self.vocabulary.get(token)
        return 0 if term is None else self._bounds[term + 1] - self._bounds[term]

    def bm25(self, tokens: Sequence[str]) -> Scores:
        """BM25 score of every document (0 where no query term occurs)."""
        vocabulary, bounds = self.vocabulary, self._bounds
        spans = [
            (bounds[tid], bounds[tid + 1])
            for term in dict.fromkeys(tokens)
            if (tid := vocabulary.get(term)) is not None
        ]
        if not spans:
            return np.zeros(self.size, dtype=np.float32)
        if len(spans) == 1:
            (start, end), scores = spans[0], np.zeros(self.size, dtype=np.float32)
            scores[self._docs[start:end]] = self._bm25[start:end]
            return scores
        # One bincount sums every term's postings at once.
        docs = np.concatenate([self._docs[a:b] for a, b in spans])
        weights = np.concatenate([self._bm25[a:b] for a, b in spans])
        return np.bincount(docs, weights=weights, minlength=self.size).astype(np.float32)

    def coverage(self, tokens: Sequence[str]) -> Scores:
        """Share of the query's IDF mass each document contains, in [0, 1].

        A query term the index has never seen counts with the highest possible IDF, so a
        document matching one generic word of a long request scores near 0.
        """
        terms = dict.fromkeys(tokens)
        if not terms:
            return np.zeros(self.size, dtype=np.float32)
        vocabulary, bounds, idf = self.vocabulary, self._bounds, self._idf_list
        unseen = math.log1p((self.size + 0.5) / 0.5)
        known = [tid for term in terms if (tid := vocabulary.get(term)) is not None]
        total = sum(idf[tid] for tid in known) + unseen * (len(terms) - len(known))
        if not known:
            return np.zeros(self.size, dtype=np.float32)
        # One bincount over every term's postings (a long request has dozens of terms: one
        # numpy call per term was most of a select's time).
        spans = [(bounds[tid], bounds[tid + 1]) for tid in known]
        docs = np.concatenate([self._docs[a:b] for a, b in spans])
        weights = np.repeat([idf[tid] for tid in known], [b - a for a, b in spans])
        scores = np.bincount(docs, weights=weights, minlength=self.size) / total
        return scores.astype(np.float32)

    def query_mass(self, tokens: Sequence[str]) -> float:
        """The query's IDF mass, as ``coverage`` divides by it (unseen terms count high)."""
        unseen = math.log1p((self.size + 0.5) / 0.5)
        return sum(
            unseen if (tid := self.vocabulary.get(term)) is None else float(self.bm25_idf[tid])
            for term in dict.fromkeys(tokens)
        )

    def matched_terms(self, tokens: Sequence[str], rows: Sequence[int]) -> list[list[str]]:
        """The query terms each document of ``rows`` contains, in query order.

        Reads only the postings of the query's terms, in one pass over all of them, so
        explanations stay cheap on large catalogues.
        """
        found: list[list[str]] = [[] for _ in rows]
        vocabulary, bounds = self.vocabulary, self._bounds
        terms = [t for t in dict.fromkeys(tokens) if t in vocabulary]
        if not rows or not terms:
            return found
        spans = [(bounds[vocabulary[t]], bounds[vocabulary[t] + 1]) for t in terms]
        docs = np.concatenate([self._docs[a:b] for a, b in spans])
        owner = np.repeat(np.arange(len(terms)), [b - a for a, b in spans])
        hit = _rows_mask(self.size, rows)[docs]  # a mask: np.isin sorts, ~5x slower here
        where = {row: i for i, row in enumerate(rows)}
        for doc, term in zip(docs[hit].tolist(), owner[hit].tolist(), strict=True):
            found[where[doc]].append(terms[term])
        return found

    def name_coverage_of(self, tokens: Sequence[str], rows: Sequence[int]) -> Scores:
        """``name_coverage`` of ``rows`` only (what an explanation reads), in their order."""
        return self._names.coverage_of(tokens, self.vocabulary, rows)

    def name_coverage(self, tokens: Sequence[str]) -> Scores:
        """Share of each tool name's IDF mass that the query contains, in [0, 1].

        "generate_word_cloud_chart" scores 0.75 for a request that mentions a word cloud
        chart, however long the request is: long multi-step requests name each tool they
        need in a few words, which ``coverage`` (relative to the whole request) dilutes.
        """
        return self._names.coverage(tokens, self.vocabulary)

    def tfidf(self, tokens: Sequence[str]) -> Scores:
        """TF-IDF cosine of every document with the query, in [0, 1]."""
        scores = np.zeros(self.size, dtype=np.float32)
        known = Counter(t for t in tokens if t in self.vocabulary)
        if not known:
            return scores
        length = sum(known.values())
        weights = {
            self.vocabulary[t]: c / length * float(self.tfidf_idf[self.vocabulary[t]])
            for t, c in known.items()
        }
        query_norm = math.sqrt(sum(w * w for w in weights.values()))
        for tid, weight in weights.items():
            start, end = self._indptr[tid], self._indptr[tid + 1]
            scores[self._docs[start:end]] += self._tfidf[start:end] * np.float32(
                weight / query_norm
            )
        return scores


class _NamePostings:
    """Which tools have a term in their name, weighted by the term's IDF in the full index."""

    def __init__(
        self,
        names: Sequence[Sequence[str]],
        vocabulary: dict[str, int],
        idf: npt.NDArray[np.float64],
    ) -> None:
        self.size = len(names)
        postings: dict[int, list[int]] = {}
        totals = np.zeros(self.size, dtype=np.float64)
        self._terms: list[tuple[int, ...]] = []  # each name's term ids (explanations read it)
        for doc, tokens in enumerate(names):
            terms = [
                tid for term in dict.fromkeys(tokens) if (tid := vocabulary.get(term)) is not None
            ]
            self._terms.append(tuple(terms))
            for tid in terms:
                postings.setdefault(tid, []).append(doc)
                totals[doc] += idf[tid]
        self._postings = {tid: np.asarray(docs, dtype=np.int32) for tid, docs in postings.items()}
        self._idf = idf
        self._inverse_totals = np.where(totals > 0, 1.0 / np.maximum(totals, 1e-12), 0.0).astype(
            np.float32
        )

    def coverage_of(
        self, tokens: Sequence[str], vocabulary: dict[str, int], rows: Sequence[int]
    ) -> Scores:
        wanted = {tid for term in tokens if (tid := vocabulary.get(term)) is not None}
        idf, inverse = self._idf, self._inverse_totals
        return np.array(
            [
                np.float32(sum(float(idf[t]) for t in self._terms[row] if t in wanted))
                * inverse[row]
                for row in rows
            ],
            dtype=np.float32,
        )

    def coverage(self, tokens: Sequence[str], vocabulary: dict[str, int]) -> Scores:
        scores = np.zeros(self.size, dtype=np.float32)
        for term in dict.fromkeys(tokens):
            tid = vocabulary.get(term)
            docs = self._postings.get(tid) if tid is not None else None
            if docs is not None:
                scores[docs] += np.float32(self._idf[tid])
        scores *= self._inverse_totals
        return scores


def _rows_mask(size: int, rows: Sequence[int] | npt.NDArray[np.intp]) -> npt.NDArray[np.bool_]:
    mask = np.zeros(size, dtype=bool)
    mask[np.asarray(rows, dtype=np.intp)] = True
    return mask

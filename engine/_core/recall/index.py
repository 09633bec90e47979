"""``RecallIndex``: synchronous recall and selection over one catalogue, from given vectors.

Pure: it loads no model and reads no cache. It may hold an ``Embedder`` and call it (to embed
the tools once and each query); the public ``toolroute.ToolIndex`` adds the default embedder
and the disk cache on top of it.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Literal, Self

import numpy as np
import numpy.typing as npt

from ..catalog.catalog import Catalog
from ..errors import ConfigError
from ..outcome import Outcome
from ..protocols import Embedder
from ..select.arguments import count, query_text
from ..select.policy import Policy, select
from ..select.selection import Ranking, Selection
from ..select.toolsets import ToolSet
from ..text import embedding_text, keyword_document, split_identifier, tokenize
from .fusion import COVERAGE_WEIGHT, NAME_WEIGHT, fuse
from .keyword import KeywordIndex
from .vectors import (
    INT8_FROM,
    Indices,
    Int8Index,
    Int8ProductFactory,
    Scores,
    VectorIndex,
    int8_index,
    top_k,
)

STRATEGIES = ("keyword", "semantic", "combined")
Strategy = Literal["keyword", "semantic", "combined"]
Progress = Callable[[int, int], None]


class RecallIndex:
    """Keyword and embedding recall over a catalogue, plus the selection policy.

    Built once: the keyword index at once, tool embeddings from the embedder (in steps of a
    few model batches). If the embedder fails while building or while embedding a query,
    recall falls back to keyword-only and the result says so (``outcome = degraded``) —
    nothing raises.

    Args:
        catalog: the tools.
        embedder: an ``Embedder``, or ``None`` for keyword-only recall.
        strategy: the default strategy: ``combined`` with an embedder, else ``keyword``.
        progress: called as ``progress(done, total)`` while tools are embedded.
        extra_text: recall-only text per tool id (enrichment's phrasings).
        int8_product: builds an int8 product for the quantised tool matrix; with it,
            catalogues of at least ``int8_from`` tools score semantic and combined recall
            from an ``Int8Index`` (int8 candidates, exact fp32 re-scoring: the same results
            as fp32, faster). ``None``: always fp32.
        int8_from: the catalogue size from which ``int8_product`` is used.

    Raises:
        ConfigError: an unknown strategy, or ``semantic``/``combined`` without an embedder.

    **Fail-open:** an embedder that raises, or returns vectors of the wrong shape, while the
    tools are embedded leaves a keyword-only index whose results are ``degraded`` with the
    reason in ``degraded_reason``.
    """

    def __init__(
        self,
        catalog: Catalog,
        *,
        embedder: Embedder | None = None,
        strategy: Strategy | None = None,
        progress: Progress | None = None,
        extra_text: Mapping[str, str] | None = None,
        int8_product: Int8ProductFactory | None = None,
        int8_from: int = INT8_FROM,
    ) -> None:
        started = time.perf_counter()
        if not isinstance(catalog, Catalog):
            raise ConfigError(f"expected a Catalog, got {type(catalog).__name__}")
        self.catalog = catalog
        self._ids = catalog.ids
        #: Recall-only text per tool id (enrichment's phrasings); tools stay as given.
        self.extra_text: Mapping[str, str] = dict(extra_text or {})
        self.keyword = KeywordIndex(
            [keyword_document(tool, self.extra_text.get(tool.id, "")) for tool in catalog],
            names=[tokenize(" ".join(split_identifier(tool.name))) for tool in catalog],
        )
        self.embedder: Embedder | None = embedder
        if strategy is None:
            strategy = "combined" if self.embedder is not None else "keyword"
        self.strategy: Strategy = _check_strategy(strategy, has_embedder=self.embedder is not None)
        self.vectors: VectorIndex | None = None
        self._int8_product, self._int8_from = int8_product, int8_from
        #: The int8 copy scoring a large catalogue (``None``: fp32 scores everything).
        self.int8: Int8Index | None = None
        #: Why embeddings are unavailable, when they are.
        self.degraded_reason = ""
        if self.embedder is not None:
            self._embed_catalog(self.embedder, progress)
        self.build_s = time.perf_counter() - started

    def with_vectors(self, embedder: Embedder, vectors: npt.NDArray[np.float32]) -> Self:
        """A copy that shares this index's catalogue and keyword index and uses ``vectors``
        (one row per tool, from ``embedder``) for semantic and combined recall.

        This is how a runtime warms up in the background: serve a keyword-only index at once,
        embed the tools elsewhere (``embed_with_cache`` in the stores layer), then swap in
        the copy.

        Raises:
            ConfigError: ``vectors`` does not have one row per tool.
        """
        array = np.asarray(vectors, dtype=np.float32)
        if array.ndim != 2 or array.shape[0] != len(self.catalog):
            raise ConfigError(
                f"expected one vector per tool, shape ({len(self.catalog)}, dim); got {array.shape}"
            )
        clone = copy.copy(self)
        clone.embedder = embedder
        clone._use_vectors(array)
        clone.degraded_reason = ""
        if clone.strategy == "keyword" and self.embedder is None:
            clone.strategy = "combined"
        return clone

    def without_vectors(self, reason: str) -> Self:
        """A keyword-only copy whose selections report ``reason`` (snapshots never change)."""
        clone = copy.copy(self)
        clone.vectors, clone.int8 = None, None
        clone.degraded_reason = reason
        return clone

    def embedding_texts(self) -> list[str]:
        """What each tool is embedded from, in catalogue order (with its extra text)."""
        return [embedding_text(tool, self.extra_text.get(tool.id, "")) for tool in self.catalog]

    def _embed_catalog(self, embedder: Embedder, progress: Progress | None) -> None:
        try:
            vectors = self.tool_vectors(embedder, self.embedding_texts(), progress)
        except Exception as exc:  # any embedder failure degrades to keyword-only recall
            self.degraded_reason = f"embedder failed while indexing: {brief(exc)}"
            return
        self._use_vectors(vectors)

    def _use_vectors(self, vectors: npt.NDArray[np.float32]) -> None:
        self.vectors = VectorIndex(vectors)
        self.int8 = int8_index(self.vectors, self._int8_product, self._int8_from)

    def tool_vectors(
        self, embedder: Embedder, texts: Sequence[str], progress: Progress | None
    ) -> npt.NDArray[np.float32]:
        """The tools' vectors, one row per text: here straight from the embedder.

        A subclass with a cache overrides this; whatever it raises degrades the index.
        """
        vectors = np.zeros((len(texts), int(embedder.dim)), dtype=np.float32)
        for _ in embed_into(embedder, texts, vectors, np.arange(len(texts)), progress):
            pass
        return vectors

    # -- recall -------------------------------------------------------------------------------

    def search(self, query: str, k: int = 10, *, strategy: Strategy | None = None) -> Ranking:
        """The ``k`` best tools for ``query``, before any selection policy.

        Raises:
            ConfigError: an unknown strategy, or ``semantic``/``combined`` on an index
                without an embedder.

        **Fail-open:** an embedder that fails on the query (raises, or returns a vector of the
        wrong width, NaN or zero) gives a keyword-only ranking, ``degraded`` with the reason;
        an empty query gives an empty ranking, ``skipped``.
        """
        query, k = query_text(query), count(k, "k", 0)
        strategy = self._strategy(strategy)
        query_vector, reason = None, self.degraded_reason
        if strategy != "keyword" and self.vectors is not None and query.strip():
            query_vector, reason = self._embed_query(query)
        return self._rank(query, k, strategy, query_vector, reason)

    def search_many(
        self, queries: Sequence[str], k: int = 10, *, strategy: Strategy | None = None
    ) -> list[Ranking]:
        """``search`` for many queries, embedding them in batches.

        Raises:
            ConfigError: as ``search``.

        **Fail-open:** when the embedder fails on the batch, every query is ranked by keyword
        only, ``degraded`` with the reason.
        """
        queries = [query_text(q, f"queries[{i}]") for i, q in enumerate(queries)]
        k = count(k, "k", 0)
        strategy = self._strategy(strategy)
        vectors: list[npt.NDArray[np.float32] | None] = [None] * len(queries)
        reason = self.degraded_reason
        asked = [i for i, q in enumerate(queries) if q.strip()]  # empty queries are skipped
        if strategy != "keyword" and self.vectors is not None and asked:
            try:
                for i, vector in zip(
                    asked, self.query_vectors([queries[i] for i in asked]), strict=True
                ):
                    vectors[i] = vector
            except Exception as exc:  # degrade every query to keyword-only
                reason = f"embedder failed on the queries: {brief(exc)}"
        return [
            self._rank(q, k, strategy, v, reason) for q, v in zip(queries, vectors, strict=True)
        ]

    def _embed_query(self, query: str) -> tuple[npt.NDArray[np.float32] | None, str]:
        try:
            return self.query_vectors([query])[0], ""
        except Exception as exc:  # the selection degrades; it never raises
            return None, f"embedder failed on the query: {brief(exc)}"

    def query_vectors(self, queries: Sequence[str]) -> npt.NDArray[np.float32]:
        """Query vectors from the index's embedder, checked: one row per query, the index's
        width, finite, non-zero.

        Raises:
            ValueError: the vectors fail a check (whatever the embedder raises, too); the
                callers here turn either into a keyword-only, ``degraded`` result.
        """
        assert self.embedder is not None
        assert self.vectors is not None
        return checked_query_vectors(
            self.embedder.embed(list(queries)), len(queries), self.vectors.dim
        )

    def rank(
        self,
        query: str,
        query_vector: npt.NDArray[np.float32] | None,
        k: int = 10,
        *,
        strategy: Strategy | None = None,
        reason: str = "",
    ) -> Ranking:
        """``search`` with a query vector computed elsewhere (``None``: keyword-only, degraded
        with ``reason`` unless the strategy is ``keyword``). The vector must be a finite unit
        row of the index's width; a runtime that micro-batches query embeddings uses this.
        Unlike ``search``, asking a keyword-only index for ``semantic`` or ``combined``
        degrades instead of raising: a runtime asks before its embeddings are ready.

        Raises:
            ConfigError: an unknown strategy.

        **Fail-open:** no vector, or an index without vectors, gives a keyword-only ranking,
        ``degraded`` with ``reason``.
        """
        chosen = self.strategy if strategy is None else _check_strategy(strategy, has_embedder=True)
        return self._rank(query, k, chosen, query_vector, reason)

    def _rank(
        self,
        query: str,
        k: int,
        strategy: Strategy,
        query_vector: npt.NDArray[np.float32] | None,
        reason: str,
    ) -> Ranking:
        if not query.strip():
            return Ranking(
                tool_ids=(),
                scores=(),
                strategy=strategy,
                outcome=Outcome.SKIPPED,
                reason="empty query",
            )
        tokens = tokenize(query)
        outcome = Outcome.APPLIED
        if strategy != "keyword" and (query_vector is None or self.vectors is None):
            strategy, outcome = "keyword", Outcome.DEGRADED
        if strategy == "keyword":
            scores = self.keyword.bm25(tokens)
            picked = top_k(scores, k, floor=0.0)
            picked_scores, baseline = scores[picked], 0.0
        else:
            assert query_vector is not None
            picked, picked_scores, baseline = self._scored(tokens, query_vector, k, strategy)
        return Ranking(
            tool_ids=tuple(self._ids[i] for i in picked),
            scores=tuple(float(score) for score in picked_scores),
            strategy=strategy,
            outcome=outcome,
            reason=reason if outcome is Outcome.DEGRADED else "",
            baseline=baseline,
        )

    def _scored(
        self,
        tokens: list[str],
        query_vector: npt.NDArray[np.float32],
        k: int,
        strategy: Strategy,
    ) -> tuple[Indices, Scores, float]:
        """The ``k`` best rows by cosine (``semantic``) or fused score, their scores and the
        catalogue's mean score (the policy's baseline)."""
        assert self.vectors is not None
        if self.int8 is not None:
            # The same rows and scores as below: int8 picks candidates, fp32 re-scores them.
            bonus = None
            if strategy == "combined":
                coverage = self.keyword.coverage(tokens)
                names = self.keyword.name_coverage(tokens)
                # ``fuse``'s terms, in its order, so the sums round exactly as it rounds them.
                bonus = (
                    np.float32(COVERAGE_WEIGHT) * coverage * coverage,
                    np.float32(NAME_WEIGHT) * names * names,
                )
            picked, picked_scores = self.int8.ranked(query_vector, k, bonus)
            return picked, picked_scores, self.int8.baseline(query_vector, bonus)
        cosine = self.vectors.scores(query_vector)
        if strategy == "semantic":
            scores = cosine
        else:
            scores = fuse(cosine, self.keyword.coverage(tokens), self.keyword.name_coverage(tokens))
        picked = top_k(scores, k)
        finite = scores[np.isfinite(scores)]
        return picked, scores[picked], float(finite.mean()) if finite.size else 0.0

    # -- selection ----------------------------------------------------------------------------

    def select(
        self,
        query: str,
        *,
        strategy: Strategy | None = None,
        max_tools: int = 5,
        threshold: float | None = None,
        adaptive: bool = True,
        always_active: Sequence[str] = (),
        related: Mapping[str, Sequence[str]] | None = None,
        max_related: int = 5,
        tool_sets: Sequence[ToolSet] = (),
        forced_sets: Sequence[str] = (),
        policy: Policy | None = None,
    ) -> Selection:
        """The tools to show the model for ``query``.

        Args:
            query: the user's request (or the text extracted from a conversation).
            strategy: ``keyword``, ``semantic`` or ``combined``; the index default otherwise.
            policy: a prepared ``Policy``; when given, the policy keyword arguments are ignored.
            Other arguments build the ``Policy`` (see its attributes).

        Returns:
            A ``Selection``; ``outcome`` is ``degraded`` when the embedder failed and recall
            fell back to keywords, ``skipped`` for an empty query (then only
            ``always_active`` tools are returned).

        Raises:
            ConfigError: ``query`` is not a string, or an option is out of range, of the
                wrong type (``max_tools=2.5``, ``threshold=nan``) or names a tool not in the
                catalogue.

        **Fail-open:** an embedder failure is never an exception here: recall falls back to
        keywords, the ``threshold`` is not applied (it is on the strategy's scale) and the
        selection is ``degraded`` with the reason.
        """
        started = time.perf_counter()
        query = query_text(query)
        if policy is None:
            try:
                policy = Policy(
                    max_tools=max_tools,
                    threshold=threshold,
                    adaptive=adaptive,
                    always_active=always_active,
                    related=related or {},
                    max_related=max_related,
                    tool_sets=tool_sets,
                    forced_sets=forced_sets,
                )
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"invalid selection option: {exc}") from None
        policy.check_ids(self.catalog)
        # Tool sets read the scores of more than the picks: anchors may rank just below them.
        wanted = max(policy.max_tools, 1) * (3 if policy.tool_sets else 1)
        ranking = self.search(query, wanted, strategy=strategy)
        return select(ranking, policy, started)

    def _strategy(self, strategy: Strategy | None) -> Strategy:
        if strategy is None:
            return self.strategy
        return _check_strategy(strategy, has_embedder=self.embedder is not None)


def embed_into(
    embedder: Embedder,
    texts: Sequence[str],
    vectors: npt.NDArray[np.float32],
    rows: npt.NDArray[np.intp],
    progress: Progress | None = None,
    step: int | None = None,
) -> Iterator[int]:
    """Embed ``texts[rows]`` into ``vectors[rows]`` a step at a time.

    Yields the number of rows done after each step, so a caller can keep what was embedded
    when a later step raises (whatever the embedder raises, or ``ValueError`` for vectors of
    the wrong shape). ``progress(done, total)`` is called before the first step and after
    each one.
    """
    total = len(rows)
    if progress is not None:
        progress(0, total)
    # A few model batches between progress reports, unless the caller says otherwise.
    step = step or max(1, int(embedder.max_batch)) * 4
    for start in range(0, total, step):
        chunk = rows[start : start + step]
        vectors[chunk] = checked_vectors(embedder.embed([texts[i] for i in chunk]), len(chunk))
        done = min(start + step, total)
        if progress is not None:
            progress(done, total)
        yield done


def checked_vectors(vectors: object, count: int) -> npt.NDArray[np.float32]:
    """``vectors`` as a float32 matrix of ``count`` rows, or ``ValueError``."""
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2 or array.shape[0] != count:
        raise ValueError(f"embedder returned shape {array.shape}, expected ({count}, dim)")
    return array


def checked_query_vectors(vectors: object, count: int, dim: int) -> npt.NDArray[np.float32]:
    """Request vectors as a float32 matrix: ``count`` rows of width ``dim``, finite and
    non-zero, or ``ValueError`` saying which check failed."""
    array = checked_vectors(vectors, count)
    if array.shape[1] != dim:
        raise ValueError(
            f"embedder returned vectors of width {array.shape[1]}, the tool vectors have width {dim}"
        )
    if not np.isfinite(array).all():
        raise ValueError("embedder returned NaN or infinite values")
    if not np.abs(array).sum(axis=1).all():
        raise ValueError("embedder returned a zero vector (no evidence) for the query")
    return array


def _check_strategy(strategy: str, *, has_embedder: bool) -> Strategy:
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if strategy != "keyword" and not has_embedder:
        raise ConfigError(f"strategy {strategy!r} needs an embedder; this index has none")
    return strategy  # type: ignore[return-value]


def brief(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:200]}"

"""``ToolIndex``: synchronous recall and selection over one catalogue, for scripts and the CLI."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from .._stores.embedding_cache import EmbeddingCache, default_cache_dir
from .catalog import Catalog
from .errors import ConfigError
from .fusion import fuse
from .keyword import KeywordIndex
from .outcome import Outcome
from .policy import Policy, select
from .selection import Ranking, Selection
from .stores import EmbeddingStore
from .text import embedding_text, keyword_document, split_identifier, tokenize
from .toolsets import ToolSet
from .vectors import VectorIndex, top_k

if TYPE_CHECKING:
    from ..providers import Embedder

STRATEGIES = ("keyword", "semantic", "combined")
Strategy = Literal["keyword", "semantic", "combined"]
Progress = Callable[[int, int], None]

_DEFAULT: object = object()


class ToolIndex:
    """Keyword and embedding recall over a catalogue, plus the selection policy.

    Built once: the keyword index at once, tool embeddings from the disk cache or the embedder.
    If the embedder fails while building or while embedding a query, recall falls back to
    keyword-only and the result says so (``outcome = degraded``) — nothing raises.

    Args:
        catalog: the tools.
        embedder: an ``Embedder``; by default the embedded offline MiniLM model; ``None`` for
            keyword-only.
        cache: an ``EmbeddingCache``, a directory, or ``None`` for no disk cache; by default
            the user cache directory (``$TOOLROUTE_CACHE_DIR`` overrides it).
        strategy: the default strategy: ``combined`` with an embedder, else ``keyword``.
        progress: called as ``progress(done, total)`` while tools are embedded.

    Raises:
        ConfigError: an unknown strategy, or ``semantic``/``combined`` without an embedder.
    """

    def __init__(
        self,
        catalog: Catalog,
        *,
        embedder: Embedder | object | None = _DEFAULT,
        cache: EmbeddingCache | str | os.PathLike[str] | object | None = _DEFAULT,
        strategy: Strategy | None = None,
        progress: Progress | None = None,
        extra_text: Mapping[str, str] | None = None,
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
        if embedder is _DEFAULT:
            from ..providers import default_embedder

            embedder = default_embedder()
        self.embedder: Embedder | None = embedder  # type: ignore[assignment]
        if strategy is None:
            strategy = "combined" if self.embedder is not None else "keyword"
        self.strategy: Strategy = _check_strategy(strategy, has_embedder=self.embedder is not None)
        self.vectors: VectorIndex | None = None
        #: Why embeddings are unavailable, when they are.
        self.degraded_reason = ""
        if self.embedder is not None:
            self._embed_catalog(self.embedder, _open_cache(cache), progress)
        self.build_s = time.perf_counter() - started

    def with_vectors(self, embedder: Embedder, vectors: npt.NDArray[np.float32]) -> ToolIndex:
        """A copy that shares this index's catalogue and keyword index and uses ``vectors``
        (one row per tool, from ``embedder``) for semantic and combined recall.

        This is how a runtime warms up in the background: serve a keyword-only index at once,
        embed the tools elsewhere (``embed_with_cache``), then swap in the copy.

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
        clone.vectors = VectorIndex(array)
        clone.degraded_reason = ""
        if clone.strategy == "keyword" and self.embedder is None:
            clone.strategy = "combined"
        return clone

    def without_vectors(self, reason: str) -> ToolIndex:
        """A keyword-only copy whose selections report ``reason`` (snapshots never change)."""
        clone = copy.copy(self)
        clone.vectors = None
        clone.degraded_reason = reason
        return clone

    def embedding_texts(self) -> list[str]:
        """What each tool is embedded from, in catalogue order (with its extra text)."""
        return [embedding_text(tool, self.extra_text.get(tool.id, "")) for tool in self.catalog]

    def _embed_catalog(
        self, embedder: Embedder, cache: EmbeddingCache | None, progress: Progress | None
    ) -> None:
        texts = self.embedding_texts()
        try:
            vectors = embed_with_cache(embedder, texts, cache, progress)
        except Exception as exc:  # any embedder failure degrades to keyword-only recall
            self.degraded_reason = f"embedder failed while indexing: {brief(exc)}"
            return
        self.vectors = VectorIndex(vectors)

    # -- recall -------------------------------------------------------------------------------

    def search(self, query: str, k: int = 10, *, strategy: Strategy | None = None) -> Ranking:
        """The ``k`` best tools for ``query``, before any selection policy."""
        strategy = self._strategy(strategy)
        query_vector, reason = None, self.degraded_reason
        if strategy != "keyword" and self.vectors is not None and query.strip():
            query_vector, reason = self._embed_query(query)
        return self._rank(query, k, strategy, query_vector, reason)

    def search_many(
        self, queries: Sequence[str], k: int = 10, *, strategy: Strategy | None = None
    ) -> list[Ranking]:
        """``search`` for many queries, embedding them in batches."""
        strategy = self._strategy(strategy)
        vectors: list[npt.NDArray[np.float32] | None] = [None] * len(queries)
        reason = self.degraded_reason
        asked = [i for i, q in enumerate(queries) if q.strip()]  # empty queries are skipped
        if strategy != "keyword" and self.vectors is not None and asked:
            try:
                for i, vector in zip(
                    asked, self._query_vectors([queries[i] for i in asked]), strict=True
                ):
                    vectors[i] = vector
            except Exception as exc:  # degrade every query to keyword-only
                reason = f"embedder failed on the queries: {brief(exc)}"
        return [
            self._rank(q, k, strategy, v, reason) for q, v in zip(queries, vectors, strict=True)
        ]

    def _embed_query(self, query: str) -> tuple[npt.NDArray[np.float32] | None, str]:
        try:
            return self._query_vectors([query])[0], ""
        except Exception as exc:  # the selection degrades; it never raises
            return None, f"embedder failed on the query: {brief(exc)}"

    def _query_vectors(self, queries: Sequence[str]) -> npt.NDArray[np.float32]:
        """Query vectors, checked: one row per query, the index's width, finite, non-zero."""
        assert self.embedder is not None
        assert self.vectors is not None
        vectors = _checked(self.embedder.embed(list(queries)), len(queries))
        if vectors.shape[1] != self.vectors.dim:
            raise ValueError(
                f"embedder returned vectors of width {vectors.shape[1]}, "
                f"the tool vectors have width {self.vectors.dim}"
            )
        if not np.isfinite(vectors).all():
            raise ValueError("embedder returned NaN or infinite values")
        if not np.abs(vectors).sum(axis=1).all():
            raise ValueError("embedder returned a zero vector (no evidence) for the query")
        return vectors

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
        degrades instead of raising: a runtime asks before its embeddings are ready."""
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
            return Ranking((), (), strategy, Outcome.SKIPPED, "empty query")
        tokens = tokenize(query)
        outcome = Outcome.APPLIED
        if strategy != "keyword" and (query_vector is None or self.vectors is None):
            strategy, outcome = "keyword", Outcome.DEGRADED
        if strategy == "keyword":
            scores = self.keyword.bm25(tokens)
            picked = top_k(scores, k, floor=0.0)
            baseline = 0.0
        else:
            assert self.vectors is not None
            assert query_vector is not None
            cosine = self.vectors.scores(query_vector)
            if strategy == "semantic":
                scores = cosine
            else:
                scores = fuse(
                    cosine, self.keyword.coverage(tokens), self.keyword.name_coverage(tokens)
                )
            picked = top_k(scores, k)
            finite = scores[np.isfinite(scores)]
            baseline = float(finite.mean()) if finite.size else 0.0
        return Ranking(
            tuple(self._ids[i] for i in picked),
            tuple(float(scores[i]) for i in picked),
            strategy,
            outcome,
            reason if outcome is Outcome.DEGRADED else "",
            baseline,
        )

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
            ConfigError: an option is out of range or names a tool not in the catalogue.
        """
        started = time.perf_counter()
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


def embed_with_cache(
    embedder: Embedder,
    texts: Sequence[str],
    cache: EmbeddingStore | None,
    progress: Progress | None = None,
    step: int | None = None,
) -> npt.NDArray[np.float32]:
    """Vectors of ``texts``: cached ones from disk, the rest from the embedder (then cached).

    Raises whatever the embedder raises; a broken cache only costs re-embedding.
    """
    dim = int(embedder.dim)
    if cache is not None:
        vectors, found = cache.get_many(embedder.identity, dim, texts)
    else:
        vectors, found = np.zeros((len(texts), dim), dtype=np.float32), np.zeros(len(texts), bool)
    missing = np.flatnonzero(~found)
    total = len(missing)
    if progress is not None:
        progress(0, total)
    # A few model batches between progress reports, unless the caller says otherwise.
    step = step or max(1, int(embedder.max_batch)) * 4
    done = 0
    try:
        for done in range(0, total, step):
            chunk = missing[done : done + step]
            vectors[chunk] = _checked(embedder.embed([texts[i] for i in chunk]), len(chunk))
            if progress is not None:
                progress(min(done + step, total), total)
        done = total
    finally:
        # One write at the end (or at a failure, keeping what was embedded): the cache
        # merges whole files, so writing per chunk would cost quadratic I/O.
        if cache is not None and done:
            kept = missing[:done]
            cache.put_many(embedder.identity, [texts[i] for i in kept], vectors[kept])
    return vectors


def _checked(vectors: object, count: int) -> npt.NDArray[np.float32]:
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2 or array.shape[0] != count:
        raise ValueError(f"embedder returned shape {array.shape}, expected ({count}, dim)")
    return array


def _open_cache(cache: object) -> EmbeddingCache | None:
    if cache is _DEFAULT:
        return EmbeddingCache(default_cache_dir())
    if cache is None or isinstance(cache, EmbeddingCache):
        return cache
    if isinstance(cache, str | os.PathLike):
        return EmbeddingCache(cache)
    raise ConfigError(
        f"cache must be an EmbeddingCache, a directory or None, got {type(cache).__name__}"
    )


def _check_strategy(strategy: str, *, has_embedder: bool) -> Strategy:
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if strategy != "keyword" and not has_embedder:
        raise ConfigError(f"strategy {strategy!r} needs an embedder; this index has none")
    return strategy  # type: ignore[return-value]


def brief(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:200]}"

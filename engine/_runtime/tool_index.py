"""``ToolIndex``: the sync API: the core's recall index with an embedder and the disk cache.

The core's ``RecallIndex`` loads nothing, reads no disk and holds no model: it ranks the
vectors it is given. ``ToolIndex`` is what scripts and the CLI use: ``ToolIndex(catalog)``
loads the embedded MiniLM model, keeps tool vectors in the user cache directory, embeds each
request itself and hands the vectors to the core's index, as the public API always did.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from .._core.catalog.catalog import Catalog
from .._core.errors import ConfigError
from .._core.protocols import Embedder, Int8Kernel, check_provider
from .._core.recall.index import Progress, RecallIndex, brief, checked_query_vectors, embed_into
from .._core.recall.keyword import KeywordIndex
from .._core.recall.learned import example_texts, grouped, learned_scores
from .._core.recall.parts import request_vectors
from .._core.recall.vectors import INT8_FROM, Int8Index, VectorIndex
from .._core.select.access import ToolAccess, request_access
from .._core.select.arguments import count, query_text, served_catalog
from .._core.select.explain import check_known, explain_ask
from .._core.select.plan import (
    RequestVector,
    Verdict,
    chosen_strategy,
    needs_request_vector,
    policy_from_options,
)
from .._core.select.policy import Policy
from .._core.select.selection import Ranking, Selection, Strategy
from .._core.select.toolsets import ToolSet
from .._stores.embedding_cache import EmbeddingCache, default_cache_dir, embed_with_cache
from .bundled_model import bundled_or_unavailable
from .cascade import FastFirst

_DEFAULT: object = object()


def served_index(
    catalog: Catalog,
    *,
    extra_text: Mapping[str, str] | None = None,
    int8_product: Int8Kernel | object | None = _DEFAULT,
    int8_from: int = INT8_FROM,
) -> RecallIndex:
    """A keyword-only ``RecallIndex`` with the default int8 product (what the engine
    serves until warm-up hands it vectors)."""
    return RecallIndex.build(
        catalog,
        extra_text=extra_text,
        int8_product=_int8_product(int8_product),
        int8_from=int8_from,
    )


def _int8_product(given: Int8Kernel | object | None) -> Int8Kernel | None:
    if given is _DEFAULT:
        from ..providers import OnnxInt8Kernel

        return OnnxInt8Kernel()
    return given  # type: ignore[return-value]


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
        strategy: the default ``Strategy`` (or its name): ``combined`` with an embedder,
            else ``keyword``.
        progress: called as ``progress(done, total)`` while tools are embedded.
        extra_text: recall-only text per tool id (enrichment's phrasings).
        int8_product: the ``Int8Kernel`` that scores catalogues of at least ``int8_from``
            tools (int8 candidates re-scored exactly: fp32's results, ~4x faster at 100k
            tools), checked against exact products when the index is built; by default
            ``OnnxInt8Kernel()``; ``None``: fp32 only.
        int8_from: the catalogue size from which the int8 product is used.
        cascade: ask the embedder's fast tier first and the full model only when the fast
            tier's ``combined`` ranking is unsure (its best fused score below a floor chosen
            on the dev splits); the fast tier is fitted on the catalogue when the index is
            built (seconds, once: it is kept in ``cache``) and ignored for an embedder
            without one.
        correct_spelling: rank a request with its misspelled words corrected (a word one
            edit from a word of the tools' text, and no English word itself, is read as that
            word); ``False`` ranks requests as written.

    Raises:
        ConfigError: ``catalog`` is not a ``Catalog`` or holds no tools, ``embedder`` is not
            an ``Embedder`` (a name, say), an unknown strategy,
            ``semantic``/``combined`` without an embedder, or a ``cache`` of another type.
        ModelIntegrityError: the default model's files fail their checksum.

    **Fail-open:** an embedder failure while the tools are embedded leaves a keyword-only
    index whose results are ``degraded`` with the reason; an unusable cache costs only
    re-embedding (a ``CacheWarning``), never an error.
    """

    def __init__(
        self,
        catalog: Catalog,
        *,
        embedder: Embedder | object | None = _DEFAULT,
        cache: EmbeddingCache | str | os.PathLike[str] | object | None = _DEFAULT,
        strategy: Strategy | str | None = None,
        progress: Progress | None = None,
        extra_text: Mapping[str, str] | None = None,
        int8_product: Int8Kernel | object | None = _DEFAULT,
        int8_from: int = INT8_FROM,
        cascade: bool = False,
        correct_spelling: bool = True,
    ) -> None:
        started = time.perf_counter()
        self._spelling = correct_spelling
        served_catalog(catalog)  # an index over no tools could never select one
        if embedder is not _DEFAULT:
            check_provider(embedder, "embedder", Embedder)
        self._cache = _open_cache(cache) if embedder is not None else None
        if embedder is _DEFAULT:
            embedder = bundled_or_unavailable()
        self.embedder: Embedder | None = embedder  # type: ignore[assignment]
        self.strategy: Strategy = chosen_strategy(
            strategy, has_embedder=self.embedder is not None, strict=True
        )
        #: The core index this one embeds for (frozen: a change makes a new one).
        self.recall = served_index(
            catalog, extra_text=extra_text, int8_product=int8_product, int8_from=int8_from
        )
        self._fast: FastFirst | None = None
        if self.embedder is not None:
            self.recall = self._embedded(self.recall, self.embedder, progress)
            if cascade:
                directory = None if self._cache is None else str(self._cache.directory)
                self._fast = FastFirst.open(self.embedder, self.recall, directory)
        self.build_s = time.perf_counter() - started

    def _embedded(
        self, index: RecallIndex, embedder: Embedder, progress: Progress | None
    ) -> RecallIndex:
        try:
            vectors = self.tool_vectors(embedder, index.embedding_texts(), progress)
            index = index.with_vectors(vectors)
        except Exception as exc:  # any embedder failure degrades to keyword-only recall
            return index.without_vectors(f"embedder failed while indexing: {brief(exc)}")
        examples = example_texts(index.catalog)
        if not examples:
            return index
        try:  # the tools' example requests lift them (``learned``); without them, as before
            found = self.tool_vectors(embedder, [text for _, text in examples], None)
        except Exception:
            return index
        return index.with_learned(learned_scores(index.ids, vectors, grouped(examples, found)))

    def tool_vectors(
        self, embedder: Embedder, texts: Sequence[str], progress: Progress | None
    ) -> npt.NDArray[np.float32]:
        """The tools' vectors: cached ones from disk, the rest from the embedder."""
        if self._cache is None:
            vectors = np.zeros((len(texts), int(embedder.dim)), dtype=np.float32)
            for _ in embed_into(embedder, texts, vectors, np.arange(len(texts)), progress):
                pass
            return vectors
        return embed_with_cache(embedder, texts, self._cache, progress)

    # -- the core index's state ---------------------------------------------------------------

    @property
    def catalog(self) -> Catalog:
        return self.recall.catalog

    @property
    def keyword(self) -> KeywordIndex:
        return self.recall.keyword

    @property
    def extra_text(self) -> Mapping[str, str]:
        """Recall-only text per tool id (enrichment's phrasings); tools stay as given."""
        return self.recall.extra_text

    @property
    def vectors(self) -> VectorIndex | None:
        return self.recall.vectors

    @property
    def int8(self) -> Int8Index | None:
        """The int8 copy scoring a large catalogue (``None``: fp32 scores everything)."""
        return self.recall.int8

    @property
    def degraded_reason(self) -> str:
        """Why embeddings are unavailable, when they are."""
        return self.recall.degraded_reason

    @property
    def vectors_verdict(self) -> Verdict:
        """Whether the index has tool vectors (``applied``), or why not (``degraded``)."""
        return self.recall.vectors_verdict

    def embedding_texts(self) -> list[str]:
        """What each tool is embedded from, in catalogue order (with its extra text)."""
        return self.recall.embedding_texts()

    def with_vectors(self, embedder: Embedder, vectors: npt.NDArray[np.float32]) -> ToolIndex:
        """A copy that uses ``vectors`` (one row per tool, from ``embedder``) for semantic and
        combined recall, and ``embedder`` for requests.

        Raises:
            ConfigError: ``vectors`` does not have one row per tool.
        """
        clone = copy.copy(self)
        clone.recall = self.recall.with_vectors(vectors)
        clone.embedder = embedder
        clone._fast = None  # fitted to the old model's tool vectors
        if clone.strategy is Strategy.KEYWORD and self.embedder is None:
            clone.strategy = Strategy.COMBINED
        return clone

    def without_vectors(self, reason: str) -> ToolIndex:
        """A keyword-only copy whose selections report ``reason``."""
        clone = copy.copy(self)
        clone.recall = self.recall.without_vectors(reason)
        return clone

    # -- recall: embed the request here, rank in the core -------------------------------------

    def search(self, query: str, k: int = 10, *, strategy: Strategy | str | None = None) -> Ranking:
        """The ``k`` best tools for ``query``, before any selection policy.

        Raises:
            ConfigError: an unknown strategy, or ``semantic``/``combined`` on an index
                without an embedder.

        **Fail-open:** an embedder that fails on the query (raises, or returns a vector of the
        wrong width, NaN or zero) gives a keyword-only ranking, ``degraded`` with the reason;
        an empty query gives an empty ranking, ``skipped``.
        """
        query, k = self._spelled(query_text(query)), count(k, "k", 0)
        chosen = self._strategy(strategy)
        return self.recall.ranked(query, self._request(query, chosen), k, chosen)

    def search_many(
        self, queries: Sequence[str], k: int = 10, *, strategy: Strategy | str | None = None
    ) -> list[Ranking]:
        """``search`` for many queries, embedding them in batches.

        Raises:
            ConfigError: as ``search``.

        **Fail-open:** when the embedder fails on the batch, every query is ranked by keyword
        only, ``degraded`` with the reason.
        """
        queries = [self._spelled(query_text(q, f"queries[{i}]")) for i, q in enumerate(queries)]
        k = count(k, "k", 0)
        chosen = self._strategy(strategy)
        tools = self.recall.vectors_verdict
        requests: list[RequestVector | None] = [None] * len(queries)
        asked = [
            i for i, q in enumerate(queries) if needs_request_vector(q, chosen, tool_vectors=tools)
        ]
        if asked and self._fast is not None:
            standing = self._fast.standing(self.recall, [queries[i] for i in asked], chosen)
            for i, stood in zip(asked, standing, strict=True):
                requests[i] = stood
            asked = [i for i in asked if requests[i] is None]
        if asked and self.embedder is not None:
            try:
                vectors = self.query_vectors([queries[i] for i in asked])
            except Exception as exc:  # degrade every query to keyword-only
                failed = RequestVector.missing(f"embedder failed on the queries: {brief(exc)}")
                requests = [failed] * len(queries)
            else:
                for i, vector in zip(asked, vectors, strict=True):
                    requests[i] = RequestVector.full(vector)
        return [
            self.recall.ranked(q, request, k, chosen)
            for q, request in zip(queries, requests, strict=True)
        ]

    def _request(self, query: str, strategy: Strategy) -> RequestVector | None:
        """The request's vector from the embedder, or why there is none (``None``: ranking
        it needs none)."""
        tools = self.recall.vectors_verdict
        if self.embedder is None or not needs_request_vector(query, strategy, tool_vectors=tools):
            return None
        if self._fast is not None:
            stood = self._fast.standing(self.recall, [query], strategy)[0]
            if stood is not None:
                return stood
        try:
            return RequestVector.full(self.query_vectors([query])[0])
        except Exception as exc:  # the selection degrades; it never raises
            return RequestVector.missing(f"embedder failed on the query: {brief(exc)}")

    def ranked(
        self, query: str, request: RequestVector | None, k: int, strategy: Strategy
    ) -> Ranking:
        """As ``RecallIndex.ranked``: rank with a request vector obtained elsewhere."""
        return self.recall.ranked(query, request, k, strategy)

    def query_vectors(self, queries: Sequence[str]) -> npt.NDArray[np.float32]:
        """Query vectors from the index's embedder, checked: one row per query, the index's
        width, finite, non-zero; a query longer than the model reads is embedded by parts.

        Raises:
            ValueError: the vectors fail a check (whatever the embedder raises, too); the
                callers here turn either into a keyword-only, ``degraded`` result.
        """
        assert self.embedder is not None
        assert self.vectors is not None
        return checked_query_vectors(
            request_vectors(self.embedder, queries), len(queries), self.vectors.dim
        )

    def rank(
        self,
        query: str,
        query_vector: npt.NDArray[np.float32] | RequestVector | None,
        k: int = 10,
        *,
        strategy: Strategy | str | None = None,
        reason: str = "",
    ) -> Ranking:
        """``search`` with a query vector computed elsewhere (``None``: keyword-only, degraded
        with ``reason`` unless the strategy is ``keyword``); see ``RecallIndex.rank``.

        Raises:
            ConfigError: an unknown strategy.
        """
        chosen = chosen_strategy(
            self.strategy if strategy is None else strategy, has_embedder=True, strict=False
        )
        return self.recall.rank(query, query_vector, k, strategy=chosen, reason=reason)

    # -- selection ----------------------------------------------------------------------------

    def select(
        self,
        query: str,
        *,
        strategy: Strategy | str | None = None,
        max_tools: int = 5,
        threshold: float | None = None,
        adaptive: bool = True,
        always_active: Sequence[str] = (),
        related: Mapping[str, Sequence[str]] | None = None,
        max_related: int = 5,
        tool_sets: Sequence[ToolSet] = (),
        forced_sets: Sequence[str] = (),
        policy: Policy | None = None,
        explain: bool | Sequence[str] = False,
        allow: Sequence[str] | None = None,
        deny: Sequence[str] | None = None,
        tenant: ToolAccess | None = None,
    ) -> Selection:
        """The tools to show the model for ``query``.

        Args:
            query: the user's request (or the text extracted from a conversation).
            strategy: ``keyword``, ``semantic`` or ``combined``; the index default otherwise.
            policy: a prepared ``Policy``; when given, the policy keyword arguments are ignored.
            explain: ``True`` to explain every shown tool (``Selection.explanations``); a list
                of tool ids to explain those too when they are hidden.
            allow: the only tools that may be shown (narrows before recall).
            deny: tools never shown, whatever else would add them.
            tenant: the tenant's ``ToolAccess``; ``allow``/``deny`` narrow it further.
            Other arguments build the ``Policy`` (see its attributes).

        Returns:
            A ``Selection``; ``outcome`` is ``degraded`` when the embedder failed and recall
            fell back to keywords, ``skipped`` for an empty query (then only
            ``always_active`` tools are returned).

        Raises:
            ConfigError: an option is out of range or names a tool not in the catalogue.

        **Fail-open:** an embedder failure is never an exception here: recall falls back to
        keywords, the ``threshold`` is not applied (it is on the strategy's scale) and the
        selection is ``degraded`` with the reason.
        """
        started = time.perf_counter()
        query = self._spelled(query_text(query))
        chosen = self._strategy(strategy)
        ask = explain_ask(explain)
        access = request_access(allow, deny, tenant)
        if policy is None:
            policy = policy_from_options(
                max_tools=max_tools,
                threshold=threshold,
                adaptive=adaptive,
                always_active=always_active,
                related=related,
                max_related=max_related,
                tool_sets=tool_sets,
                forced_sets=forced_sets,
            )
        # Planned (options checked) before the request is embedded, as a caller's mistake
        # costs no model call.
        if ask is not None:
            check_known(ask, self.catalog, "explain")
        plan = self.recall.plan(query, chosen, policy)
        request = self._request(query, chosen)
        return self.recall.selected(query, request, chosen, plan, access, ask, started)

    def _spelled(self, query: str) -> str:
        return self.recall.spelled(query) if self._spelling else query

    def _strategy(self, strategy: Strategy | str | None) -> Strategy:
        if strategy is None:
            return self.strategy
        return chosen_strategy(strategy, has_embedder=self.embedder is not None, strict=True)


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

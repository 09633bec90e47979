"""``ToolIndex``: the core's recall index with the default embedder and the disk cache.

The core's ``RecallIndex`` loads nothing and reads no disk; this subclass is what scripts and
the CLI use: ``ToolIndex(catalog)`` loads the embedded MiniLM model and keeps tool vectors in
the user cache directory, as the public API always did.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from .._core.catalog.catalog import Catalog
from .._core.errors import ConfigError
from .._core.protocols import Embedder, Int8Kernel
from .._core.recall.index import Progress, RecallIndex, Strategy
from .._core.recall.vectors import INT8_FROM
from .._core.select.arguments import served_catalog
from .._stores.embedding_cache import EmbeddingCache, default_cache_dir, embed_with_cache

_DEFAULT: object = object()


class ToolIndex(RecallIndex):
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
        extra_text: recall-only text per tool id (enrichment's phrasings).
        int8_product: the ``Int8Kernel`` that scores catalogues of at least ``int8_from``
            tools (int8 candidates re-scored exactly: fp32's results, ~4x faster at 100k
            tools), checked against exact products when the index is built; by default
            ``OnnxInt8Kernel()``; ``None``: fp32 only.
        int8_from: the catalogue size from which the int8 product is used.

    Raises:
        ConfigError: ``catalog`` is not a ``Catalog`` or holds no tools, an unknown strategy,
            ``semantic``/``combined`` without an embedder, or a ``cache`` of another type.
        ModelIntegrityError: the default model's files fail their checksum.

    **Fail-open:** an embedder failure while the tools are embedded leaves a keyword-only
    index whose results are ``degraded`` with the reason; an unusable cache costs only
    re-embedding (a ``CacheWarning``), never an error.
    """

    #: Set on the indexes an engine's snapshots serve from (see ``served_index``).
    _serves_an_engine = False

    def __init__(
        self,
        catalog: Catalog,
        *,
        embedder: Embedder | object | None = _DEFAULT,
        cache: EmbeddingCache | str | os.PathLike[str] | object | None = _DEFAULT,
        strategy: Strategy | None = None,
        progress: Progress | None = None,
        extra_text: Mapping[str, str] | None = None,
        int8_product: Int8Kernel | object | None = _DEFAULT,
        int8_from: int = INT8_FROM,
    ) -> None:
        if not self._serves_an_engine:
            served_catalog(catalog)  # a caller's index over no tools could never select one
        self._cache = _open_cache(cache) if embedder is not None else None
        if embedder is _DEFAULT:
            from ..providers import default_embedder

            embedder = default_embedder()
        if int8_product is _DEFAULT:
            from ..providers import OnnxInt8Kernel

            int8_product = OnnxInt8Kernel()
        super().__init__(
            catalog,
            embedder=embedder,  # type: ignore[arg-type]
            strategy=strategy,
            progress=progress,
            extra_text=extra_text,
            int8_product=int8_product,  # type: ignore[arg-type]
            int8_from=int8_from,
        )

    def tool_vectors(
        self, embedder: Embedder, texts: Sequence[str], progress: Progress | None
    ) -> npt.NDArray[np.float32]:
        """The tools' vectors: cached ones from disk, the rest from the embedder."""
        return embed_with_cache(embedder, texts, self._cache, progress)


def served_index(catalog: Catalog, *, extra_text: Mapping[str, str] | None = None) -> ToolIndex:
    """The keyword-only index an engine's snapshot starts from (its vectors come later).

    Unlike ``ToolIndex(catalog)`` it takes an empty catalogue: the engine refused one when it
    opened, but an update may still remove every tool, and the engine then serves none.
    """
    index = ToolIndex.__new__(ToolIndex)
    index._serves_an_engine = True
    index.__init__(catalog, embedder=None, cache=None, extra_text=extra_text)  # type: ignore[misc]
    return index


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

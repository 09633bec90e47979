"""The cascade of ``ToolIndex(..., cascade=True)``: fast-tier vectors where they stand.

The rule (which ranking stands) is the core's ``fast_ranking_stands``; this module opens the
embedder's fast tier for the index's catalogue and asks it first.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .._core.protocols import BuildsFastTier, FastTierModel
from .._core.recall.cascade import FAST_TIER_FLOOR, fast_ranking_stands
from .._core.recall.index import RecallIndex, checked_query_vectors
from .._core.select.plan import RequestVector
from .._core.select.selection import Strategy


class FastFirst:
    """A fitted fast tier and the floor its rankings must clear.

    Build it with ``FastFirst.open``; ``None`` from there means no cascade (the embedder
    has no fast tier, or building it failed), never an error.
    """

    def __init__(self, tier: FastTierModel, *, floor: float = FAST_TIER_FLOOR) -> None:
        self.tier = tier
        self.floor = floor

    @classmethod
    def open(cls, embedder: object, index: RecallIndex, cache_dir: str | None) -> FastFirst | None:
        """The fast tier of ``embedder``'s model fitted on ``index``'s tool texts (loaded
        from ``cache_dir`` when it was fitted before; ``None``: in memory only); ``None``
        when there is none."""
        if not isinstance(embedder, BuildsFastTier) or index.vectors is None:
            return None
        try:
            tier = embedder.open_fast_tier(
                cache_dir=cache_dir,
                tool_texts=index.embedding_texts(),
                tool_vectors=index.vectors.matrix,
                should_stop=lambda: False,
            )
        except Exception:  # the cascade is an optimisation: without it, the full model reads
            return None
        return cls(tier)

    def standing(
        self, index: RecallIndex, queries: Sequence[str], strategy: Strategy
    ) -> list[RequestVector | None]:
        """Per query, the fast tier's vector when its ranking stands, else ``None`` (ask the
        full model). Only ``combined`` recall cascades (the floor is on the fused score)."""
        if strategy is not Strategy.COMBINED or index.vectors is None or not queries:
            return [None] * len(queries)
        try:
            vectors: npt.NDArray[np.float32] = checked_query_vectors(
                self.tier.embed(list(queries)), len(queries), index.vectors.dim
            )
        except Exception:  # a failing fast tier leaves every request to the full model
            return [None] * len(queries)
        out: list[RequestVector | None] = []
        for query, vector in zip(queries, vectors, strict=True):
            request = RequestVector.sure(vector)
            top = index.ranked(query, request, 1, Strategy.COMBINED)
            out.append(request if fast_ranking_stands(top.scores, self.floor) else None)
        return out

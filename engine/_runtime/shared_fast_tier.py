"""The fast tier with its cache folder shared beyond this node (``Stores.fast_tier``).

Before the tier opens, the shared files are fetched into the folder the tier loads from (the
near tier), so a new node loads a fitted tier instead of fitting the catalogue; after it
opens, and after every later save (a refit on served traffic), the folder is offered back.
The folder is the provider's (``cache_dir/fast-tier/<model sha256>/``): a builder that does
not say its model's sha256 cannot be keyed and opens as it would without sharing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from .._core.config import EngineConfig
from .._core.protocols import BuildsFastTier, FastTierModel
from .._core.recall.index import RecallIndex
from .._core.stores import FastTierStore


def open_shared_fast_tier(
    builder: BuildsFastTier,
    directory: Path,
    shared: FastTierStore,
    index: RecallIndex,
    should_stop: Callable[[], bool],
    config: EngineConfig,
) -> FastTierModel:
    """``builder``'s fast tier for ``index``, its folder under ``directory`` fetched from
    ``shared`` first and offered to it after every save. Runs in the background thread."""
    assert index.vectors is not None
    sha = getattr(builder, "model_sha256", None)
    folder = str(directory / "fast-tier" / sha) if isinstance(sha, str) else ""
    if isinstance(sha, str):
        shared.fetch(sha, folder)
    tier = builder.open_fast_tier(
        cache_dir=str(directory),
        tool_texts=index.embedding_texts(),
        tool_vectors=index.vectors.matrix,
        should_stop=should_stop,
        fit_from=config.load.min_served,
    )
    if not isinstance(sha, str):
        return tier
    model: str = sha

    def share() -> None:
        shared.share(model, folder)

    share()
    return SharedFastTier(tier, share)


class SharedFastTier:
    """``tier``, whose every save is followed by ``after_save`` (the share)."""

    def __init__(self, tier: FastTierModel, after_save: Callable[[], None]) -> None:
        self._tier = tier
        self._after_save = after_save
        # The hot path calls the tier's own method: no extra frame per request.
        self.embed = tier.embed

    @property
    def served_texts(self) -> int:
        return self._tier.served_texts

    def learn(self, texts: Sequence[str], vectors: npt.NDArray[np.float32]) -> None:
        self._tier.learn(texts, vectors)

    def learn_tools(self, texts: Sequence[str], vectors: npt.NDArray[np.float32]) -> None:
        self._tier.learn_tools(texts, vectors)

    def refit(self, *, should_stop: Callable[[], bool] | None = None) -> None:
        self._tier.refit(should_stop=should_stop)

    def save(self) -> None:
        self._tier.save()
        self._after_save()

"""A fast tier's first build stops between distillation batches when asked (engine shutdown)."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolroute import CacheWarning
from toolroute.providers._embedders.fast_tier import tier as _fast_tier
from toolroute.providers._embedders.fast_tier.tier import FastTier, FastTierStopped
from toolroute.providers._embedders.minilm import default_embedder


def test_a_build_asked_to_stop_stops_before_the_next_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = default_embedder()
    monkeypatch.setattr(_fast_tier, "shipped_table", lambda _embedder, **_: None)  # distil it
    asked: list[int] = []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) > 2  # two batches run, then the engine is shutting down

    with pytest.raises(FastTierStopped):
        FastTier.open(embedder, cache_dir=tmp_path, should_stop=should_stop)
    assert len(asked) == 3
    assert not (tmp_path / "fast-tier").exists()  # nothing half-built is cached


def test_a_cache_folder_that_cannot_be_written_is_a_cache_warning(tmp_path: Path) -> None:
    # A full disk or a read-only cache: the tier still works, and the operator is told.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.warns(CacheWarning, match="cannot write the fast tier's cache"):
        tier = FastTier.open(
            default_embedder(), cache_dir=blocker, tool_texts=["get the weather for a city"]
        )
    assert tier.embed(["weather in Oslo"]).shape == (1, tier.dim)

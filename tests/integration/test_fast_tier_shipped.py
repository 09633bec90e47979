"""The fast tier's distilled table ships with the package (providers/fast_tier_table.npz).

A first engine then fits the catalogue instead of distilling the model, a fit stops when the
engine leaves, and a table that does not match the installed model is never used.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import attrs
import numpy as np
import pytest

from toolroute.providers._embedders.fast_tier import tier as _fast_tier
from toolroute.providers._embedders.fast_tier.files import (
    SHIPPED_TABLE,
    SHIPPED_TABLE_SHA256,
    _read_shipped,
    quantised,
    shipped_table,
)
from toolroute.providers._embedders.fast_tier.ridge import Stopped
from toolroute.providers._embedders.fast_tier.tier import FastTier, FastTierStopped
from toolroute.providers._embedders.minilm import MiniLMEmbedder, default_embedder

pytestmark = pytest.mark.slow

TOOLS = [
    f"{verb} {thing}"
    for verb, thing in itertools.product(
        ["find", "book", "cancel", "compare", "track"],
        ["flights to Rome", "a hotel room", "my invoices", "train tickets", "stock prices"],
    )
]


@pytest.fixture(scope="module")
def emb() -> MiniLMEmbedder:
    return default_embedder()


def _must_not_distil(*args: object, **kwargs: object) -> np.ndarray:
    raise AssertionError("the shipped table fits this model: nothing may be distilled")


def test_the_bundled_model_opens_from_the_shipped_table_without_distilling(
    emb: MiniLMEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_fast_tier, "distil", _must_not_distil)
    tier = FastTier.open(emb, cache_dir=tmp_path, tool_texts=TOOLS)
    directory = tmp_path / "fast-tier" / emb.model_sha256
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["distilled"] == "shipped"
    assert not (directory / "distilled.npy").exists()  # the cache holds no second copy
    again = FastTier.open(emb, cache_dir=tmp_path, tool_texts=TOOLS)
    np.testing.assert_array_equal(again._table.dense(), tier._table.dense())
    assert again.learned_texts == tier.learned_texts == len(TOOLS)


def test_shipped_rows_are_the_model_on_each_token_within_int8_rounding(
    emb: MiniLMEmbedder,
) -> None:
    table = shipped_table(emb)
    assert table is not None
    ids = np.array([0, 101, 2000, 7592, 29_000, emb.vocab_size - 1])
    model = emb.embed_token_ids(np.stack([np.full(6, 101), ids, np.full(6, 102)], axis=1))
    # Rounding to 127 steps per row moves each value by at most half a step; a CPU whose
    # int8 kernel differs moves the model's own rows by less than that again.
    step = np.abs(model).max(axis=1, keepdims=True) / 127
    assert (np.abs(table[ids] - model) <= step).all()
    cosine = (table[ids] * model).sum(axis=1) / np.linalg.norm(table[ids], axis=1)
    assert cosine.min() > 0.999


def test_quantised_rows_round_trip_within_half_a_step() -> None:
    rng = np.random.default_rng(0)
    table = rng.normal(size=(50, 8)).astype(np.float32)
    table[3] = 0.0  # an all-zero row keeps a usable scale
    stored = quantised(table)
    back = stored["rows"] * stored["scales"]
    assert stored["rows"].dtype == np.int8
    assert (np.abs(back - table) <= stored["scales"] / 2 + 1e-7).all()
    assert np.isfinite(back).all()


def test_a_shipped_file_that_does_not_match_its_sha256_is_never_used(
    emb: MiniLMEmbedder, tmp_path: Path
) -> None:
    copy = tmp_path / "table.npz"
    shutil.copyfile(SHIPPED_TABLE, copy)
    assert _read_shipped(SHIPPED_TABLE_SHA256, emb.vocab_size, emb.dim, path=copy) is not None
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0x01
    copy.write_bytes(bytes(data))
    assert _read_shipped(SHIPPED_TABLE_SHA256, emb.vocab_size, emb.dim, path=copy) is None
    assert _read_shipped(SHIPPED_TABLE_SHA256, 1, 1, path=tmp_path / "missing.npz") is None


def test_reading_the_shipped_table_stops_when_asked(emb: MiniLMEmbedder) -> None:
    with pytest.raises(Stopped):
        _read_shipped(SHIPPED_TABLE_SHA256, emb.vocab_size, emb.dim, path=SHIPPED_TABLE,
                      should_stop=lambda: True)  # fmt: skip


@attrs.frozen
class _OtherModel:
    model_sha256: str
    tokenizer_sha256: str
    vocab_size: int = 30522
    dim: int = 384


def test_another_model_or_tokenizer_gets_no_shipped_table(emb: MiniLMEmbedder) -> None:
    assert shipped_table(_OtherModel("0" * 64, emb.tokenizer_sha256)) is None  # type: ignore[arg-type]
    assert shipped_table(_OtherModel(emb.model_sha256, "0" * 64)) is None  # type: ignore[arg-type]


def test_a_cache_fitted_on_the_shipped_table_is_refitted_when_the_table_goes(
    emb: MiniLMEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    FastTier.open(emb, cache_dir=tmp_path, tool_texts=TOOLS)
    distilled = np.zeros((emb.vocab_size, emb.dim), dtype=np.float32)
    distilled[:, 0] = 1.0
    distilled.setflags(write=False)
    monkeypatch.setattr(_fast_tier, "shipped_table", lambda _embedder, **_: None)
    monkeypatch.setattr(_fast_tier, "distil", lambda *a, **k: distilled)
    rebuilt = FastTier.open(emb, cache_dir=tmp_path, tool_texts=TOOLS)
    assert rebuilt._distilled is distilled  # the cache could not vouch for its rows
    manifest = json.loads((tmp_path / "fast-tier" / emb.model_sha256 / "manifest.json").read_text())
    assert manifest["distilled"] == "distilled.npy"


def test_a_refit_asked_to_stop_keeps_the_old_table(emb: MiniLMEmbedder) -> None:
    tier = FastTier.open(emb, cache_dir=None, tool_texts=TOOLS)
    before = tier._table
    tier.learn(["water the plants"], emb.embed(["water the plants"]))
    asked: list[int] = []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) > 3  # three steps run, then the engine is leaving

    with pytest.raises(FastTierStopped):
        tier.refit(should_stop=should_stop)
    assert len(asked) == 4
    assert tier._table is before
    tier.refit()  # not stopped: the fit completes and swaps
    assert tier._table is not before


def test_a_first_build_asked_to_stop_during_its_fit_stops(
    emb: MiniLMEmbedder, tmp_path: Path
) -> None:
    with pytest.raises(FastTierStopped):
        FastTier.open(emb, cache_dir=tmp_path, tool_texts=TOOLS, should_stop=lambda: True)
    assert not (tmp_path / "fast-tier").exists()  # nothing half-fitted is cached


def test_a_tier_that_could_not_answer_yet_learns_its_tools_without_fitting_them(
    emb: MiniLMEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fit(self: FastTier, **kwargs: object) -> None:
        raise AssertionError("fitted although no request could be answered from it")

    with monkeypatch.context() as patch:
        patch.setattr(FastTier, "refit", no_fit)
        tier = FastTier.open(emb, cache_dir=tmp_path, tool_texts=TOOLS, fit_from=200)
    assert tier.learned_texts == len(TOOLS)
    assert tier.served_texts == 0
    assert not (tmp_path / "fast-tier").exists()  # nothing unfitted is saved
    # Served requests arrive; the first refit fits them with the tools, and saves.
    texts = [f"please {tool}" for tool in TOOLS]
    tier.learn(texts, emb.embed(texts))
    tier.refit()
    tier.save()
    again = FastTier.open(emb, cache_dir=tmp_path, tool_texts=TOOLS, fit_from=20)
    assert again.learned_texts == 2 * len(TOOLS)
    np.testing.assert_array_equal(again._table.dense(), tier._table.dense())

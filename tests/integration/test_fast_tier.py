"""The fast tier built for real from the bundled MiniLM (providers/_embedders/fast_tier/tier.py)."""

from __future__ import annotations

import itertools
import json
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest

from toolroute.providers import Embedder
from toolroute.providers._embedders.fast_tier import tier as _fast_tier
from toolroute.providers._embedders.fast_tier.tier import FastTier, _load
from toolroute.providers._embedders.minilm import MiniLMEmbedder, default_embedder

pytestmark = pytest.mark.slow

ACTIONS = ["find", "book", "cancel", "compare", "summarise", "translate", "schedule", "track"]
THINGS = ["flights to Rome", "a hotel room", "my invoices", "the weather forecast",
          "stock prices", "a doctor's appointment", "song lyrics", "the news about rockets",
          "recipes with tomatoes", "train tickets", "my calendar", "currency rates"]  # fmt: skip
TAILS = ["for tomorrow", "please", "as fast as possible", "for my family", "in Spanish"]


def _texts() -> list[str]:
    return [f"{a} {t} {e}" for a, t, e in itertools.product(ACTIONS, THINGS, TAILS)]


@pytest.fixture(scope="module")
def emb() -> MiniLMEmbedder:
    return default_embedder()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, emb: MiniLMEmbedder) -> tuple[FastTier, Path]:
    """A tier distilled here (the path of a model the package ships no table for)."""
    cache = tmp_path_factory.mktemp("fast")
    tools = [f"{a} {t}" for a, t in itertools.product(ACTIONS, THINGS)]

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network use while building the fast tier: {args}")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", no_network)
        patch.setattr(socket, "getaddrinfo", no_network)
        patch.setattr(_fast_tier, "shipped_table", _no_shipped_table)
        tier = FastTier.open(emb, cache_dir=cache, tool_texts=tools)
    return tier, cache


def _no_shipped_table(embedder: MiniLMEmbedder, **_: object) -> None:
    return None


@pytest.fixture(autouse=True)
def _distilled_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test here exercises the distilled (not shipped) table's cache."""
    monkeypatch.setattr(_fast_tier, "shipped_table", _no_shipped_table)


def test_satisfies_the_embedder_protocol_with_unit_rows(built: tuple[FastTier, Path]) -> None:
    tier, _ = built
    assert isinstance(tier, Embedder)
    out = tier.embed(["book a flight", "", "x" * 3_000_000])
    assert out.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


def test_distilled_rows_are_the_model_on_each_token(
    built: tuple[FastTier, Path], emb: MiniLMEmbedder
) -> None:
    tier, _ = built
    ids = np.array([0, 101, 2000, 7592, tier._distilled.shape[0] - 1])
    again = emb.embed_token_ids(np.stack([np.full(5, 101), ids, np.full(5, 102)], axis=1))
    np.testing.assert_array_equal(tier._distilled[ids], again)


def test_reopening_loads_the_same_tier_from_the_cache(
    built: tuple[FastTier, Path], emb: MiniLMEmbedder
) -> None:
    tier, cache = built
    again = FastTier.open(emb, cache_dir=cache)  # no tool texts: nothing to fit, all loaded
    assert again.learned_texts == tier.learned_texts == len(ACTIONS) * len(THINGS)
    assert again.served_texts == 0
    np.testing.assert_array_equal(again._table.dense(), tier._table.dense())
    texts = _texts()[:10]
    np.testing.assert_array_equal(again.embed(texts), tier.embed(texts))


def test_reopening_learns_only_tool_texts_it_has_not_seen(
    built: tuple[FastTier, Path], emb: MiniLMEmbedder, tmp_path: Path
) -> None:
    tier, cache = built
    shutil.copytree(cache, tmp_path, dirs_exist_ok=True)
    tools = [f"{a} {t}" for a, t in itertools.product(ACTIONS, THINGS)]
    same = FastTier.open(emb, cache_dir=tmp_path, tool_texts=tools)
    assert same.learned_texts == tier.learned_texts
    np.testing.assert_array_equal(same._table.dense(), tier._table.dense())  # nothing new: no refit
    grown = FastTier.open(emb, cache_dir=tmp_path, tool_texts=[*tools, "water the plants"])
    assert grown.learned_texts == tier.learned_texts + 1
    again = FastTier.open(emb, cache_dir=tmp_path, tool_texts=["water the plants", *tools])
    assert again.learned_texts == grown.learned_texts


def test_cache_is_keyed_by_the_model_sha256(built: tuple[FastTier, Path]) -> None:
    tier, cache = built
    directory = cache / "fast-tier" / tier.model_sha256
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["model_sha256"] == tier.model_sha256
    assert _load(directory, tier.model_sha256, None) is not None
    assert _load(directory, "0" * 64, None) is None


def _corrupt_copy(cache: Path, sha: str, into: Path, victim: str) -> Path:
    shutil.copytree(cache, into, dirs_exist_ok=True)
    path = into / "fast-tier" / sha / victim
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    return into / "fast-tier" / sha


@pytest.mark.parametrize("victim", ["keys.npy", "rows.npy", "table_rows.npy", "tool_digests.npy"])
def test_a_corrupt_learned_file_is_never_trusted(
    built: tuple[FastTier, Path], tmp_path: Path, victim: str
) -> None:
    tier, cache = built
    directory = _corrupt_copy(cache, tier.model_sha256, tmp_path, victim)
    saved = _load(directory, tier.model_sha256, None)
    assert saved is not None
    np.testing.assert_array_equal(saved[0], tier._distilled)  # the distilled table is kept
    assert saved[1] is None


@pytest.mark.parametrize("victim", ["distilled.npy", "manifest.json"])
def test_a_corrupt_distilled_table_or_manifest_is_never_trusted(
    built: tuple[FastTier, Path], tmp_path: Path, victim: str
) -> None:
    tier, cache = built
    directory = _corrupt_copy(cache, tier.model_sha256, tmp_path, victim)
    assert _load(directory, tier.model_sha256, None) is None


def test_corrupt_learned_files_are_refitted_to_the_same_tier_without_distilling(
    built: tuple[FastTier, Path], emb: MiniLMEmbedder, tmp_path: Path
) -> None:
    tier, cache = built
    directory = _corrupt_copy(cache, tier.model_sha256, tmp_path, "keys.npy")
    tools = [f"{a} {t}" for a, t in itertools.product(ACTIONS, THINGS)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_fast_tier, "distil", _must_not_distil)
        refitted = FastTier.open(emb, cache_dir=tmp_path, tool_texts=tools)
    np.testing.assert_allclose(refitted._table.dense(), tier._table.dense(), atol=1e-6)
    assert refitted.learned_texts == tier.learned_texts
    saved = _load(directory, tier.model_sha256, None)
    assert saved is not None
    assert saved[1] is not None  # written again, whole


def test_a_corrupt_distilled_table_is_distilled_again_to_the_same_rows(
    built: tuple[FastTier, Path], emb: MiniLMEmbedder, tmp_path: Path
) -> None:
    tier, cache = built
    _corrupt_copy(cache, tier.model_sha256, tmp_path, "distilled.npy")
    tools = [f"{a} {t}" for a, t in itertools.product(ACTIONS, THINGS)]
    rebuilt = FastTier.open(emb, cache_dir=tmp_path, tool_texts=tools)
    np.testing.assert_array_equal(rebuilt._distilled, tier._distilled)  # reproducible
    np.testing.assert_allclose(rebuilt._table.dense(), tier._table.dense(), atol=1e-6)


def _must_not_distil(embedder: MiniLMEmbedder) -> np.ndarray:
    raise AssertionError("the distilled table was valid: it must not be distilled again")


def test_learning_improves_agreement_with_the_full_model_on_held_out_texts(
    emb: MiniLMEmbedder, built: tuple[FastTier, Path]
) -> None:
    tier, cache = built
    fresh = FastTier.open(emb, cache_dir=cache)  # its own copy: learning must not leak
    texts = _texts()
    train, held_out = texts[::2], texts[1::2]
    full = emb.embed(held_out)
    before = float((fresh.embed(held_out) * full).sum(axis=1).mean())
    fresh.learn(train, emb.embed(train))
    fresh.refit()
    after = float((fresh.embed(held_out) * full).sum(axis=1).mean())
    assert after > before + 0.02
    assert fresh.learned_texts == tier.learned_texts + len(train)
    assert fresh.served_texts == len(train)


def test_saved_statistics_hold_no_request_text(
    emb: MiniLMEmbedder, built: tuple[FastTier, Path], tmp_path: Path
) -> None:
    shutil.copytree(built[1], tmp_path, dirs_exist_ok=True)
    tier = FastTier.open(emb, cache_dir=tmp_path)
    secret = "quokkazebra rendezvous at the lighthouse"
    tier.learn([secret], emb.embed([secret]))
    tier.save()
    for path in (tmp_path / "fast-tier").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert b"quokkazebra" not in data
            assert b"lighthouse" not in data


def test_learn_rejects_vectors_that_do_not_fit(built: tuple[FastTier, Path]) -> None:
    tier, _ = built
    with pytest.raises(ValueError, match="expected 2 finite target rows of width 384"):
        tier.learn(["a", "b"], np.ones((2, 10), dtype=np.float32))

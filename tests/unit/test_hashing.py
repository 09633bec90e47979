"""The hashing char-n-gram embedder (embedding-models.md §9)."""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute.providers import Embedder
from toolroute.providers._embedders.hashing import HashingEmbedder

texts_st = st.lists(st.text(max_size=60), max_size=8)


def reference_vector(text: str, dim: int) -> np.ndarray:
    """§9 written out the slow, obvious way, as an oracle."""
    counts: Counter[int] = Counter()
    for word in re.findall(r"[^\W_]+", text.lower()):
        padded = f"<{word}>"
        features = [padded[i : i + n] for n in (3, 4, 5) for i in range(len(padded) - n + 1)]
        features.append(word)
        for feature in features:
            h = zlib.crc32(feature.encode("utf-8"))
            counts[(h & 0x7FFFFFFF) % dim] += -1 if h >> 31 else 1
    vec = np.zeros(dim)
    for bucket, total in counts.items():
        vec[bucket] = math.copysign(math.sqrt(abs(total)), total)
    norm = np.linalg.norm(vec)
    return vec / norm if norm else vec


def test_satisfies_the_embedder_protocol() -> None:
    emb = HashingEmbedder()
    assert isinstance(emb, Embedder)
    assert emb.dim == 2048
    assert emb.identity == "hashing-ngram-v1:2048"
    assert HashingEmbedder(dim=512).identity == "hashing-ngram-v1:512"


def test_rejects_non_positive_dim() -> None:
    with pytest.raises(ValueError, match="dim"):
        HashingEmbedder(dim=0)


def test_empty_list_gives_zero_rows() -> None:
    out = HashingEmbedder(dim=64).embed([])
    assert out.shape == (0, 64)
    assert out.dtype == np.float32


@pytest.mark.parametrize("text", ["", "   ", "!?.,", "___", "\n\t"])
def test_text_without_words_is_a_zero_row(text: str) -> None:
    out = HashingEmbedder().embed([text, "hello"])
    assert not out[0].any()
    assert np.linalg.norm(out[1]) == pytest.approx(1.0, abs=1e-6)


@given(texts_st, st.sampled_from([7, 64, 2048]))
def test_matches_the_reference_algorithm(texts: list[str], dim: int) -> None:
    out = HashingEmbedder(dim=dim).embed(texts)
    assert out.shape == (len(texts), dim)
    assert out.dtype == np.float32
    for row, text in zip(out, texts, strict=True):
        np.testing.assert_allclose(row, reference_vector(text, dim), atol=1e-6)


@given(texts_st)
def test_rows_are_unit_or_zero_and_finite(texts: list[str]) -> None:
    out = HashingEmbedder().embed(texts)
    assert np.isfinite(out).all()
    norms = np.linalg.norm(out, axis=1)
    assert np.all((np.abs(norms - 1) < 1e-5) | (norms == 0))


def test_batch_rows_equal_single_embeddings_across_chunks() -> None:
    emb = HashingEmbedder(dim=256)
    texts = [f"tool number {i} does thing {i * 7}" for i in range(2100)]  # > 2 chunks
    batch = emb.embed(texts)
    for i in (0, 1023, 1024, 2047, 2048, 2099):
        np.testing.assert_array_equal(batch[i], emb.embed([texts[i]])[0])


def test_underscores_case_and_punctuation_separate_words_only() -> None:
    emb = HashingEmbedder()
    a, b, c = emb.embed(["get_user_id", "Get user-ID", "getuserid"])
    np.testing.assert_allclose(a, b, atol=1e-7)
    assert a @ c < 0.9


def test_unicode_letters_and_digits_are_words() -> None:
    emb = HashingEmbedder()
    cafe, caf, kanji, digits = emb.embed(["café", "caf", "東京", "٣٤٥"])
    assert cafe @ caf < 0.99
    assert np.linalg.norm(kanji) == pytest.approx(1.0, abs=1e-6)
    assert np.linalg.norm(digits) == pytest.approx(1.0, abs=1e-6)


def test_is_deterministic_across_instances() -> None:
    texts = ["send an email to bob", "weather forecast"]
    np.testing.assert_array_equal(HashingEmbedder().embed(texts), HashingEmbedder().embed(texts))


def test_subwords_make_typos_and_inflections_close() -> None:
    emb = HashingEmbedder()
    query, typo, inflected, unrelated = emb.embed(
        ["schedule a meeting", "schedul a meetng", "scheduling meetings", "convert currency"]
    )
    assert query @ typo > query @ unrelated + 0.2
    assert query @ inflected > query @ unrelated + 0.2

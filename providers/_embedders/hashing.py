"""A model-free lexical embedder: hashed character n-grams.

The floor under the neural embedders (``docs/reference/embedding-models.md``
§9): no files, no dependencies beyond numpy, deterministic across processes and
platforms (``zlib.crc32`` rather than Python's salted ``hash``). It matches
shared words and sub-words, so it tolerates typos and inflection, but it knows
no synonyms.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from functools import lru_cache
from typing import Final

import numpy as np
import numpy.typing as npt

from ..._core.text import KEYWORD_TEXT_CHARS, bounded

# Unicode letters and digits; `_`, punctuation and spaces separate words, so
# `get_user_id` and "get user id" give the same features.
_WORD: Final = re.compile(r"[^\W_]+")
_NGRAM_SIZES: Final = (3, 4, 5)
# Rows bucketed together per `np.bincount`: bounds the float64 scratch matrix at
# _CHUNK x dim (16 MiB at dim=2048).
_CHUNK: Final = 1024
_SIGN_BIT: Final = 1 << 31


def _features(word: str) -> list[str]:
    padded = f"<{word}>"
    grams = [padded[i : i + n] for n in _NGRAM_SIZES for i in range(max(len(padded) - n + 1, 0))]
    grams.append(word)
    return grams


@lru_cache(maxsize=1 << 16)
def _word_buckets(word: str, dim: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Bucket indices and ±1 signs of ``word``'s features (read-only, cached)."""
    hashes = [zlib.crc32(f.encode("utf-8")) for f in _features(word)]
    idx = np.array([(h & ~_SIGN_BIT) % dim for h in hashes], dtype=np.int64)
    sign = np.array([-1.0 if h & _SIGN_BIT else 1.0 for h in hashes], dtype=np.float64)
    idx.flags.writeable = False
    sign.flags.writeable = False
    return idx, sign


class HashingEmbedder:
    """Signed feature hashing of character n-grams, L2-normalised.

    Args:
        dim: number of hash buckets, the vector width.

    Each text is lower-cased and split into words of Unicode letters and digits.
    Every word ``w`` contributes the character 3-, 4- and 5-grams of ``<w>`` and
    ``w`` itself; each feature adds ±1 (sign from bit 31 of its CRC-32) to bucket
    ``crc32 mod dim``. Bucket totals ``x`` become ``sign(x)·sqrt(|x|)`` (sublinear
    term frequency) and the row is L2-normalised.

    **Zero rows:** a text with no letters or digits (``""``, ``"!?"``) yields an
    all-zero row, not a unit vector. It means "no evidence": its cosine with
    everything is 0, so it neither matches nor repels any tool.

    Per-word feature arrays are memoised (65,536 words, shared by all
    instances), so repeated vocabulary costs one dictionary lookup per word.
    ``embed`` is safe to call from several threads.
    """

    max_batch: int = 4096

    def __init__(self, dim: int = 2048) -> None:
        if dim < 1:
            raise ValueError(f"dim must be at least 1, got {dim}")
        self.dim = dim
        self.identity = f"hashing-ngram-v1:{dim}"

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim})"

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Vectors for ``texts``.

        Args:
            texts: any number of strings.

        Returns:
            float32 array of shape ``(len(texts), dim)``; each row is unit length,
            or all zeros for a text without words.
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), _CHUNK):
            # A bag of words reads the keyword search's bounded prefix of each text.
            chunk = [bounded(t, KEYWORD_TEXT_CHARS) for t in texts[start : start + _CHUNK]]
            out[start : start + len(chunk)] = self._embed_chunk(chunk)
        return out

    def _embed_chunk(self, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        dim = self.dim
        idx_parts: list[npt.NDArray[np.int64]] = []
        sign_parts: list[npt.NDArray[np.float64]] = []
        for row, text in enumerate(texts):
            offset = row * dim
            for word in _WORD.findall(text.lower()):
                idx, sign = _word_buckets(word, dim)
                idx_parts.append(idx + offset if offset else idx)
                sign_parts.append(sign)
        if not idx_parts:
            return np.zeros((len(texts), dim), dtype=np.float64)
        totals = np.bincount(
            np.concatenate(idx_parts),
            weights=np.concatenate(sign_parts),
            minlength=len(texts) * dim,
        ).reshape(len(texts), dim)
        tf = np.sign(totals) * np.sqrt(np.abs(totals))
        norms = np.linalg.norm(tf, axis=1, keepdims=True)
        # Rows without features have norm 0: divide by 1 and keep them zero.
        tf /= np.where(norms > 0.0, norms, 1.0)
        return tf

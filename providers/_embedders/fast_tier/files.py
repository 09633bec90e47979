"""The fast tier's files: the distilled table shipped with the package, and the cache.

The shipped table (``fast_tier_table.npz``: int8 rows, one float32 scale each) is used only
when its sha256 and the sha256 of the model and tokenizer it was distilled from match the
installed ones. The cache (``cache_dir/fast-tier/<model sha256>/``) holds the learned
statistics and table, each file checked against the sha256 in ``manifest.json`` (written
last: it vouches for the rest); a cache fitted on the shipped table holds no copy of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

import numpy as np
import numpy.typing as npt

from .ridge import RidgeStats, SpaceMap, Stopped
from .table import MappedRows, TokenTable

F32 = npt.NDArray[np.float32]

#: Bump when the files' meaning changes: old caches are then rebuilt, not misread.
FORMAT: Final = 3
#: The distilled table shipped with the package, and what it was distilled from
#: (`python tests/bench/ship_fast_tier_table.py` writes it and prints these).
SHIPPED_TABLE: Final = Path(__file__).with_name("fast_tier_table.npz")
SHIPPED_TABLE_SHA256: Final = "0852e5e475e1340435e75e890aebf3f58ecb45fd87f765b646ea11c16ecb867c"
SHIPPED_MODEL_SHA256: Final = "9a741b20662e2671db50fd83ec52386ea58353b0c5ce3c16b7008f96a1259e0b"
SHIPPED_TOKENIZER_SHA256: Final = (
    "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
)


class SourceModel(Protocol):
    """What a fast tier is built from (``MiniLMEmbedder``): its files' identity, its
    vocabulary, and the model run on sentences and on bare token ids."""

    tokenizer_path: Path
    model_sha256: str
    tokenizer_sha256: str
    vocab_size: int
    dim: int

    def embed(self, texts: Sequence[str]) -> F32: ...

    def embed_token_ids(self, ids: npt.NDArray[np.int64]) -> F32: ...


def shipped_table(
    embedder: SourceModel, *, should_stop: Callable[[], bool] | None = None
) -> F32 | None:
    """The package's distilled table, if it was distilled from ``embedder``'s model and
    tokenizer and its file is intact; ``None`` otherwise (distil instead).

    Read once per process (engines opened one after another share it).

    Raises:
        Stopped: ``should_stop`` said so (asked between blocks of the read).
    """
    if (embedder.model_sha256, embedder.tokenizer_sha256) != (
        SHIPPED_MODEL_SHA256,
        SHIPPED_TOKENIZER_SHA256,
    ):
        return None
    key = (str(SHIPPED_TABLE), SHIPPED_TABLE_SHA256, embedder.vocab_size, embedder.dim)
    with _shipped_lock:
        if key not in _shipped:
            _shipped[key] = _read_shipped(*key[1:], path=SHIPPED_TABLE, should_stop=should_stop)
        return _shipped[key]


_shipped: dict[tuple[str, str, int, int], F32 | None] = {}
_shipped_lock = threading.Lock()


def _read_shipped(
    sha256: str,
    vocab: int,
    dim: int,
    *,
    path: Path,
    should_stop: Callable[[], bool] | None = None,
) -> F32 | None:
    try:
        if _digest(path, should_stop) != sha256:
            return None
        with np.load(path, allow_pickle=False) as arrays:
            rows, scales = arrays["rows"], arrays["scales"]
    except _LOAD_ERRORS:
        return None
    if rows.shape != (vocab, dim) or rows.dtype != np.int8 or scales.shape != (vocab, 1):
        return None
    table: F32 = np.empty(rows.shape, dtype=np.float32)
    for first in range(0, vocab, _BLOCK_ROWS):
        _check(should_stop)
        block = slice(first, first + _BLOCK_ROWS)
        np.multiply(rows[block], scales[block].astype(np.float32), out=table[block])
    table.setflags(write=False)
    return table


# Work between two ``should_stop`` calls while reading: at the lowest priority on a loaded
# machine even this much can take a while, and leaving an engine must not wait for it.
_BLOCK_ROWS: Final = 4096
_READ_BYTES: Final = 1 << 20


def _check(should_stop: Callable[[], bool] | None) -> None:
    if should_stop is not None and should_stop():
        raise Stopped("reading the fast tier's table was stopped")


def quantised(table: F32) -> dict[str, npt.NDArray[np.generic]]:
    """``table`` as the shipped file stores it: int8 rows, one float32 scale per row
    (symmetric: the largest magnitude of a row maps to 127)."""
    scales = (np.abs(table).max(axis=1, keepdims=True) / 127).astype(np.float32)
    scales = np.where(scales > 0, scales, np.float32(1))
    return {"rows": np.round(table / scales).astype(np.int8), "scales": scales}


def _digest(path: Path, should_stop: Callable[[], bool] | None = None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_READ_BYTES):
            _check(should_stop)
            digest.update(chunk)
    return digest.hexdigest()


def save(
    directory: Path,
    sha: str,
    files: dict[str, npt.NDArray[np.generic]],
    texts: int,
    *,
    shipped: bool,
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    digests = {}
    for name, array in files.items():
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        data = buffer.getvalue()
        _replace(directory / name, data)
        # The digest of what this writer wrote: another process may replace the file next.
        digests[name] = hashlib.sha256(data).hexdigest()
    manifest = {
        "format": FORMAT,
        "model_sha256": sha,
        "texts": texts,
        "distilled": "shipped" if shipped else "distilled.npy",
        "sha256": digests,
    }
    manifest_bytes = json.dumps(manifest, indent=1).encode("utf-8")
    _replace(directory / "manifest.json", manifest_bytes)  # last: it vouches for the rest


def _replace(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` through a temporary file of this writer's own, so
    processes sharing the cache folder never write into one another's temporary file."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


#: What a cache learned: statistics, the fitted table, tool digests, the space map.
Learned = tuple[RidgeStats, TokenTable, set[bytes], SpaceMap]
_LOAD_ERRORS = (OSError, EOFError, ValueError, KeyError, TypeError, IndexError, AttributeError)


def load(
    directory: Path, sha: str, shipped: F32 | None, *, map_ridge: float
) -> tuple[F32, Learned | None] | None:
    """``(distilled, learned)`` from the cache. ``None`` when the manifest or the distilled
    table is missing, corrupt or of another model (distil again); ``learned`` is ``None``
    when only the learned files are (fit again from the tool texts, which is quick). A cache
    fitted on the shipped table holds no copy of it: it needs ``shipped``."""
    try:
        manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
        if manifest.get("format") != FORMAT or manifest.get("model_sha256") != sha:
            return None
        digests: dict[str, str] = manifest["sha256"]
        if manifest.get("distilled") == "shipped":
            if shipped is None:
                return None
            distilled = shipped
        else:
            distilled = _checked_array(directory, "distilled.npy", digests).astype(np.float32)
    except _LOAD_ERRORS:
        return None
    distilled.setflags(write=False)
    try:
        arrays = {name: _checked_array(directory, name, digests) for name in digests}
        tokens = arrays["tokens.npy"].astype(np.int64)
        stats = RidgeStats.restore(
            int(distilled.shape[0]),
            arrays["keys.npy"],
            arrays["values.npy"],
            tokens,
            arrays["rows.npy"],
            int(manifest["texts"]),
        )
        space = SpaceMap.restore(arrays["map_xtx.npy"], arrays["map_xty.npy"])
        start = MappedRows(distilled, space.mapping(map_ridge))
        table = TokenTable(start, tokens, arrays["table_rows.npy"].astype(np.float32))
        known = {bytes(row) for row in arrays["tool_digests.npy"].astype(np.uint8).reshape(-1, 32)}
    except _LOAD_ERRORS:
        return distilled, None
    return distilled, (stats, table, known, space)


def _checked_array(directory: Path, name: str, digests: dict[str, str]) -> npt.NDArray[Any]:
    """The array in ``name`` if its sha256 is the manifest's; ``ValueError`` otherwise."""
    if _digest(directory / name) != digests[name]:
        raise ValueError(f"{name} does not match its sha256")
    array: npt.NDArray[Any] = np.load(directory / name, allow_pickle=False)
    return array

"""An on-disk cache of text embeddings, one file per embedder identity.

Indexing a catalogue of thousands of tools with the default model takes tens of
seconds on two cores, and the same descriptions come back on every start. This
module stores vectors keyed by ``sha256(identity)`` (the file) and
``sha256(text)`` (the row), so a restart re-embeds only texts that changed.

File format (little-endian), ``<sha256(identity)>.emb``::

    offset  size        field
    0       8           magic  b"TREMBED\\0"
    8       4           version (u32) = 1
    12      4           dim (u32)
    16      8           count (u64)
    24      4           length of the identity in UTF-8 bytes (u32)
    28      4           reserved, 0
    32      L           identity, zero-padded to a multiple of 8
    32+L    32*count    keys: sha256 of each text's UTF-8
    ...     4*dim*count float32 matrix, row-major, one row per key
    end-32  32          sha256 of every byte before it

Writers build the whole file under a temporary name in the same directory,
fsync it and ``os.replace`` it over the old one, so readers only ever see a
complete old file or a complete new one. Where ``fcntl`` exists, writers also
hold an advisory lock on ``<name>.lock`` while they read, merge and replace,
so two processes adding different texts do not drop each other's rows; without
it (or on a filesystem that ignores it) the last writer wins.

A file that is truncated, fails its checksum, has the wrong magic, version,
identity or width is ignored with a ``CacheWarning`` and rebuilt by the next
write: the cache can lose vectors, never serve a wrong one. It never raises
for I/O trouble; an unusable directory turns it into a no-op after one warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import struct
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

import attrs
import numpy as np
import numpy.typing as npt

from .._core.errors import CacheWarning as CacheWarning
from .._core.protocols import Embedder
from .._core.recall.index import Progress, embed_into
from .._core.stores import EmbeddingStore

_MAGIC: Final = b"TREMBED\x00"
_VERSION: Final = 1
_HEADER: Final = struct.Struct("<8sIIQII")  # magic, version, dim, count, id length, reserved
_KEY_BYTES: Final = 32
_SUM_BYTES: Final = 32
_SUFFIX: Final = ".emb"
#: Rows kept per identity by default; the oldest are dropped first.
DEFAULT_MAX_ENTRIES: Final = 200_000


def text_key(text: str) -> bytes:
    """The 32-byte row key of ``text``: sha256 of its UTF-8 bytes."""
    # surrogatepass: a lone surrogate (from a bad JSON escape, say) must not crash
    # caching; it still maps to a stable, distinct key.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _pad8(n: int) -> int:
    return (n + 7) & ~7


@attrs.frozen(eq=False)
class _Table:
    """One identity's rows as read from or written to disk."""

    dim: int
    rows: dict[bytes, int]
    matrix: npt.NDArray[np.float32]


def encode_table(
    identity: str, dim: int, keys: Sequence[bytes], matrix: npt.NDArray[np.float32]
) -> bytes:
    """The file bytes for ``keys`` and their rows in ``matrix`` (``(len(keys), dim)``)."""
    ident = identity.encode("utf-8", "surrogatepass")
    parts = [
        _HEADER.pack(_MAGIC, _VERSION, dim, len(keys), len(ident), 0),
        ident.ljust(_pad8(len(ident)), b"\x00"),
        b"".join(keys),
        np.ascontiguousarray(matrix, dtype="<f4").tobytes(),
    ]
    body = b"".join(parts)
    return body + hashlib.sha256(body).digest()


def decode_table(data: bytes, identity: str, dim: int) -> _Table | str:
    """The table in ``data``, or a sentence saying why it cannot be used."""
    if len(data) < _HEADER.size + _SUM_BYTES:
        return f"it is truncated ({len(data)} bytes, shorter than a header)"
    magic, version, file_dim, count, id_len, _reserved = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        return f"it does not start with {_MAGIC!r} (found {magic!r})"
    if version != _VERSION:
        return f"it has format version {version}, expected {_VERSION}"
    keys_at = _HEADER.size + _pad8(id_len)
    matrix_at = keys_at + _KEY_BYTES * count
    sum_at = matrix_at + 4 * file_dim * count
    if len(data) != sum_at + _SUM_BYTES:
        return f"its length is {len(data)} bytes, expected {sum_at + _SUM_BYTES} (truncated)"
    if hashlib.sha256(memoryview(data)[:sum_at]).digest() != data[sum_at:]:
        return "its checksum does not match its contents (corrupted)"
    found_identity = data[_HEADER.size : _HEADER.size + id_len].decode("utf-8", "surrogatepass")
    if found_identity != identity:
        return f"it belongs to embedder {found_identity!r}, expected {identity!r}"
    if file_dim != dim:
        return f"it holds {file_dim}-d vectors, expected {dim}-d"
    keys = data[keys_at:matrix_at]
    rows = {keys[i : i + _KEY_BYTES]: r for r, i in enumerate(range(0, len(keys), _KEY_BYTES))}
    matrix = np.frombuffer(data, dtype="<f4", count=file_dim * count, offset=matrix_at)
    return _Table(dim=dim, rows=rows, matrix=matrix.reshape(count, file_dim))


def _signature(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_mtime_ns, st.st_size, st.st_ino)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Advisory exclusive lock on ``path`` where the platform has one; else nothing."""
    if sys.platform == "win32":
        yield
        return
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield  # unlocked merge: last writer wins, still never a torn file
        return
    try:
        with contextlib.suppress(OSError):  # e.g. ENOLCK on some network filesystems
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


class EmbeddingCache:
    """Vectors of texts on disk, per embedder identity.

    Args:
        directory: where the files live; created on first write.
        max_entries: rows kept per identity; when a write would exceed it, the
            rows written longest ago are dropped.

    **Error handling:** nothing here raises for a bad file or a bad directory.
    Unusable files produce a ``CacheWarning`` (once per file version) and read
    as empty; an unwritable directory produces one ``CacheWarning`` and every
    later write is skipped.

    **Threads:** safe to share between threads; one lock serialises writes and
    the in-memory copy of each file.
    """

    def __init__(
        self, directory: str | os.PathLike[str], *, max_entries: int = DEFAULT_MAX_ENTRIES
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.directory = Path(directory)
        self.max_entries = max_entries
        self._lock = threading.Lock()
        # identity -> (file signature, table) of the last file read or written
        self._loaded: dict[str, tuple[tuple[int, int, int], _Table]] = {}
        # (identity, signature) of files already warned about, so each bad file
        # warns once rather than on every lookup
        self._reported: set[tuple[str, tuple[int, int, int]]] = set()
        self._disabled = False

    def __repr__(self) -> str:
        return f"EmbeddingCache({str(self.directory)!r})"

    def path_for(self, identity: str) -> Path:
        """The file holding ``identity``'s vectors."""
        name = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()
        return self.directory / (name + _SUFFIX)

    def get_many(
        self, identity: str, dim: int, texts: Sequence[str]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        """Cached vectors of ``texts``.

        Args:
            identity: the embedder's ``identity``.
            dim: the embedder's ``dim``; a file of another width is ignored.
            texts: the texts to look up.

        Returns:
            ``(vectors, found)``: float32 ``(len(texts), dim)`` and bool
            ``(len(texts),)``. Rows where ``found`` is false are zeros.
        """
        vectors = np.zeros((len(texts), dim), dtype=np.float32)
        found = np.zeros(len(texts), dtype=np.bool_)
        with self._lock:
            table = self._current(identity, dim)
        if table is None or not table.rows:
            return vectors, found
        hits = [
            (i, r) for i, t in enumerate(texts) if (r := table.rows.get(text_key(t))) is not None
        ]
        if hits:
            positions, rows = zip(*hits, strict=True)
            vectors[list(positions)] = table.matrix[list(rows)]
            found[list(positions)] = True
        return vectors, found

    def put_many(
        self, identity: str, texts: Sequence[str], vectors: npt.NDArray[np.floating]
    ) -> None:
        """Store ``vectors[i]`` as the vector of ``texts[i]``, merging with the file.

        Args:
            identity: the embedder's ``identity``.
            texts: the texts embedded.
            vectors: shape ``(len(texts), dim)``; rows with NaN or infinity are
                not stored.

        Raises:
            ValueError: ``vectors`` does not have one row per text.
        """
        array = np.asarray(vectors, dtype=np.float32)
        if array.ndim != 2 or array.shape[0] != len(texts):
            raise ValueError(f"expected vectors of shape ({len(texts)}, dim), got {array.shape}")
        dim = array.shape[1]
        finite = np.all(np.isfinite(array), axis=1, keepdims=False).tolist()
        new = {text_key(t): i for i, t in enumerate(texts) if finite[i]}
        if not new:
            return
        with self._lock:
            if self._disabled:
                return
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                path = self.path_for(identity)
                with _file_lock(path.with_name(path.name + ".lock")):
                    old = self._current(identity, dim)
                    data = self._merge(identity, dim, old, new, array)
                    signature = _write_atomically(path, data)
            except OSError as exc:
                self._disabled = True
                warnings.warn(
                    CacheWarning(
                        f"cannot write embedding cache in {self.directory} ({exc}); "
                        "continuing without a cache"
                    ),
                    stacklevel=2,
                )
                return
            decoded = decode_table(data, identity, dim)
            assert isinstance(decoded, _Table)  # we just encoded it
            self._loaded[identity] = (signature, decoded)

    def _merge(
        self,
        identity: str,
        dim: int,
        old: _Table | None,
        new: dict[bytes, int],
        array: npt.NDArray[np.float32],
    ) -> bytes:
        # Old rows first, in file order, then new rows: the file is oldest-first,
        # which is what max_entries trims from.
        kept = [k for k in old.rows if k not in new] if old is not None else []
        keys = kept + list(new)
        parts = []
        if kept and old is not None:
            parts.append(old.matrix[[old.rows[k] for k in kept]])
        parts.append(array[list(new.values())])
        matrix = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if len(keys) > self.max_entries:
            drop = len(keys) - self.max_entries
            keys, matrix = keys[drop:], matrix[drop:]
        return encode_table(identity, dim, keys, matrix)

    def _current(self, identity: str, dim: int) -> _Table | None:
        """The file's table, re-read only when the file changed. Call with the lock held."""
        path = self.path_for(identity)
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            self._loaded.pop(identity, None)
            return None
        except OSError as exc:
            self._warn_once(identity, (0, 0, 0), f"cannot access {path} ({exc})")
            return None
        signature = _signature(st)
        memo = self._loaded.get(identity)
        if memo is not None and memo[0] == signature and memo[1].dim == dim:
            return memo[1]
        if (identity, signature) in self._reported:
            return None
        try:
            data = path.read_bytes()
        except OSError as exc:
            self._warn_once(identity, signature, f"cannot read {path} ({exc})")
            return None
        decoded = decode_table(data, identity, dim)
        if isinstance(decoded, str):
            self._warn_once(
                identity,
                signature,
                f"ignoring embedding cache file {path}: {decoded}; it will be rebuilt",
            )
            return None
        self._loaded[identity] = (signature, decoded)
        return decoded

    def _warn_once(self, identity: str, signature: tuple[int, int, int], message: str) -> None:
        if (identity, signature) not in self._reported:
            self._reported.add((identity, signature))
            warnings.warn(CacheWarning(message), stacklevel=4)


def _write_atomically(path: Path, data: bytes) -> tuple[int, int, int]:
    """Replace ``path`` with ``data`` so no reader sees a partial file; its new signature."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            signature = _signature(os.fstat(f.fileno()))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(path.parent)
    return signature


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable; not possible (nor needed) on Windows.
    if sys.platform == "win32":
        return
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _usable_directory(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError:
        return False
    return True


def _private_temp_directory() -> Path:
    base = Path(tempfile.gettempdir())
    uid = os.getuid() if hasattr(os, "getuid") else None
    if uid is not None:
        # A fixed per-user name survives restarts; accept it only if it is ours and
        # private, since another user could have planted vectors in it.
        shared = base / f"toolroute-cache-{uid}"
        with contextlib.suppress(OSError):
            shared.mkdir(mode=0o700, exist_ok=True)
            st = shared.lstat()
            if (
                stat.S_ISDIR(st.st_mode)
                and st.st_uid == uid
                and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
                and _usable_directory(shared)
            ):
                return shared
    return Path(tempfile.mkdtemp(prefix="toolroute-cache-"))


def default_cache_dir() -> Path:
    """Where toolroute caches embeddings unless told otherwise.

    Returns:
        ``$TOOLROUTE_CACHE_DIR`` if set (and not blank), else ``$XDG_CACHE_HOME/toolroute``
        if ``XDG_CACHE_HOME`` is an absolute path, else ``~/.cache/toolroute``; created if
        missing. If that directory cannot be written, a private directory under the system
        temp dir instead, with a ``CacheWarning`` naming both.
    """
    env = os.environ.get("TOOLROUTE_CACHE_DIR", "")
    candidate: Path | None
    source: str
    if env.strip():
        source = f"TOOLROUTE_CACHE_DIR={env!r}"
        try:
            candidate = Path(env).expanduser()
        except RuntimeError:  # "~user/..." naming no user, or "~" with no home
            candidate = None
    elif (xdg := os.environ.get("XDG_CACHE_HOME")) and os.path.isabs(xdg):
        source = f"XDG_CACHE_HOME={xdg!r}"
        candidate = Path(xdg) / "toolroute"
    else:
        source = "the home directory"
        try:
            home = Path.home()
        except RuntimeError:  # no HOME and no passwd entry
            home = None
        # A relative HOME would put the cache under whatever the working directory is.
        candidate = home / ".cache" / "toolroute" if home and home.is_absolute() else None
    if candidate is not None and _usable_directory(candidate):
        return candidate
    fallback = _private_temp_directory()
    where = "cannot be resolved" if candidate is None else f"gives {candidate}, not writable"
    warnings.warn(
        CacheWarning(
            f"the cache directory from {source} {where}; expected a writable directory, "
            f"caching in {fallback} instead"
        ),
        stacklevel=2,
    )
    return fallback


def embed_with_cache(
    embedder: Embedder,
    texts: Sequence[str],
    cache: EmbeddingStore | None,
    progress: Progress | None = None,
    step: int | None = None,
) -> npt.NDArray[np.float32]:
    """Vectors of ``texts``: cached ones from disk, the rest from the embedder (then cached).

    Raises whatever the embedder raises; a broken cache only costs re-embedding.
    """
    dim = int(embedder.dim)
    if cache is not None:
        vectors, found = cache.get_many(embedder.identity, dim, texts)
    else:
        vectors, found = np.zeros((len(texts), dim), dtype=np.float32), np.zeros(len(texts), bool)
    missing = np.flatnonzero(~found)
    done = 0
    try:
        for finished in embed_into(embedder, texts, vectors, missing, progress, step):
            done = finished
    finally:
        # One write at the end (or at a failure, keeping what was embedded): the cache
        # merges whole files, so writing per chunk would cost quadratic I/O.
        if cache is not None and done:
            kept = missing[:done]
            cache.put_many(embedder.identity, [texts[i] for i in kept], vectors[kept])
    return vectors

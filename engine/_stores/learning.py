"""Learned evidence in memory and on disk (the local ``LearningStore``s).

On disk, one folder per embedder identity and one file per tool::

    <directory>/<sha256(identity)>/<sha256(tool id)>.npz
        identity, tool_id   the names, to check a file belongs where it lies
        vectors             float32 (n, dim): the requests' vectors
        digests, sources    (n,) strings: SHA-256 of each request, "example" or "use"
        texts               (n,) strings: only in a file written with texts kept

No request text reaches the disk unless the engine was configured to keep it
(``LearningConfig.keep_text``): the engine hands the store entries without text, and a
file without texts has no ``texts`` array. Files are replaced atomically (temporary file,
fsync, ``os.replace``); a file that does not load or belongs elsewhere is ignored with a
``CacheWarning``; an unwritable directory costs only the persistence.
"""

from __future__ import annotations

import hashlib
import io
import os
import warnings
import zipfile
from collections.abc import Collection, Sequence
from pathlib import Path

import numpy as np

from .._core.stores import LearnedExample
from .embedding_cache import CacheWarning, _write_atomically


class MemoryLearningStore:
    """Learned evidence in this process only (lost when it ends)."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, tuple[LearnedExample, ...]]] = {}

    def __repr__(self) -> str:
        return "MemoryLearningStore()"

    def load(self, identity: str) -> dict[str, tuple[LearnedExample, ...]]:
        return dict(self._entries.get(identity, {}))

    def save(self, identity: str, tool_id: str, entries: Sequence[LearnedExample]) -> None:
        tools = self._entries.setdefault(identity, {})
        if entries:
            tools[tool_id] = tuple(entries)
        else:
            tools.pop(tool_id, None)

    def forget(self, identity: str, tool_ids: Collection[str] | None = None) -> None:
        tools = self._entries.get(identity, {})
        for tool_id in list(tools) if tool_ids is None else tool_ids:
            tools.pop(tool_id, None)


def _name(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class LearningCache:
    """Learned evidence on disk under ``directory``, a file per tool (see the module).
    Synchronous; never raises for I/O trouble (``CacheWarning`` instead).

    Args:
        directory: where the folders live; created on first write.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def __repr__(self) -> str:
        return f"LearningCache({str(self.directory)!r})"

    def folder_for(self, identity: str) -> Path:
        """The folder holding ``identity``'s files."""
        return self.directory / _name(identity)

    def load(self, identity: str) -> dict[str, tuple[LearnedExample, ...]]:
        folder = self.folder_for(identity)
        try:
            paths = sorted(folder.glob("*.npz"))
        except OSError as exc:
            warnings.warn(CacheWarning(f"cannot read {folder} ({exc})"), stacklevel=2)
            return {}
        found: dict[str, tuple[LearnedExample, ...]] = {}
        for path in paths:
            read = _read(path, identity)
            if isinstance(read, str):
                warnings.warn(
                    CacheWarning(f"ignoring learning file {path}: {read}; it will be rewritten"),
                    stacklevel=2,
                )
                continue
            tool_id, entries = read
            if path.name == f"{_name(tool_id)}.npz" and entries:
                found[tool_id] = entries
        return found

    def save(self, identity: str, tool_id: str, entries: Sequence[LearnedExample]) -> None:
        path = self.folder_for(identity) / f"{_name(tool_id)}.npz"
        try:
            if not entries:
                path.unlink(missing_ok=True)
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, _encoded(identity, tool_id, entries))
        except OSError as exc:
            warnings.warn(
                CacheWarning(f"cannot write learning file {path} ({exc}); kept in memory only"),
                stacklevel=2,
            )

    def forget(self, identity: str, tool_ids: Collection[str] | None = None) -> None:
        folder = self.folder_for(identity)
        try:
            if tool_ids is None:
                paths = list(folder.glob("*.npz"))
            else:
                paths = [folder / f"{_name(t)}.npz" for t in tool_ids]
            for path in paths:
                path.unlink(missing_ok=True)
        except OSError as exc:
            warnings.warn(
                CacheWarning(f"cannot remove learning files in {folder} ({exc})"), stacklevel=2
            )


def _encoded(identity: str, tool_id: str, entries: Sequence[LearnedExample]) -> bytes:
    arrays = {
        "identity": np.array(identity),
        "tool_id": np.array(tool_id),
        "vectors": np.stack([np.asarray(e.vector, dtype=np.float32) for e in entries]),
        "digests": np.array([e.digest for e in entries]),
        "sources": np.array([e.source for e in entries]),
    }
    if any(e.text is not None for e in entries):
        arrays["texts"] = np.array([e.text or "" for e in entries])
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def _read(path: Path | io.BytesIO, identity: str) -> tuple[str, tuple[LearnedExample, ...]] | str:
    """The tool id and entries in ``path`` (a file, or a file's bytes a shared store read),
    or a sentence saying why they cannot be used."""
    try:
        # Read whole first: np.load leaves its own file open when the zip does not parse.
        raw = io.BytesIO(path.getvalue() if isinstance(path, io.BytesIO) else path.read_bytes())
        with np.load(raw, allow_pickle=False) as data:
            if str(data["identity"]) != identity:
                return f"it belongs to embedder {str(data['identity'])!r}"
            vectors = np.asarray(data["vectors"], dtype=np.float32)
            digests = [str(d) for d in data["digests"]]
            sources = [str(s) for s in data["sources"]]
            texts = [str(t) for t in data["texts"]] if "texts" in data else None
            tool_id = str(data["tool_id"])
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        return f"it does not load ({type(exc).__name__})"
    if vectors.ndim != 2 or not len(vectors) == len(digests) == len(sources):
        return "its arrays do not match"
    entries = tuple(
        LearnedExample(
            digest=digests[i],
            vector=vectors[i],
            source=sources[i],
            text=(texts[i] or None) if texts is not None else None,
        )
        for i in range(len(digests))
    )
    return tool_id, entries

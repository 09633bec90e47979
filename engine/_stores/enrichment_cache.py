"""Enrichment phrases on disk, one file per generator identity (the local ``EnrichmentStore``).

File ``<directory>/<sha256(identity)>.json``::

    {"format": "toolroute-enrichment", "version": 1, "identity": "...",
     "sha256": "<sha256 of the entries' JSON as written>", "entries": {key: [phrase, ...]}}

Writers merge with the file under an advisory lock and replace it atomically (temporary file,
fsync, ``os.replace``), as the embedding cache does. A file that does not parse, fails its
checksum or belongs to another identity or version is ignored with a ``CacheWarning`` and
rebuilt by the next write; an unwritable directory costs only the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from .embedding_cache import CacheWarning, _file_lock, _write_atomically

#: File format; bump ``VERSION`` when the prompt changes enough to re-enrich every tool.
FORMAT: Final = "toolroute-enrichment"
VERSION: Final = 1
#: Entries kept per identity file; the oldest are dropped first.
MAX_ENTRIES: Final = 100_000


def _entries_json(entries: Mapping[str, Sequence[str]]) -> str:
    return json.dumps(
        {key: list(value) for key, value in entries.items()},
        ensure_ascii=False,
        separators=(",", ":"),
    )


def encode_entries(identity: str, entries: Mapping[str, Sequence[str]]) -> bytes:
    """The file bytes holding ``entries`` (key → phrases) for ``identity``."""
    body = _entries_json(entries)
    checksum = hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()
    head = json.dumps(
        {"format": FORMAT, "version": VERSION, "identity": identity, "sha256": checksum},
        ensure_ascii=False,
    )
    return (head[:-1] + ', "entries": ' + body + "}\n").encode("utf-8", "surrogatepass")


def decode_entries(data: bytes, identity: str) -> dict[str, tuple[str, ...]] | str:
    """The entries in ``data``, or a sentence saying why they cannot be used."""
    try:
        document = json.loads(data.decode("utf-8", "surrogatepass"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return f"it is not JSON ({type(exc).__name__})"
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        return f"it is not a {FORMAT} file"
    if document.get("version") != VERSION:
        return f"it has format version {document.get('version')!r}, expected {VERSION}"
    if document.get("identity") != identity:
        return f"it belongs to generator {document.get('identity')!r}, expected {identity!r}"
    entries = document.get("entries")
    if not isinstance(entries, dict) or not all(
        isinstance(value, list) and all(isinstance(p, str) for p in value)
        for value in entries.values()
    ):
        return "its entries are malformed"
    checksum = hashlib.sha256(_entries_json(entries).encode("utf-8", "surrogatepass")).hexdigest()
    if document.get("sha256") != checksum:
        return "its checksum does not match its contents (corrupted)"
    return {key: tuple(value) for key, value in entries.items()}


class _IdentityFile:
    """One generator identity's file."""

    def __init__(self, directory: Path, identity: str) -> None:
        self.directory = Path(directory)
        self.identity = identity
        name = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()
        self.path = self.directory / f"{name}.json"

    def load(self) -> dict[str, tuple[str, ...]]:
        """The stored entries; empty (after a ``CacheWarning``) when the file is unusable."""
        return self._read(warn=True)

    def save(self, new: Mapping[str, Sequence[str]]) -> None:
        """Merge ``new`` into the file (new entries win; the oldest are trimmed past
        ``MAX_ENTRIES``) and replace it atomically."""
        if not new:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with _file_lock(self.path.with_name(self.path.name + ".lock")):
                merged = {k: v for k, v in self._read(warn=False).items() if k not in new}
                merged.update((key, tuple(value)) for key, value in new.items())
                if len(merged) > MAX_ENTRIES:
                    merged = dict(list(merged.items())[len(merged) - MAX_ENTRIES :])
                _write_atomically(self.path, encode_entries(self.identity, merged))
        except OSError as exc:
            warnings.warn(
                CacheWarning(
                    f"cannot write enrichment cache {self.path} ({exc}); continuing without it"
                ),
                stacklevel=3,
            )

    def _read(self, *, warn: bool) -> dict[str, tuple[str, ...]]:
        try:
            data = self.path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return {}
        except OSError as exc:
            if warn:
                warnings.warn(CacheWarning(f"cannot read {self.path} ({exc})"), stacklevel=4)
            return {}
        decoded = decode_entries(data, self.identity)
        if isinstance(decoded, str):
            if warn:
                warnings.warn(
                    CacheWarning(
                        f"ignoring enrichment cache file {self.path}: {decoded}; it will be rebuilt"
                    ),
                    stacklevel=4,
                )
            return {}
        return decoded


class EnrichmentCache:
    """Phrases on disk under ``directory``, a file per generator identity. Synchronous;
    never raises for I/O trouble (``CacheWarning`` instead).

    Args:
        directory: where the files live; created on first write.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def __repr__(self) -> str:
        return f"EnrichmentCache({str(self.directory)!r})"

    def path_for(self, identity: str) -> Path:
        """The file holding ``identity``'s phrases."""
        return _IdentityFile(self.directory, identity).path

    def load(self, identity: str) -> dict[str, tuple[str, ...]]:
        """The stored entries; empty (after a ``CacheWarning``) when the file is unusable."""
        return _IdentityFile(self.directory, identity).load()

    def save(self, identity: str, entries: Mapping[str, Sequence[str]]) -> None:
        """Merge ``entries`` into the file (new entries win; the oldest are trimmed past
        ``MAX_ENTRIES``) and replace it atomically."""
        _IdentityFile(self.directory, identity).save(entries)

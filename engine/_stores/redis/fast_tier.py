"""The fast tier's cache folder shared by every node through Redis, the folder the near tier.

The folder (``cache_dir/fast-tier/<model sha256>/``) holds ``.npy`` files and a
``manifest.json`` that names each file's sha256 and the learned texts it counts (statistics
and table only: never request text). In Redis, per model::

    <ns>:fast-tier:<model sha256>                 the manifest in use (a string)
    <ns>:fast-tier:<model sha256>:<sha256(manifest)>   a hash: field ``<file>`` the file's
                                                  chunk count, ``<file>:<i>`` its chunks

The manifest names the files' version (the statistics' identity), so the files of one
version never change; a writer stores every chunk first and the manifest last (it vouches
for the rest, as on disk), and an older version is left to expire a while later, not
deleted under a reader. A reader checks every file against the manifest's sha256 before the
folder gets it, and writes the manifest last: a torn or stale read leaves the folder as it
was, and the tier is fitted locally (fail-open).

Each Redis call carries one chunk at most, under the link's deadline. A share Redis cannot
take waits (the latest folder per model) and is made when Redis returns.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..embedding_cache import _write_atomically
from .caches import Command, _hset
from .link import UNAVAILABLE, RedisLink

if TYPE_CHECKING:
    import coredis

#: Bytes per Redis call: well inside the deadline on a loaded node.
CHUNK_BYTES: Final = 512 * 1024
#: Seconds an older version stays readable after a newer one is shared.
OLD_VERSION_S: Final = 600
_MANIFEST: Final = "manifest.json"


def _get(key: str) -> Command[bytes | None]:
    async def command(client: coredis.Redis[bytes]) -> bytes | None:
        return await client.get(key)

    return command


def _hget(key: str, field: str) -> Command[bytes | None]:
    async def command(client: coredis.Redis[bytes]) -> bytes | None:
        return await client.hget(key, field)

    return command


def _set(key: str, value: bytes) -> Command[bool]:
    async def command(client: coredis.Redis[bytes]) -> bool:
        return bool(await client.set(key, value))

    return command


def _expire(key: str, seconds: int) -> Command[bool]:
    async def command(client: coredis.Redis[bytes]) -> bool:
        return bool(await client.expire(key, seconds))

    return command


class RedisFastTierStore:
    """``FastTierStore`` over Redis (see the module).

    Args:
        link: the node's Redis link.
        chunk_bytes: bytes per Redis call.
    """

    def __init__(self, link: RedisLink, *, chunk_bytes: int = CHUNK_BYTES) -> None:
        self._link = link
        self._chunk = chunk_bytes
        self._lock = threading.Lock()
        self._pending: dict[str, str] = {}  # model sha256 -> folder, to share on return
        self.fetched = 0  # folders filled from Redis
        self.shared = 0  # versions this node wrote
        link.on_resync(self._resync, self.pending)

    def __repr__(self) -> str:
        return "RedisFastTierStore()"

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def _key(self, sha: str, *version: str) -> str:
        return self._link.key("fast-tier", sha, *version)

    def fetch(self, model_sha256: str, folder: str) -> bool:
        manifest = self._link.call_from_thread("fast tier read", _get(self._key(model_sha256)))
        if manifest is UNAVAILABLE or manifest is None:
            return False
        shared = _parsed(manifest)
        if shared is None or shared.get("model_sha256") != model_sha256:
            return False
        directory = Path(folder)
        local = _read_manifest(directory)
        if local is not None and _texts(local) >= _texts(shared):
            return False  # the near tier knows as much: no transfer
        key = self._key(model_sha256, _digest(manifest))
        files: dict[str, bytes] = {}
        for name, sha in shared["sha256"].items():
            content = self._read_file(key, name)
            if content is None or hashlib.sha256(content).hexdigest() != sha:
                return False  # torn, expired or down: the tier is fitted locally
            files[name] = content
        try:
            _write_folder(directory, files, manifest)
        except OSError:
            return False
        self.fetched += 1
        return True

    def _read_file(self, key: str, name: str) -> bytes | None:
        count = self._link.call_from_thread("fast tier read", _hget(key, name))
        if count is UNAVAILABLE or count is None or not count.isdigit():
            return None
        parts = []
        for i in range(int(count)):
            part = self._link.call_from_thread("fast tier read", _hget(key, f"{name}:{i}"))
            if part is UNAVAILABLE or part is None:
                return None
            parts.append(part)
        return b"".join(parts)

    def share(self, model_sha256: str, folder: str) -> None:
        if not self._send(model_sha256, folder):
            with self._lock:
                self._pending[model_sha256] = folder

    def _send(self, sha: str, folder: str) -> bool:
        """Write ``folder``'s version unless Redis has it; whether Redis took (or had) it."""
        directory = Path(folder)
        try:
            manifest = (directory / _MANIFEST).read_bytes()
        except OSError:
            return True  # nothing saved (yet): nothing to share
        parsed = _parsed(manifest)
        if parsed is None or parsed.get("model_sha256") != sha:
            return True
        pointer = self._key(sha)
        current = self._link.call_from_thread("fast tier write", _get(pointer))
        if current is UNAVAILABLE:
            return False
        if current == manifest:
            return True
        version = self._key(sha, _digest(manifest))
        for name, digest in parsed["sha256"].items():
            try:
                content = (directory / name).read_bytes()
            except OSError:
                return True  # the folder is being rewritten: its next save shares it
            if hashlib.sha256(content).hexdigest() != digest:
                return True
            if not self._write_file(version, name, content):
                return False
        if self._link.call_from_thread("fast tier write", _set(pointer, manifest)) is UNAVAILABLE:
            return False
        if current is not None:  # the older version: readable a while longer for its readers
            old = self._key(sha, _digest(current))
            self._link.call_from_thread("fast tier write", _expire(old, OLD_VERSION_S))
        self.shared += 1
        return True

    def _write_file(self, key: str, name: str, content: bytes) -> bool:
        chunks = [content[i : i + self._chunk] for i in range(0, len(content), self._chunk)]
        for i, chunk in enumerate(chunks):
            sent = self._link.call_from_thread(
                "fast tier write", _hset(key, {f"{name}:{i}": chunk})
            )
            if sent is UNAVAILABLE:
                return False
        count = str(len(chunks)).encode()
        return (
            self._link.call_from_thread("fast tier write", _hset(key, {name: count}))
            is not UNAVAILABLE
        )

    async def _resync(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        items = list(pending.items())
        for at, (sha, folder) in enumerate(items):
            # The files are read and sent from a worker thread, as a share is.
            if not await _in_thread(self._send, sha, folder):
                with self._lock:  # down again: the rest waits (a newer share stands)
                    for unsent, unsent_folder in items[at:]:
                        self._pending.setdefault(unsent, unsent_folder)
                return
            self._link.counters.writes_resynced += 1


async def _in_thread(fn: Any, *args: Any) -> bool:
    import trio

    result: bool = await trio.to_thread.run_sync(fn, *args)
    return result


def _digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def _parsed(manifest: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(manifest.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("sha256"), dict):
        return None
    names = parsed["sha256"]
    if not all(isinstance(n, str) and "/" not in n and n != _MANIFEST for n in names):
        return None  # a name that would leave the folder is never written
    return parsed


def _read_manifest(directory: Path) -> dict[str, Any] | None:
    try:
        return _parsed((directory / _MANIFEST).read_bytes())
    except OSError:
        return None


def _texts(manifest: dict[str, Any]) -> int:
    texts = manifest.get("texts")
    return texts if isinstance(texts, int) else -1


def _write_folder(directory: Path, files: dict[str, bytes], manifest: bytes) -> None:
    """Each file replaced atomically, the manifest last (it vouches for the rest)."""
    directory.mkdir(parents=True, exist_ok=True)
    # Until the new manifest is in, the folder vouches for nothing: an interrupted fetch
    # leaves files no manifest names, and the tier is fitted again, never misread.
    (directory / _MANIFEST).unlink(missing_ok=True)
    for name, content in (*files.items(), (_MANIFEST, manifest)):
        # Through a temporary file of this writer's own: workers of one host sharing the
        # folder may fetch at the same moment, and must not write into one another's file.
        _write_atomically(directory / name, content)

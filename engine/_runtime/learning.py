"""Learning as an engine service: example requests and the tools agents used, as evidence
recall ranks with.

The service owns the book (tool id → its bounded evidence, ``learned.merged``) and is its
only writer; everything reaches it as a message in its inbox, in arrival order:

- ``Learn`` (``Engine.learn``, or a step's recorded tool calls): embed the request, add it
  to each tool's evidence, save those tools' entries in the learning store;
- ``Sync`` (a new snapshot): give the catalogue's example requests vectors (only those not
  in the book yet) and drop the examples its tools no longer carry;
- ``Forget`` (``Engine.forget``): remove what was learned from use, per tool or all;
- ``Reload`` (``Engine.reload_learned``): read tools' evidence again from the store (what
  another node of a fleet learned).

Recall reads the evidence with no round trip: ``applied(index)`` is the index with the
book's current evidence, built once per (index, book version). The privacy rule
(``LearningConfig``): an entry carries its request's text only when ``keep_text`` is on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

import attrs
import numpy as np
import numpy.typing as npt
import trio

from .._core.catalog.catalog import Catalog, Server, id_tuple
from .._core.config import EngineConfig
from .._core.errors import ConfigError
from .._core.events import Event, FailOpen
from .._core.recall.index import RecallIndex, brief
from .._core.recall.learned import learned_scores, merged, request_digest
from .._core.routing.usage import SimilarUses, UseLog
from .._core.select.arguments import query_text
from .._core.stores import LearnedExample, LearningStore
from .recall import query_vectors
from .snapshot import Snapshot
from .workers import EngineClosing, WorkerCalls

if TYPE_CHECKING:
    from ..providers import Embedder

Vectors = npt.NDArray[np.float32]
T = TypeVar("T")

#: Requests waiting to be learned; a step's recorded calls past it are dropped (counted).
INBOX = 256


@attrs.frozen
class Learn:
    """Learn that ``tool_ids`` served ``request``; ``reply`` gets whether it was recorded
    (``None``: recorded from a step, nobody waits)."""

    request: str
    tool_ids: tuple[str, ...]
    reply: trio.MemorySendChannel[bool] | None = None


@attrs.frozen
class Sync:
    """Bring the examples of ``index``'s catalogue into the book."""

    index: RecallIndex
    reply: trio.MemorySendChannel[None] | None = None


@attrs.frozen
class Forget:
    """Forget what was learned from use for ``tool_ids`` (``None``: every tool)."""

    tool_ids: tuple[str, ...] | None
    reply: trio.MemorySendChannel[None]


@attrs.frozen
class Reload:
    """Read ``tool_ids``' evidence (``None``: every tool's) again from the store: what
    another node of a fleet wrote there."""

    tool_ids: tuple[str, ...] | None
    reply: trio.MemorySendChannel[None]


Message = Learn | Sync | Forget | Reload


class Learning:
    """The learning service behind ``Engine.learn`` / ``forget`` and recall's evidence.

    Args:
        store: where the evidence is kept.
        embedder: the engine's embedder (evidence is kept per its identity).
        config: the engine's config (``learning``).
        workers: where embedding and store I/O run.
        cpu: the limiter model work shares with recall and warm-up.
        snapshot: the keeper's current snapshot.
        publish: the event hub's ``publish``.
    """

    def __init__(
        self,
        store: LearningStore,
        embedder: Embedder,
        *,
        config: EngineConfig,
        workers: WorkerCalls,
        cpu: trio.CapacityLimiter,
        snapshot: Callable[[], Snapshot],
        publish: Callable[[Event], None],
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._identity = str(getattr(embedder, "identity", ""))
        self._config = config.learning
        self._correct_spelling = config.correct_spelling
        self._deadline = config.learning.deadline_s
        self._workers = workers
        self._cpu = cpu
        self._snapshot = snapshot
        self._publish = publish
        self._book: dict[str, tuple[LearnedExample, ...]] = {}
        self._loaded = False
        self._io = trio.CapacityLimiter(1)  # the store's reads and writes, one at a time
        self._version = 0
        self._memo: tuple[RecallIndex, RecallIndex] | None = None  # (served, with evidence)
        self._synced: RecallIndex | None = None
        self._uses: tuple[int, UseLog | None] | None = None  # (book version, its use log)
        self._send, self._receive = trio.open_memory_channel[Message](INBOX)
        self.dropped = 0  # recorded calls dropped on a full inbox

    # -- read by recall, on the event loop ---------------------------------------------------

    def has_evidence(self, tool_id: str) -> bool:
        """Whether the book holds evidence for ``tool_id`` (``forget`` checks its ids)."""
        return tool_id in self._book

    def applied(self, index: RecallIndex) -> RecallIndex:
        """``index`` with the book's evidence (``index`` itself when there is none).

        The service builds it in a worker thread after every change (``_refresh``) and
        answers ``learn`` / ``forget`` only then; until then a request keeps the evidence
        built before the change. A request builds it here only when it meets a snapshot for
        the first time.
        """
        if index is not self._synced and index.vectors is not None:
            self._synced = index
            self._nowait(Sync(index))
        if index.vectors is None or not self._book:
            return index
        memo = self._memo
        if memo is not None and memo[0] is index:
            return memo[1]
        learned = self._built(index, self._book)
        self._memo = (index, learned)
        return learned

    @staticmethod
    def _built(index: RecallIndex, book: Mapping[str, Sequence[LearnedExample]]) -> RecallIndex:
        assert index.vectors is not None
        evidence = {t: np.stack([e.vector for e in entries]) for t, entries in book.items()}
        return index.with_learned(learned_scores(index.ids, index.vectors.matrix, evidence))

    async def _refresh(self) -> None:
        """Build the served index's evidence now, off the event loop, for the next request."""
        index, version, book = self._snapshot().index, self._version, dict(self._book)
        if index.vectors is None or not book:
            return
        try:
            learned = await self._workers.run(self._built, index, book, limiter=self._cpu)
        except EngineClosing:
            return
        if self._version == version:  # nothing changed meanwhile (it is only a head start)
            self._memo = (index, learned)

    async def similar_uses(
        self, request: str, servers: Sequence[Server], deadline_s: float
    ) -> SimilarUses | None:
        """How many of the learned requests nearest ``request`` used each of ``servers``.

        **Fail-open:** ``None`` when nothing was learned from use, or (after a ``fail_open``
        event) when the request could not be embedded within ``deadline_s``: routing then
        judges on the text alone.
        """
        request = self._read(self._snapshot().index, request)
        version, known = self._version, self._uses
        fresh = known is not None and known[0] == version
        if not self._book or (fresh and known is not None and known[1] is None):
            return None
        book = None if fresh else dict(self._book)  # a copy: the service may change it
        reason = f"missed the embedding deadline ({deadline_s:g} s)"
        with trio.move_on_after(deadline_s):
            try:
                return await self._workers.run(
                    self._similar, request, servers, version, book, limiter=self._cpu
                )
            except EngineClosing:
                return None
            except Exception as exc:
                reason = f"failed: {brief(exc)}"
        self._publish(
            FailOpen(
                operation="route_servers",
                what_failed="learning",
                reason=f"similar learned requests not counted: the request's embedding {reason}",
            )
        )
        return None

    def _similar(
        self,
        request: str,
        servers: Sequence[Server],
        version: int,
        book: Mapping[str, Sequence[LearnedExample]] | None,
    ) -> SimilarUses | None:
        """In a worker: the use log (built from ``book`` when given), then the counts."""
        if book is not None:
            self._uses = (version, UseLog.from_book(book))
        log = self._uses[1] if self._uses is not None else None
        if log is None:
            return None
        vectors = query_vectors(self._embedder, [request], log.dim)
        return log.similar(vectors[0], servers)

    # -- callers ------------------------------------------------------------------------------

    async def learn(self, request: str, tool_ids: tuple[str, ...]) -> bool:
        """Record that ``tool_ids`` served ``request``; whether it was recorded."""
        send, receive = trio.open_memory_channel[bool](1)
        try:
            await self._send.send(Learn(request, tool_ids, send))
            async with receive:
                return await receive.receive()
        except (trio.BrokenResourceError, trio.EndOfChannel, trio.ClosedResourceError):
            return False  # the service restarted meanwhile: nothing recorded

    def offer(self, request: str, tool_names: Sequence[str]) -> None:
        """A step's tool calls, to learn from without waiting (dropped on a full inbox)."""
        self._nowait(Learn(request, tuple(tool_names)))

    async def forget(self, tool_ids: tuple[str, ...] | None) -> None:
        send, receive = trio.open_memory_channel[None](1)
        await self._send.send(Forget(tool_ids, send))
        await _reply(receive)

    async def reload(self, tool_ids: tuple[str, ...] | None) -> None:
        send, receive = trio.open_memory_channel[None](1)
        await self._send.send(Reload(tool_ids, send))
        await _reply(receive)

    async def ready(self) -> None:
        """Wait until the current snapshot's catalogue examples are in the book."""
        index = self._snapshot().index
        if index.vectors is None:
            return
        send, receive = trio.open_memory_channel[None](1)
        self._synced = index
        await self._send.send(Sync(index, send))
        await _reply(receive)

    def _nowait(self, message: Message) -> None:
        try:
            self._send.send_nowait(message)
        except trio.WouldBlock:
            self.dropped += 1
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    # -- the service --------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load the store, then serve the inbox until cancelled.

        **Fail-open:** a store that cannot be read starts an empty book; a request that
        cannot be embedded is not learned (its caller hears ``False``); nothing raises.
        """
        # Started at once: the engine's start never waits for the store; requests meanwhile
        # rank without evidence, and messages wait in the inbox until it is loaded.
        task_status.started()
        if not self._loaded:
            loaded: Mapping[str, Sequence[LearnedExample]] = {}
            try:
                loaded = await self._workers.run(self._store.load, self._identity, limiter=self._io)
            except EngineClosing:
                return
            except Exception as exc:
                self._fail("open_engine", f"the learning store could not be read: {brief(exc)}")
            bound = self._config.per_tool
            self._book = {t: merged((), e, bound) for t, e in loaded.items() if e}
            self._loaded = True
            self._changed()
            await self._refresh()
        async for message in self._receive:
            # The reply closes whatever happens: a crash here ends the caller's wait
            # (``EndOfChannel``) instead of leaving it waiting for a reply that never comes.
            match message:
                case Learn():
                    with message.reply or contextlib.nullcontext():
                        recorded = await self._learn(message)
                        if message.reply is not None:
                            _answer(message.reply, recorded)
                case Sync():
                    with message.reply or contextlib.nullcontext():
                        await self._sync(message.index)
                        if message.reply is not None:
                            _answer(message.reply, None)
                case Forget():
                    with message.reply:
                        await self._forget(message.tool_ids)
                        _answer(message.reply, None)
                case Reload():
                    with message.reply:
                        await self._reload(message.tool_ids)
                        _answer(message.reply, None)

    async def _learn(self, message: Learn) -> bool:
        snapshot = self._snapshot()
        ids = _tool_ids(snapshot, message.tool_ids)
        index = snapshot.index
        if not ids or index.vectors is None:
            return False
        read = self._read(index, message.request)
        vectors = await self._embedded([read], index.vectors.dim, "learn")
        if vectors is None:
            return False
        digest = request_digest(message.request)
        if all(any(e.digest == digest for e in self._book.get(t, ())) for t in ids):
            return True  # known already (a conversation seen again on its next step)
        entry = LearnedExample(
            digest=digest,
            vector=np.array(vectors[0], dtype=np.float32),
            source="use",
            text=message.request if self._config.keep_text else None,
        )
        for tool_id in ids:
            self._book[tool_id] = merged(
                self._book.get(tool_id, ()), [entry], self._config.per_tool
            )
        self._changed()
        await self._save(ids)
        await self._refresh()
        return True

    async def _sync(self, index: RecallIndex) -> None:
        if index.vectors is None:
            return
        wanted: dict[str, dict[str, str]] = {}  # tool id -> digest -> example text
        for tool in index.catalog:
            wanted[tool.id] = {request_digest(t): t for t in tool.examples}
        touched: list[str] = []
        missing: list[tuple[str, str, str]] = []  # (tool id, digest, text)
        for tool_id, examples in wanted.items():
            kept = self._book.get(tool_id, ())
            current = tuple(e for e in kept if e.source != "example" or e.digest in examples)
            if len(current) != len(kept):
                self._book[tool_id] = current
                touched.append(tool_id)
            have = {e.digest for e in current if e.source == "example"}
            missing.extend((tool_id, d, text) for d, text in examples.items() if d not in have)
        if missing:
            vectors = await self._embedded([m[2] for m in missing], index.vectors.dim, "update")
            if vectors is not None:
                for (tool_id, digest, text), vector in zip(missing, vectors, strict=True):
                    entry = LearnedExample(
                        digest=digest,
                        vector=np.array(vector, dtype=np.float32),
                        source="example",
                        text=text if self._config.keep_text else None,
                    )
                    self._book[tool_id] = merged(
                        self._book.get(tool_id, ()), [entry], self._config.per_tool
                    )
                    touched.append(tool_id)
        if touched:
            self._book = {t: e for t, e in self._book.items() if e}
            self._changed()
            await self._save(tuple(dict.fromkeys(touched)))
        await self._refresh()  # for a new snapshot even when its examples did not change

    async def _forget(self, tool_ids: tuple[str, ...] | None) -> None:
        chosen = tuple(self._book) if tool_ids is None else tool_ids
        for tool_id in chosen:
            kept = tuple(e for e in self._book.get(tool_id, ()) if e.source != "use")
            if kept:
                self._book[tool_id] = kept
            else:
                self._book.pop(tool_id, None)
        self._changed()
        await self._save(chosen)
        await self._refresh()

    async def _reload(self, tool_ids: tuple[str, ...] | None) -> None:
        try:
            loaded = await self._workers.run(self._store.load, self._identity, limiter=self._io)
        except EngineClosing:
            return
        except Exception as exc:  # the book stays as it was
            self._fail("reload_learned", f"the learning store could not be read: {brief(exc)}")
            return
        chosen = set(self._book) | set(loaded) if tool_ids is None else set(tool_ids)
        for tool_id in chosen:
            entries = merged((), loaded.get(tool_id, ()), self._config.per_tool)
            if entries:
                self._book[tool_id] = entries
            else:
                self._book.pop(tool_id, None)
        self._changed()
        await self._refresh()

    def _read(self, index: RecallIndex, request: str) -> str:
        """``request`` as recall reads it (``RecallIndex.spelled``): what is learned from
        a request, and looked up for one, meets the requests ranked later."""
        return index.spelled(request) if self._correct_spelling else request

    async def _embedded(self, texts: list[str], dim: int, operation: str) -> Vectors | None:
        """The texts' vectors, or ``None`` (after a ``fail_open`` event) when the embedder
        failed or missed the deadline."""
        reason = f"the embedder missed the learning deadline ({self._deadline:g} s)"
        with trio.move_on_after(self._deadline):
            try:
                vectors: Vectors = await self._workers.run(
                    query_vectors, self._embedder, texts, dim, limiter=self._cpu
                )
                return vectors
            except EngineClosing:
                return None
            except Exception as exc:
                reason = f"the embedder failed: {brief(exc)}"
        self._fail(operation, f"nothing learned: {reason}")
        return None

    async def _save(self, tool_ids: Sequence[str]) -> None:
        entries = [(t, self._book.get(t, ())) for t in tool_ids]
        try:
            await self._workers.run(self._write, entries, limiter=self._io)
        except EngineClosing:
            return
        except Exception as exc:  # the book stays; only the persistence is lost
            self._fail("learn", f"the learning store could not be written: {brief(exc)}")

    def _write(self, entries: Sequence[tuple[str, Sequence[LearnedExample]]]) -> None:
        for tool_id, kept in entries:
            self._store.save(self._identity, tool_id, kept)

    def _changed(self) -> None:
        self._version += 1

    def _fail(self, operation: str, reason: str) -> None:
        self._publish(FailOpen(operation=operation, what_failed="learning", reason=reason))


async def _reply(receive: trio.MemoryReceiveChannel[None]) -> None:
    """Wait for the service's reply; a service that crashed meanwhile (and restarts) ends
    the wait too: what it was asked may not have happened, which fails open."""
    async with receive:
        with contextlib.suppress(trio.EndOfChannel):
            await receive.receive()


def _answer(reply: trio.MemorySendChannel[T], value: T) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.WouldBlock):  # the caller gave up
        reply.send_nowait(value)


def _tool_ids(snapshot: Snapshot, given: Sequence[str]) -> tuple[str, ...]:
    """The served tools ``given`` names, by id or by the name the model saw; names nothing
    serves (a call the model made up) are left out."""
    catalog = snapshot.index.catalog
    by_name = {tool.name: tool.id for tool in reversed(list(catalog))}
    known = snapshot.served_ids([g for g in given if g in snapshot.source])
    found = [tool_id for tool_id in known if tool_id in catalog]
    found.extend(by_name[g] for g in given if g not in snapshot.source and g in by_name)
    return tuple(dict.fromkeys(found))


def learn_arguments(request: object, tool_ids: object, catalog: Catalog) -> tuple[str, ...]:
    """``Engine.learn``'s tool ids, checked against ``catalog`` (the catalogue as given).

    Raises:
        ConfigError: ``request`` is not a non-empty string, or ``tool_ids`` is a bare
            string, empty, or names a tool ``catalog`` does not have.
    """
    if not query_text(request, "learn: request", "the request tool_ids served").strip():
        raise ConfigError("learn needs a non-empty request, got an empty string")
    ids = id_tuple(tool_ids, "tool_ids")  # type: ignore[arg-type]
    if not ids:
        raise ConfigError("learn needs at least one tool id in tool_ids, got none")
    for tool_id in ids:
        if not isinstance(tool_id, str) or tool_id not in catalog:
            raise ConfigError(f"learn: no tool with id {tool_id!r} in the catalogue")
    return ids


def forget_arguments(
    tool_ids: object, catalog: Catalog, learned: Callable[[str], bool]
) -> tuple[str, ...] | None:
    """``Engine.forget``'s tool ids (``None``: every tool), each in ``catalog`` (the
    catalogue as given) or ``learned`` (evidence of a tool since removed can be forgotten).

    Raises:
        ConfigError: a bare string, an id that is not a string, or one neither in
            ``catalog`` nor learned: a typo would otherwise forget nothing, silently.
    """
    ids = tool_id_arguments(tool_ids, "forget")
    for tool_id in ids or ():
        if tool_id not in catalog and not learned(tool_id):
            raise ConfigError(
                f"forget: no tool with id {tool_id!r} in the catalogue, and nothing learned for it"
            )
    return ids


def tool_id_arguments(tool_ids: object, operation: str) -> tuple[str, ...] | None:
    """``Engine.forget``'s or ``reload_learned``'s tool ids (``None``: every tool).

    Raises:
        ConfigError: a bare string, or an id that is not a string.
    """
    if tool_ids is None:
        return None
    ids = id_tuple(tool_ids, "tool_ids")  # type: ignore[arg-type]
    if not all(isinstance(i, str) for i in ids):
        raise ConfigError(f"{operation}: tool_ids must be strings")
    return ids

"""What the engine remembers, behind small protocols: embeddings, enrichment phrases, session
state, the routing cache and learned evidence.

The engine's runtime talks only to these protocols. The local implementations (disk files and
in-memory maps, ``toolroute._stores``) are the defaults; a shared store (Redis, say) plugs in
by implementing the same protocols and passing it to ``open_engine(stores=...)``, without
touching the runtime. Embedding, enrichment and learning stores are synchronous (the engine
calls them from worker threads, next to the model); the session store is async where a shared store
would need a round trip (holding a session for a step).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

import attrs
import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from .events import Event

V = TypeVar("V")


@runtime_checkable
class EmbeddingStore(Protocol):
    """Vectors of texts, per embedder identity. Never raises for storage trouble: a store
    that cannot read answers "not found", one that cannot write drops the write."""

    def get_many(
        self, identity: str, dim: int, texts: Sequence[str]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        """``(vectors, found)``: float32 ``(len(texts), dim)`` (zeros where not found) and
        bool ``(len(texts),)``."""
        ...

    def put_many(
        self, identity: str, texts: Sequence[str], vectors: npt.NDArray[np.floating]
    ) -> None:
        """Remember ``vectors[i]`` as the vector of ``texts[i]``."""
        ...


@runtime_checkable
class EnrichmentStore(Protocol):
    """Generated phrases per tool, per generator identity, keyed by a hash of the tool's
    text. Never raises for storage trouble (as ``EmbeddingStore``)."""

    def load(self, identity: str) -> dict[str, tuple[str, ...]]:
        """Every stored entry (key → phrases) for ``identity``; empty when there is none."""
        ...

    def save(self, identity: str, entries: Mapping[str, Sequence[str]]) -> None:
        """Merge ``entries`` into ``identity``'s (new entries win)."""
        ...


@attrs.frozen(kw_only=True, eq=False)
class LearnedExample:
    """One piece of evidence that a tool serves a request: the request's vector, never its
    text unless the host configured it (``LearningConfig.keep_text``).

    Attributes:
        digest: SHA-256 of the request's text (recognises a repeat; the text is not kept).
        vector: the request's unit vector under the store's embedder identity.
        source: ``"example"`` (given with the tool or through the API) or ``"use"``
            (an agent used the tool for the request).
        text: the request's text, only when configured; ``None`` otherwise.
    """

    digest: str
    vector: npt.NDArray[np.float32]
    source: str
    text: str | None = None


@runtime_checkable
class LearningStore(Protocol):
    """Learned evidence per tool, per embedder identity (a vector is only comparable with
    vectors of the same model). The engine bounds each tool's entries before it saves them.
    Never raises for storage trouble (as ``EmbeddingStore``)."""

    def load(self, identity: str) -> dict[str, tuple[LearnedExample, ...]]:
        """Every tool's entries (tool id → entries, oldest first) for ``identity``."""
        ...

    def save(self, identity: str, tool_id: str, entries: Sequence[LearnedExample]) -> None:
        """Make ``entries`` the evidence of ``tool_id`` (none: the tool has none)."""
        ...

    def forget(self, identity: str, tool_ids: Collection[str] | None = None) -> None:
        """Remove the evidence of ``tool_ids``; of every tool when ``None``."""
        ...


@runtime_checkable
class FastTierStore(Protocol):
    """The fast tier's cache folder (``cache_dir/fast-tier/<model sha256>/``: statistics and
    table, never request text) shared beyond this node, the folder its near tier.
    Synchronous (called from the tier's background thread). Never raises for storage
    trouble: a fetch that cannot be made leaves the folder as it is (the tier is built
    locally), a share that cannot be made is retried later or dropped."""

    def fetch(self, model_sha256: str, folder: str) -> bool:
        """Fill ``folder`` with the shared files of ``model_sha256``'s tier unless ``folder``
        already holds as much (its manifest counts at least as many learned texts);
        whether it did."""
        ...

    def share(self, model_sha256: str, folder: str) -> None:
        """Offer the files ``folder``'s manifest vouches for as the shared tier."""
        ...


@attrs.define
class SessionState:
    """What toolroute remembers about one agent conversation between steps.

    Attributes:
        idle_steps: consecutive steps in which the model called no tool (paging escalation).
        activated: tools the agent found through ``search_tools``; shown on its next step.
        forced_sets: tool sets the host forced; forced on every step until released.
        sticky_sets: tool sets an anchor activated, with the number of steps each stays forced.
        sticky_servers: MCP servers routing selected, with the routings each stays kept.
        last_seen: clock time of the last use (for idle expiry).
    """

    idle_steps: int = 0
    activated: tuple[str, ...] = ()
    forced_sets: tuple[str, ...] = ()
    sticky_sets: dict[str, int] = attrs.field(factory=dict)
    sticky_servers: dict[str, int] = attrs.field(factory=dict)
    last_seen: float = 0.0

    def force(self, names: Iterable[str]) -> None:
        self.forced_sets = tuple(dict.fromkeys((*self.forced_sets, *names)))

    def release(self, names: Collection[str]) -> None:
        """Stop forcing ``names``, whether the host forced them or an anchor made them sticky."""
        self.forced_sets = tuple(n for n in self.forced_sets if n not in names)
        for name in names:
            self.sticky_sets.pop(name, None)

    def step_sets(self) -> tuple[str, ...]:
        """The sets forced on this step (the host's, then the sticky ones); each sticky set
        has one step fewer to go."""
        carried = tuple(self.sticky_sets)
        self.sticky_sets = {n: left - 1 for n, left in self.sticky_sets.items() if left > 1}
        return tuple(dict.fromkeys((*self.forced_sets, *carried)))

    def remember(self, names: Iterable[str], steps: int) -> None:
        """Keep ``names`` forced for the next ``steps`` steps (0: not at all)."""
        if steps > 0:
            self.sticky_sets.update(dict.fromkeys(names, steps))

    def remember_servers(self, selected: Iterable[str], turns: int) -> None:
        """One routing happened: sticky servers have a turn fewer to go, and ``selected``
        stay kept for the next ``turns`` routings (0: not at all)."""
        self.sticky_servers = {s: left - 1 for s, left in self.sticky_servers.items() if left > 1}
        if turns > 0:
            self.sticky_servers.update(dict.fromkeys(selected, turns))


@runtime_checkable
class SessionStore(Protocol):
    """Session states, bounded by count and idle time.

    The engine's step actor orders the work of one session (steps, routing with a session)
    by its inbox and holds the session while any is queued or running; the store keeps the
    state and never evicts a held session."""

    def hold(self, session: str) -> AbstractAsyncContextManager[SessionState]:
        """Hold ``session``: yield its state (fresh when unknown or expired). Changes made to
        the state are kept when the block is left, and a held session is never evicted, by
        idle time or by count. Several holders of one session share its one state."""
        ...

    def update_nowait(self, session: str, change: Callable[[SessionState], None]) -> None:
        """Apply ``change`` to a known session's state now; nothing when it is unknown."""
        ...

    def __contains__(self, session: object) -> bool: ...

    def __len__(self) -> int: ...


class Turn(Protocol):
    """One step's place in its session's line (``OrderedSessionStore.arrive``): entered
    when the step runs (waits for the places before it, yields the state), or left unused."""

    async def __aenter__(self) -> SessionState: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    def leave(self) -> None:
        """Give the place up without entering it (its step will not run)."""
        ...


@runtime_checkable
class OrderedSessionStore(SessionStore, Protocol):
    """A session store several nodes share that orders a session's steps by their arrival
    across all of them. The step actor calls ``arrive`` for each step as its inbox delivers
    it (so a node's own steps line up in that order) and enters the turn when the step's
    time in the queue comes, one step per turn; ``hold`` is ``arrive`` entered at once."""

    def arrive(self, session: str) -> Turn:
        """Take ``session``'s next place in line now; never waits."""
        ...


@runtime_checkable
class RoutingCache(Protocol[V]):
    """Routing outcomes per (session, routing query), each kept until it expires."""

    def get(self, key: tuple[str, str], now: float) -> V | None:
        """The outcome stored under ``key`` if it has not expired at ``now``."""
        ...

    def put(self, key: tuple[str, str], value: V, now: float) -> None:
        """Store ``value`` under ``key`` from ``now`` on."""
        ...


@runtime_checkable
class ReportsEvents(Protocol):
    """A store with trouble of its own to report (a shared store whose server went away):
    the engine hands it its event hub's ``publish`` when it starts."""

    def report_to(self, publish: Callable[[Event], None]) -> None: ...


@attrs.frozen(kw_only=True)
class Stores:
    """The stores one engine uses; a field left ``None`` gets the local default (disk files
    under ``config.cache_dir`` for embeddings and enrichment, unless ``config.cache`` is off;
    in-memory maps bounded by ``config.sessions`` and ``config.routing_session``).

    Attributes:
        embeddings: tool and request vectors, shared by warm-up, updates and dedup.
        enrichment: the generator's phrases per tool.
        sessions: per-session paging, sticky sets, search activations and sticky servers.
        routing: the per-session routing cache.
        learning: example requests and learned evidence per tool (disk files under
            ``config.cache_dir``'s ``learning`` folder by default; in memory with caching
            off).
        fast_tier: where the fast tier's cache folder is shared beyond this node (none by
            default: each node builds its own in ``config.cache_dir``).
    """

    embeddings: EmbeddingStore | None = None
    enrichment: EnrichmentStore | None = None
    sessions: SessionStore | None = None
    routing: RoutingCache[object] | None = None
    learning: LearningStore | None = None
    fast_tier: FastTierStore | None = None

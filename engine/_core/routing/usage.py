"""Which servers similar past requests used: what routing learns from use.

``Engine.learn`` (and recorded tool calls) keep, per tool, the vectors of requests an agent
served with it. Read the other way round, that is a log of requests and the servers they
needed: for a new request, the servers its nearest learned requests used are likely needed
again, and a server none of them used (in a fleet whose tasks rarely touch it) is less
likely. Routing hands the count to a decider that reads it (``LocalDecider``), which turns it
into a calibrated shift of each server's probability; nothing here judges.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import numpy as np
import numpy.typing as npt

from ..catalog.tool import Server
from ..stores import LearnedExample

Matrix = npt.NDArray[np.float32]

#: Learned requests looked at: the nearest ones. Chosen on LiveMCPBench's dev split among
#: 10, 20, 40 and every learned request: the most servers dropped at a gate that keeps every
#: needed server for ≥ 98 % of dev tasks (``tests/bench/fit_local_decider.py``).
SIMILAR_REQUESTS = 20


@attrs.frozen(kw_only=True)
class SimilarUses:
    """How many of the ``requests`` learned requests nearest a request used each server.

    Attributes:
        requests: learned requests looked at (at most ``SIMILAR_REQUESTS``).
        counts: server id → how many of them used one of its tools (absent: none).
    """

    requests: int
    counts: Mapping[str, int]


@attrs.frozen(eq=False)
class UseLog:
    """The distinct requests learned from use, and the tools each was served with.

    Attributes:
        vectors: one unit vector per request.
        tools: the tool ids each request was learned for, row by row.
    """

    vectors: Matrix
    tools: tuple[frozenset[str], ...]

    @classmethod
    def from_book(cls, book: Mapping[str, Sequence[LearnedExample]]) -> UseLog | None:
        """The requests of ``book``'s ``use`` entries (examples a host gave say nothing of
        how often a tool is needed); ``None`` when it has none."""
        rows: dict[str, tuple[Matrix, set[str]]] = {}
        for tool_id, entries in book.items():
            for entry in entries:
                if entry.source == "use":
                    rows.setdefault(entry.digest, (entry.vector, set()))[1].add(tool_id)
        if not rows:
            return None
        vectors = np.stack([np.asarray(v, dtype=np.float32) for v, _ in rows.values()])
        return cls(vectors, tuple(frozenset(t) for _, t in rows.values()))

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def similar(
        self, query: Matrix, servers: Sequence[Server], limit: int = SIMILAR_REQUESTS
    ) -> SimilarUses:
        """How many of the ``limit`` learned requests nearest ``query`` used each server
        (a request counts once per server, however many of its tools it used)."""
        # einsum, not ``@``: a BLAS matrix-vector product spins on every core (VectorIndex).
        scores = np.einsum("ij,j->i", self.vectors, np.asarray(query, dtype=np.float32))
        take = min(limit, len(scores))
        nearest = np.argpartition(-scores, take - 1)[:take] if take < len(scores) else range(take)
        owner = {t: s.id for s in servers for t in s.tool_ids}
        counts: dict[str, int] = {}
        for row in nearest:
            for server_id in {owner[t] for t in self.tools[row] if t in owner}:
                counts[server_id] = counts.get(server_id, 0) + 1
        return SimilarUses(requests=take, counts=counts)

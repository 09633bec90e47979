"""Server routing: which MCP servers a request needs, judged once per request.

``route_servers`` is stateless and fails open (``docs/DESIGN.md``, Routing; NeuroLink's
pipeline in ``docs/reference/seed-semantics.md`` §3): guards, an optional embedding
fast-path, the decision router (one boolean question per server, matched by position), and
the generative router only when no decision could be made. A server is dropped only on a
judgement; anything that fails keeps every server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import trio

from .._core.catalog.catalog import Catalog, Server
from .._core.decide.types import (
    BooleanGate,
    decision_key,
    gate_boolean,
    read_boolean,
    reply_outcome,
)
from .._core.errors import ConfigError
from .._core.outcome import Outcome
from .._core.protocols import Decider, Embedder, Generator, check_provider
from .._core.recall.keyword import KeywordIndex
from .._core.routing.usage import SimilarUses
from .._core.text import tokenize
from .._decisions.actor import DecisionActor
from .._decisions.hosts import require_trio
from .._decisions.run import DEFAULT_CONCURRENCY, decide_parts
from .generative import pick_servers
from .questions import DESCRIBE_TOOLS as DESCRIBE_TOOLS
from .questions import Candidate as Candidate
from .questions import Floats, Strategy
from .questions import RoutingConfig as RoutingConfig
from .questions import RoutingOutcome as RoutingOutcome
from .questions import describe as describe
from .questions import does as does
from .questions import routing_parts as routing_parts
from .questions import routing_query as routing_query
from .questions import routing_request as routing_request
from .questions import server_question as server_question

_DEFAULT = RoutingConfig()


@attrs.frozen
class _Decisions:
    """Where the decision router's batches run: an actor (``None``: the stateless one),
    this call's window, and a caller's limiter shared across calls."""

    actor: DecisionActor | None
    window: int
    limiter: trio.CapacityLimiter | None
    similar: SimilarUses | None = None


@attrs.frozen
class _Verdict:
    strategy: Strategy
    outcome: Outcome
    reason: str
    excluded: frozenset[str] = frozenset()
    excluded_tools: tuple[str, ...] | None = None  # None: every tool of the excluded servers
    answered: int = 0
    hallucinated: tuple[str, ...] = ()
    model: str | None = None


async def _by_decision(
    query: str,
    asked: Sequence[Candidate],
    decider: Decider,
    config: RoutingConfig,
    decisions: _Decisions,
) -> _Verdict | str:
    """The decision router's verdict, or why it could not give one."""
    try:
        # The stage's clock starts before the state is split: that work is the stage's too.
        began = trio.current_time()
        model = getattr(decider, "model", None)
        parts = routing_parts(
            query,
            asked,
            config,
            decider.limits,
            model if isinstance(model, str) else None,
            decisions.similar,
        )
        report = await decide_parts(
            parts,
            decider,
            actor=decisions.actor,
            window=decisions.window,
            limiter=decisions.limiter,
            deadline_s=config.decision_deadline_s - (trio.current_time() - began),
        )
    except Exception as exc:  # a broken decider is "no decision", never an error
        return f"decision: error: {type(exc).__name__}: {exc}"
    answers = report.result.answers if report.result is not None else {}
    # A decider may declare a stricter gate its answers need (``LocalDecider`` does).
    floor = getattr(decider, "min_drop_confidence", 0.0)
    strictest = max(config.min_drop_confidence, floor if isinstance(floor, float) else 0.0)
    gate = BooleanGate(min_confidence=strictest)
    keys = [decision_key("server", i) for i in range(len(asked))]
    answered = sum(read_boolean(answers, k) is not None for k in keys)
    if not answered:
        return f"decision: no answers ({report.reason or 'none readable'})"
    # Only a confident false drops; ids are never read back, only positions.
    dropped = frozenset(
        e.server.id
        for e, k in zip(asked, keys, strict=True)
        if gate_boolean(answers, k, gate) is False
    )
    reason = f"decision: {answered} of {len(asked)} answered, {len(dropped)} dropped"
    if decisions.similar is not None:
        reason += f"; {decisions.similar.requests} similar learned requests counted"
    if report.failed:
        reason += f"; {report.failed} of {report.batches} batches failed: {report.reason}"
    model = report.result.model if report.result is not None else None
    # One rule with the engine's decision.finished: anything short of every answer is degraded.
    outcome = reply_outcome(len(asked), answered)
    return _Verdict("decision", outcome, reason, dropped, answered=answered, model=model)


def embedding_pick(
    embedder: Embedder,
    query: str,
    items: Sequence[str],
    names: Sequence[str],
    config: RoutingConfig,
) -> list[int]:
    """Indices of the top-K items: ``w·minmax(cosine) + w'·minmax(BM25)``, best first,
    ties by name. Runs in a worker thread; raises on any bad vector."""
    vectors = np.asarray(embedder.embed([query, *items]), dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != len(items) + 1 or vectors.shape[1] == 0:
        raise ValueError(f"expected {len(items) + 1} vectors, got shape {vectors.shape}")
    if not np.isfinite(vectors).all():
        raise ValueError("the embedder returned non-finite values")
    norms = np.linalg.norm(vectors, axis=1)
    norms[norms == 0] = 1.0  # a zero vector has cosine 0 with everything
    cosine = (vectors[1:] @ vectors[0]) / (norms[1:] * norms[0])
    bm25 = KeywordIndex([tokenize(t) for t in items], k1=1.5, b=0.75).bm25(tokenize(query))
    w_cos, w_bm25 = config.embedding_weights
    score = w_cos * _minmax(cosine) + w_bm25 * _minmax(bm25.astype(np.float64))
    order = sorted(range(len(items)), key=lambda i: (-score[i], names[i], i))
    return order[: config.embedding_top_k]


def _minmax(values: Floats) -> Floats:
    low, high = float(values.min()), float(values.max())
    if not high > low:
        return np.zeros_like(values)
    return (values - low) / (high - low)


async def _by_embedding(
    query: str, routable: Sequence[Candidate], embedder: Embedder, config: RoutingConfig
) -> _Verdict | str:
    owners = [
        (e, tid, n) for e in routable for tid, n in zip(e.server.tool_ids, e.names, strict=True)
    ]
    items = [f"{e.server.description} — {n}" if e.server.description else n for e, _, n in owners]
    names = [n for _, _, n in owners]
    with trio.move_on_after(config.embedding_deadline_s):
        try:
            top = await trio.to_thread.run_sync(
                embedding_pick, embedder, query, items, names, config, abandon_on_cancel=True
            )
        except Exception as exc:  # any embedder failure falls through to the next router
            return f"embedding: error: {type(exc).__name__}: {exc}"
        kept = {owners[i][1] for i in top}
        surviving = {owners[i][0].server.id for i in top}
        # A server without tools has nothing to rank, so the fast-path does not judge it.
        dropped = frozenset(
            e.server.id for e in routable if e.names and e.server.id not in surviving
        )
        tools = None
        if config.granularity == "tool":
            tools = tuple(tid for _, tid, _ in owners if tid not in kept)
        reason = f"embedding: kept {len(top)} of {len(items)} tools"
        return _Verdict("embedding", Outcome.APPLIED, reason, dropped, tools)
    return f"embedding: deadline of {config.embedding_deadline_s:g} s passed"


def _entries(servers: object) -> list[Candidate]:
    if isinstance(servers, Catalog):
        return [Candidate(s, tuple(servers[t].name for t in s.tool_ids)) for s in servers.servers]
    if isinstance(servers, str | bytes) or not isinstance(servers, Sequence):
        raise ConfigError(
            f"servers must be a list of Server or a Catalog, got {type(servers).__name__}"
        )
    entries: list[Candidate] = []
    seen: set[str] = set()
    for index, server in enumerate(servers):
        if not isinstance(server, Server):
            raise ConfigError(f"server {index}: expected a Server, got {type(server).__name__}")
        if server.id in seen:
            raise ConfigError(f"duplicate server id {server.id!r}")
        seen.add(server.id)
        entries.append(Candidate(server, server.tool_ids))
    return entries


async def route_servers(
    query: str | Sequence[Mapping[str, Any]],
    servers: Sequence[Server] | Catalog,
    *,
    decider: Decider | None = None,
    generator: Generator | None = None,
    embedder: Embedder | None = None,
    config: RoutingConfig = _DEFAULT,
    limiter: trio.CapacityLimiter | None = None,
) -> RoutingOutcome:
    """Which servers ``query`` needs; a server is dropped only on a confident judgement.

    Args:
        query: the request, or a message list (see :func:`routing_query`).
        servers: ``Server`` objects, or a ``Catalog`` (its servers; tools without a server
            are not routed).
        decider: asks one boolean question per server (the first ``max_servers``). When
            the list of servers would not fit the provider's state window, the servers are
            split across requests whose states each fit.
        generator: the fallback router, used only when no decision came back.
        embedder: the fast-path's embedder, used when ``config.embedding`` is on.
        config: stages, gates and deadlines (:class:`RoutingConfig`).
        limiter: a limit of the caller's on decision batches in flight, shared across
            calls (held by each batch on top of the provider's admission).

    Returns:
        The kept and excluded servers with ``outcome`` and ``reason``: ``applied`` when
        every server asked was judged; ``degraded`` when only some were (the reason says
        ``"k of n answered"``; the unanswered ones are kept); ``skipped`` for an empty
        query or fewer than two routable servers; ``failed_open`` (nothing excluded) when
        no router could judge.

    Raises:
        ConfigError: malformed servers or messages, ``always_include`` naming an
            unknown server, or a ``decider``, ``generator`` or ``embedder`` that is not one
            (a provider's name, say). Provider failures are never raised.
        RuntimeError: called outside trio (under asyncio, use ``toolroute.asyncio``).

    **Cancellation:** the whole call ends by ``config.deadline_s`` (``failed_open``,
    reason ``deadline``); each stage has its own budget inside it. A caller's cancel
    scope still cancels it at any await.

    **Fail-open:** a failed, late or unreadable stage keeps every server it was asked
    about and hands over to the next stage (decision → generative). A reply whose
    answers cannot be matched to their questions with certainty (a different count, an
    id or name that differs from the one sent) is treated as no reply; an unanswered,
    malformed or near coin-flip answer keeps its server. A caller's mistake (bad servers,
    bad messages) is raised, never failed open.
    """
    require_trio("toolroute.route_servers", "toolroute.asyncio.route_servers")
    check_provider(decider, "decider", Decider)
    check_provider(generator, "generator", Generator)
    check_provider(embedder, "embedder", Embedder)
    return await route_servers_via(
        None,
        query,
        servers,
        decider=decider,
        generator=generator,
        embedder=embedder,
        config=config,
        limiter=limiter,
    )


async def route_servers_via(
    actor: DecisionActor | None,
    query: str | Sequence[Mapping[str, Any]],
    servers: Sequence[Server] | Catalog,
    *,
    decider: Decider | None = None,
    generator: Generator | None = None,
    embedder: Embedder | None = None,
    config: RoutingConfig = _DEFAULT,
    limiter: trio.CapacityLimiter | None = None,
    window: int = DEFAULT_CONCURRENCY,
    similar: SimilarUses | None = None,
) -> RoutingOutcome:
    """:func:`route_servers` with its decision batches on ``actor`` (the engine's; ``None``:
    the stateless one), at most ``window`` of this call in flight; ``similar``: what the
    engine's similar learned requests used, for a decider that reads it."""
    started = trio.current_time()
    entries = _entries(servers)
    ids = [e.server.id for e in entries]
    unknown = sorted(set(config.always_include) - set(ids))
    if unknown:
        raise ConfigError(f"always_include names unknown servers: {', '.join(unknown)}")
    text = routing_query(query, config=config)
    always = set(config.always_include)
    routable = [e for e in entries if e.server.id not in always]

    def finish(verdict: _Verdict) -> RoutingOutcome:
        gone = [e for e in routable if e.server.id in verdict.excluded]
        tools = verdict.excluded_tools
        if tools is None:
            tools = tuple(t for e in gone for t in e.server.tool_ids)
        return RoutingOutcome(
            selected=tuple(i for i in ids if i not in verdict.excluded),
            excluded=tuple(e.server.id for e in gone),
            excluded_tools=tools,
            strategy=verdict.strategy,
            outcome=verdict.outcome,
            reason=verdict.reason,
            latency_ms=(trio.current_time() - started) * 1000.0,
            answered=verdict.answered,
            hallucinated=verdict.hallucinated,
            routable=len(routable),
            model=verdict.model,
        )

    if not text.strip():
        return finish(_Verdict("none", Outcome.SKIPPED, "no query"))
    if len(routable) <= 1:
        reason = "single server" if routable else "no routable servers"
        return finish(_Verdict("none", Outcome.SKIPPED, reason))
    stage: list[Strategy] = ["none"]
    with trio.move_on_after(config.deadline_s):
        return finish(
            await _pipeline(
                text,
                routable,
                decider,
                generator,
                embedder,
                config,
                _Decisions(actor, window, limiter, similar),
                stage,
            )
        )
    return finish(_Verdict(stage[0], Outcome.FAILED_OPEN, "deadline"))


async def _pipeline(
    query: str,
    routable: Sequence[Candidate],
    decider: Decider | None,
    generator: Generator | None,
    embedder: Embedder | None,
    config: RoutingConfig,
    decisions: _Decisions,
    stage: list[Strategy],
) -> _Verdict:
    notes: list[str] = []
    tool_count = sum(len(e.names) for e in routable)
    if (
        config.embedding
        and embedder is not None
        and tool_count >= config.embedding_min_tools
        and tool_count > config.embedding_top_k
    ):
        stage[0] = "embedding"
        found = await _by_embedding(query, routable, embedder, config)
        if isinstance(found, _Verdict):
            return found
        notes.append(found)
    asked = routable[: config.max_servers]
    if decider is not None:
        stage[0] = "decision"
        decided = await _by_decision(query, asked, decider, config, decisions)
        if isinstance(decided, _Verdict):
            return attrs.evolve(decided, reason="; ".join([*notes, decided.reason]))
        notes.append(decided)
    if config.generative and generator is not None:
        stage[0] = "generative"
        pick = await pick_servers(
            generator,
            query[: config.max_query_chars],
            [(e.server.id, describe(e.server, e.names)) for e in asked],
            known={e.server.id for e in routable} | set(config.always_include),
            prompt_prefix=config.prompt_prefix,
            deadline_s=config.generative_deadline_s,
        )
        reason = "; ".join([*notes, pick.reason])
        if pick.kept is None:
            return _Verdict(
                "generative", Outcome.FAILED_OPEN, reason, hallucinated=pick.hallucinated
            )
        dropped = frozenset(e.server.id for e in asked if e.server.id not in pick.kept)
        return _Verdict(
            "generative", Outcome.APPLIED, reason, dropped, hallucinated=pick.hallucinated
        )
    if not notes:
        return _Verdict("none", Outcome.FAILED_OPEN, "no router configured")
    return _Verdict(stage[0], Outcome.FAILED_OPEN, "; ".join(notes))

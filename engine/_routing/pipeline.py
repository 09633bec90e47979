"""Server routing: which MCP servers a request needs, judged once per request.

``route_servers`` is stateless and fails open (``docs/DESIGN.md``, Routing; NeuroLink's
pipeline in ``docs/reference/seed-semantics.md`` §3): guards, an optional embedding
fast-path, the decision router (one boolean question per server, matched by position), and
the generative router only when no decision could be made. A server is dropped only on a
judgement; anything that fails keeps every server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import attrs
import numpy as np
import numpy.typing as npt
import trio

from .._core.catalog import QUALIFIER, Catalog, Server
from .._core.conversation import read_turns
from .._core.decision import (
    BooleanGate,
    BooleanQuestion,
    DecisionRequest,
    decision_key,
    gate_boolean,
    read_boolean,
)
from .._core.errors import ConfigError
from .._core.keyword import KeywordIndex
from .._core.outcome import Outcome
from .._core.routing_config import RoutingConfig as RoutingConfig
from .._core.routing_config import Wording
from .._core.text import tokenize
from .._decisions.run import decide_in_batches
from .generative import pick_servers

if TYPE_CHECKING:
    from .._core.protocols import Decider, Embedder, Generator

Strategy: TypeAlias = Literal["none", "embedding", "decision", "generative"]
Floats: TypeAlias = "npt.NDArray[np.float64]"

#: Tool names listed by ``describe`` for a server without a description.
DESCRIBE_TOOLS = 12


@attrs.frozen(kw_only=True)
class RoutingOutcome:
    """Which servers a request needs, and how that was decided.

    Attributes:
        selected: server ids kept, in input order (always-include ones included).
        excluded: server ids dropped, in input order.
        excluded_tools: tool ids of the excluded servers; with granularity ``tool`` on the
            embedding fast-path, every tool outside the top K.
        strategy: the stage that produced the result (or was running when it failed).
        answered: decision answers read (boolean answers under the asked keys).
        hallucinated: ids the generative router named that are not in the call.
        routable: servers a router could judge (all minus always-include).
        model: the decision model that answered, when one did.
        cache_hit: set by the engine's routing cache; always false here.
    """

    selected: tuple[str, ...]
    excluded: tuple[str, ...]
    excluded_tools: tuple[str, ...]
    strategy: Strategy
    outcome: Outcome
    reason: str
    latency_ms: float
    answered: int = 0
    hallucinated: tuple[str, ...] = ()
    routable: int = 0
    model: str | None = None
    cache_hit: bool = False


_DEFAULT = RoutingConfig()


def routing_query(
    query_or_messages: str | Sequence[Mapping[str, Any]], *, config: RoutingConfig = _DEFAULT
) -> str:
    """The text to route on.

    A string is used as is. A message list (OpenAI or Anthropic style) becomes
    ``"role: text"`` lines: the last ``history_turns`` user/assistant turns with text before
    the last user request, then that request; turns after it (the agent's own steps) do
    not change what the request needs. The tail ``max_query_chars`` characters are kept.

    Raises:
        ConfigError: the messages are malformed.
    """
    if isinstance(query_or_messages, str):
        return query_or_messages
    turns = [
        t
        for t in read_turns(query_or_messages)
        if t.role in ("user", "assistant") and t.text and not t.is_tool_result
    ]
    last = max((i for i, t in enumerate(turns) if t.role == "user"), default=None)
    if last is None:
        return ""
    history = turns[max(0, last - config.history_turns) : last] if config.history_turns else []
    text = "\n".join(f"{t.role}: {t.text}" for t in [*history, turns[last]])
    return text[-config.max_query_chars :]


def _short_name(server_id: str, name: str) -> str:
    for prefix in (server_id + QUALIFIER, server_id + "_"):
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix) :]
    return name


def describe(server: Server, tool_names: Sequence[str] | None = None) -> str:
    """What a server is for: its description; else its tool names (``<id>_`` prefix
    removed, the first 12); else ``the "<id>" server``. ``tool_names`` default to its ids."""
    if server.description.strip():
        return server.description.strip()
    names = server.tool_ids if tool_names is None else tool_names
    if names:
        shown = ", ".join(_short_name(server.id, n) for n in names[:DESCRIBE_TOOLS])
        return f"provides the tools: {shown}"
    return f'the "{server.id}" server'


def does(server: Server, tool_names: Sequence[str] | None = None) -> str:
    """``describe`` with its first character lower-cased, to follow "which can"."""
    text = describe(server, tool_names)
    return text[:1].lower() + text[1:]


@attrs.frozen
class Candidate:
    """A server offered to a router, with its tools' names (parallel to ``tool_ids``)."""

    server: Server
    names: tuple[str, ...]


def server_question(candidate: Candidate, index: int, wording: Wording) -> BooleanQuestion:
    """The boolean question for the server at ``index`` of ``available_servers``."""
    id_ = candidate.server.id
    if wording == "compact":
        return BooleanQuestion(
            f'Does the request need the "{id_}" server? Read available_servers[{index}].does.',
            true="Needed.",
            false="Not needed.",
        )
    text = does(candidate.server, candidate.names)
    return BooleanQuestion(
        f'The request needs the "{id_}" server, which can {text}.',
        true=f"Carrying out the request involves {text}.",
        false=f"The request is about something else; nothing it asks for involves {text}.",
    )


def routing_request(
    query: str, entries: Sequence[Candidate], config: RoutingConfig
) -> DecisionRequest:
    """One question per entry, keyed ``server__<i>``; the state lists the servers in order."""
    state = {
        "request": query[: config.max_query_chars],
        "available_servers": [
            {"name": e.server.id, "does": does(e.server, e.names), "tool_count": len(e.names)}
            for e in entries
        ],
    }
    questions = {
        decision_key("server", i): server_question(e, i, config.wording)
        for i, e in enumerate(entries)
    }
    return DecisionRequest(state=state, questions=questions, timeout_s=config.decision_deadline_s)


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
    limiter: trio.CapacityLimiter | None,
) -> _Verdict | str:
    """The decision router's verdict, or why it could not give one."""
    try:
        request = routing_request(query, asked, config)
        report = await decide_in_batches(
            request, decider, limiter=limiter, deadline_s=config.decision_deadline_s
        )
    except Exception as exc:  # a broken decider is "no decision", never an error
        return f"decision: error: {type(exc).__name__}: {exc}"
    answers = report.result.answers if report.result is not None else {}
    gate = BooleanGate(min_confidence=config.min_drop_confidence)
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
    if report.failed:
        reason += f"; {report.failed} of {report.batches} batches failed: {report.reason}"
    model = report.result.model if report.result is not None else None
    outcome = Outcome.DEGRADED if report.failed else Outcome.APPLIED
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
    """Which servers ``query`` needs.

    Args:
        query: the request, or a message list (see :func:`routing_query`).
        servers: ``Server`` objects, or a ``Catalog`` (its servers; tools without a server
            are not routed).
        decider: asks one boolean question per server (the first ``max_servers``).
        generator: the fallback router, used only when no decision came back.
        embedder: the fast-path's embedder, used when ``config.embedding`` is on.
        limiter: bounds the decision batches in flight (shared across calls).

    Returns:
        The kept and excluded servers; ``skipped`` for an empty query or fewer than two
        routable servers, ``failed_open`` (nothing excluded) when no router could judge.

    Raises:
        ConfigError: malformed servers or messages, or ``always_include`` naming an
            unknown server. Provider failures are never raised.

    Cancellation:
        The whole call ends by ``config.deadline_s`` (``failed_open``, reason
        ``deadline``); each stage has its own budget. A caller's cancel scope still cancels it.
    """
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
            await _pipeline(text, routable, decider, generator, embedder, config, limiter, stage)
        )
    return finish(_Verdict(stage[0], Outcome.FAILED_OPEN, "deadline"))


async def _pipeline(
    query: str,
    routable: Sequence[Candidate],
    decider: Decider | None,
    generator: Generator | None,
    embedder: Embedder | None,
    config: RoutingConfig,
    limiter: trio.CapacityLimiter | None,
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
        decided = await _by_decision(query, asked, decider, config, limiter)
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

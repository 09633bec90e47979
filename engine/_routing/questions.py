"""Routing, the pure part: config, outcome, the routing query, and the questions asked.

``route_servers`` (:mod:`.pipeline`) runs the stages; everything here is plain
functions over frozen data: the text routed on, what each server is for, one
boolean question per server, and the request split into parts whose state fits
the decision provider's window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

import attrs
import numpy as np
import numpy.typing as npt

from .._core.catalog import QUALIFIER, Server, id_tuple
from .._core.conversation import read_turns
from .._core.decision import BooleanQuestion, DecisionRequest, decision_key
from .._core.decision_limits import DecisionLimits, estimate_state_tokens
from .._core.errors import ConfigError
from .._core.outcome import Outcome
from .._core.validators import Check, is_number, rule

Strategy: TypeAlias = Literal["none", "embedding", "decision", "generative"]
Granularity: TypeAlias = Literal["server", "tool"]
Wording: TypeAlias = Literal["measured", "compact"]
Floats: TypeAlias = "npt.NDArray[np.float64]"

#: Tool names listed by ``describe`` for a server without a description.
DESCRIBE_TOOLS = 12


_positive = rule(lambda v: is_number(v) and v > 0, "a positive number of seconds")
_fraction = rule(lambda v: is_number(v) and 0 <= v <= 1, "between 0 and 1")
_flag = rule(lambda v: isinstance(v, bool), "true or false")
_prefix = rule(
    lambda v: v is None or (isinstance(v, str) and bool(v.strip())), "a non-empty string or None"
)
_weights = rule(
    lambda v: (
        isinstance(v, tuple)
        and len(v) == 2
        and all(is_number(w) and w >= 0 for w in v)
        and sum(v) > 0
    ),
    "two non-negative weights (cosine, bm25), not both 0",
)


def _count(minimum: int) -> Check:
    return rule(
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= minimum,
        f"an integer ≥ {minimum}",
    )


def _one_of(*choices: str) -> Check:
    return rule(lambda v: v in choices, f"one of {', '.join(choices)}")


def _pair(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value  # from JSON config


def _ids(value: Sequence[str]) -> tuple[str, ...]:
    ids = id_tuple(value, "always_include")
    if not all(isinstance(i, str) and i for i in ids):
        raise ConfigError(f"always_include must hold server ids (strings), got {ids!r}")
    return ids


@attrs.frozen(kw_only=True)
class RoutingConfig:
    """How ``route_servers`` routes; every default is NeuroLink's unless noted."""

    #: Server ids never offered to a router and never excluded.
    always_include: tuple[str, ...] = attrs.field(default=(), converter=_ids)
    #: Decision gate: a server drops only on a ``false`` at least this confident
    #: (``|2p - 1|``); 0.6 means p ≤ 0.2.
    min_drop_confidence: float = attrs.field(default=0.6, validator=_fraction)
    #: Servers a model router (decision or generative) is asked about per call, in order;
    #: it keeps the rest. The embedding fast-path ranks every routable tool.
    max_servers: int = attrs.field(default=200, validator=_count(1))
    #: Turns of history before the current request in a routing query from messages.
    history_turns: int = attrs.field(default=6, validator=_count(0))
    #: Characters of query routed on: the tail of a rendered history, the head of the
    #: query sent to a router.
    max_query_chars: int = attrs.field(default=10_000, validator=_count(1))
    #: Budget of the decision router (all of its batches); late batches lose their answers.
    decision_deadline_s: float = attrs.field(default=5.0, validator=_positive)
    #: Budget of the generative router; past it, the call fails open.
    generative_deadline_s: float = attrs.field(default=15.0, validator=_positive)
    #: Budget of the embedding fast-path; past it, the decision router runs.
    embedding_deadline_s: float = attrs.field(default=10.0, validator=_positive)
    #: Budget of the whole call; past it, ``failed_open`` with nothing excluded.
    deadline_s: float = attrs.field(default=15.0, validator=_positive)
    #: Use the embedding fast-path (when an embedder is given); its pick is final.
    embedding: bool = attrs.field(default=False, validator=_flag)
    #: Tools the fast-path keeps.
    embedding_top_k: int = attrs.field(default=20, validator=_count(1))
    #: Routable tools needed before the fast-path runs (it also needs more than the top K).
    embedding_min_tools: int = attrs.field(default=20, validator=_count(0))
    #: Weights of min-max-normalised cosine and BM25 in the fast-path score.
    embedding_weights: tuple[float, float] = attrs.field(
        default=(0.8, 0.2), converter=_pair, validator=_weights
    )
    #: What the fast-path excludes: whole servers without a top-K tool, or every tool
    #: outside the top K.
    granularity: Granularity = attrs.field(default="server", validator=_one_of("server", "tool"))
    #: Fall back to the generative router (when a generator is given) if no decision came.
    generative: bool = attrs.field(default=True, validator=_flag)
    #: Replaces the generative prompt's opening; the query, catalogue and rules follow it.
    prompt_prefix: str | None = attrs.field(default=None, validator=_prefix)
    #: Decision question wording: ``measured`` (juspay's A/B-tested text, the default) or
    #: ``compact`` (akkulg's fork, which points at ``available_servers[i].does``).
    wording: Wording = attrs.field(default="measured", validator=_one_of("measured", "compact"))


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
    query: str, entries: Sequence[Candidate], config: RoutingConfig, *, first: int = 0
) -> DecisionRequest:
    """One question per entry, keyed ``server__<first + i>``; the state lists the servers in order.

    ``first`` is the position of ``entries[0]`` among every server asked, when
    ``entries`` is one part of a split request (see :func:`routing_parts`); a
    question's ``available_servers[i]`` still points into this part's state.
    """
    state = {
        "request": query[: config.max_query_chars],
        "available_servers": [
            {"name": e.server.id, "does": does(e.server, e.names), "tool_count": len(e.names)}
            for e in entries
        ],
    }
    questions = {
        decision_key("server", first + i): server_question(e, i, config.wording)
        for i, e in enumerate(entries)
    }
    return DecisionRequest(state=state, questions=questions, timeout_s=config.decision_deadline_s)


def routing_parts(
    query: str,
    entries: Sequence[Candidate],
    config: RoutingConfig,
    limits: DecisionLimits,
    model: str | None = None,
) -> list[DecisionRequest]:
    """The routing request, split so that each part's state fits the provider's window.

    The state lists every server asked, so past a few dozen servers it outgrows a
    small window (Laya reads 768 tokens) and the provider would refuse every
    request before sending it. Servers are cut, in order, into the longest runs
    whose state fits (never fewer than one server a part); question keys stay
    ``server__<position>`` across parts. A provider without a local window, or
    with an advisory one, gets one request.

    Args:
        query: the routing query.
        entries: the servers asked, in order.
        config: the routing config.
        limits: the decision provider's limits.
        model: the model the provider will ask (its per-model window applies).
    """
    limits = limits.for_model(model)
    window = None if limits.advisory else limits.max_state_tokens
    whole = routing_request(query, entries, config)
    if window is None or estimate_state_tokens(whole.state, limits) <= window:
        return [whole]
    parts: list[DecisionRequest] = []
    start = 0
    while start < len(entries):
        part = routing_request(query, entries[start : start + 1], config, first=start)
        end = start + 1
        # Grow the run while the next server still fits; the state only grows with it.
        while end < len(entries):
            grown = routing_request(query, entries[start : end + 1], config, first=start)
            if estimate_state_tokens(grown.state, limits) > window:
                break
            part, end = grown, end + 1
        parts.append(part)
        start = end
    return parts

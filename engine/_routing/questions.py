"""Routing, the pure part: config, outcome, the routing query, and the questions asked.

``route_servers`` (:mod:`.pipeline`) runs the stages; everything here is plain
functions over frozen data: the text routed on, what each server is for, one
boolean question per server, and the request split into parts whose state fits
the decision provider's window.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

import attrs
import numpy as np
import numpy.typing as npt

from .._core.catalog.catalog import QUALIFIER, Server
from .._core.decide.limits import DecisionLimits, fitting_runs
from .._core.decide.types import BooleanQuestion, DecisionRequest, decision_key
from .._core.outcome import Outcome
from .._core.routing.config import RoutingConfig as RoutingConfig
from .._core.routing.config import Wording
from .._core.routing.usage import SimilarUses
from .._core.select.conversation import read_turns

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
        request_id: set by the engine: the id of the call it answered (``route_servers``
            or the step it served), as its events carry; ``None`` here.
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
    request_id: str | None = None


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


def _listed(entry: Candidate, similar: SimilarUses | None = None) -> dict[str, Any]:
    """What the state says about one server (with ``similar``: how many of the similar
    learned requests used it)."""
    listed: dict[str, Any] = {
        "name": entry.server.id,
        "does": does(entry.server, entry.names),
        "tool_count": len(entry.names),
    }
    if similar is not None:
        listed["similar_uses"] = similar.counts.get(entry.server.id, 0)
    return listed


def routing_request(
    query: str,
    entries: Sequence[Candidate],
    config: RoutingConfig,
    *,
    first: int = 0,
    similar: SimilarUses | None = None,
) -> DecisionRequest:
    """One question per entry, keyed ``server__<first + i>``; the state lists the servers in order.

    ``first`` is the position of ``entries[0]`` among every server asked, when
    ``entries`` is one part of a split request (see :func:`routing_parts`); a
    question's ``available_servers[i]`` still points into this part's state.
    ``similar`` (for a decider that reads it) adds ``similar_requests`` to the state and
    each server's ``similar_uses``.
    """
    state: dict[str, Any] = {"request": query[: config.max_query_chars]}
    if similar is not None:
        state["similar_requests"] = similar.requests
    state["available_servers"] = [_listed(e, similar) for e in entries]
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
    similar: SimilarUses | None = None,
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
        similar: what similar learned requests used (:func:`routing_request`).
    """
    limits = limits.for_model(model)
    window = None if limits.advisory else limits.max_state_tokens
    if window is None:
        return [routing_request(query, entries, config, similar=similar)]
    # The state as json.dumps writes it (what the estimate reads), priced piece by piece:
    # linear in the number of servers, where re-pricing every grown run was quadratic.
    request = json.dumps(query[: config.max_query_chars], ensure_ascii=False)
    counted = f'"similar_requests": {similar.requests}, ' if similar is not None else ""
    runs = fitting_runs(
        [json.dumps(_listed(e, similar), ensure_ascii=False) for e in entries],
        head=f'{{"request": {request}, {counted}"available_servers": [',
        tail="]}",
        separator=", ",
        window=window,
        limits=limits,
    )
    return [
        routing_request(
            query, entries[run.start : run.stop], config, first=run.start, similar=similar
        )
        for run in runs
    ] or [routing_request(query, entries, config, similar=similar)]

"""``RoutingConfig``: how ``route_servers`` routes, validated (pure data, no runtime)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, TypeAlias

import attrs

from ..catalog.tool import id_tuple
from ..errors import ConfigError
from ..validators import Check, is_number, rule

Granularity: TypeAlias = Literal["server", "tool"]
Wording: TypeAlias = Literal["measured", "compact"]


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

"""What the engine tells its subscribers: frozen, tagged events that round-trip through JSON.

Every event is a frozen attrs class with a class-level ``type`` tag (``"selection.finished"``)
and a ``time`` field (wall-clock seconds since the epoch, set when the event is made). The
wire form is one JSON object whose ``"type"`` key names the class; :func:`to_json` and
:func:`from_json` are the only serialisation edge, with their own private converter.

Privacy: a query appears in an event only as :func:`query_hash`, an HMAC with a per-engine
random key, so a consumer can group repeats of one query without reading it. The plain
``query`` field stays ``None`` unless the engine is configured to include it.

Events are keyword-only: fields are added over time (DESIGN: "add fields freely"), and a
keyword call site keeps working when one is inserted.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time as _time
from typing import Any, ClassVar, TypeAlias

import attrs
import cattrs
from cattrs.strategies import configure_tagged_union

from .errors import ConfigError
from .outcome import Outcome

__all__ = [
    "CatalogUpdated",
    "DecisionFinished",
    "Event",
    "EventsDropped",
    "FailOpen",
    "RoutingFinished",
    "SelectionFinished",
    "ServiceRestarted",
    "StepFinished",
    "SubscriptionStarted",
    "WarmupFinished",
    "WarmupProgress",
    "from_json",
    "new_query_key",
    "query_hash",
    "to_json",
]

#: Bytes of HMAC-SHA256 kept in a query hash: 128 bits is plenty to tell queries apart.
_HASH_BYTES = 16
#: The shortest key :func:`query_hash` accepts; a short key would make the hash guessable.
_MIN_KEY_BYTES = 16


def new_query_key() -> bytes:
    """A fresh random key for :func:`query_hash`; each engine makes its own at start."""
    return secrets.token_bytes(32)


def query_hash(query: str, key: bytes) -> str:
    """The query as events show it: HMAC-SHA256 of its UTF-8 bytes, first 16 bytes, in hex.

    The query is hashed exactly as given (no case folding or trimming), so the same text
    gives the same hash under the same key, and a different key gives an unrelated hash.

    Args:
        query: the text to hide.
        key: the engine's secret key, at least 16 bytes (see :func:`new_query_key`).

    Returns:
        32 lowercase hex digits.

    Raises:
        ConfigError: the key is shorter than 16 bytes.
    """
    if len(key) < _MIN_KEY_BYTES:
        raise ConfigError(
            f"the query-hash key must be at least {_MIN_KEY_BYTES} bytes, got {len(key)}"
        )
    digest = hmac.new(key, query.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
    return digest[:_HASH_BYTES].hex()


@attrs.frozen(kw_only=True)
class _EventBase:
    """Fields every event has.

    Attributes:
        time: wall-clock time the event was made, in seconds since the epoch.
    """

    type: ClassVar[str]

    time: float = attrs.field(factory=_time.time)


@attrs.frozen(kw_only=True)
class WarmupProgress(_EventBase):
    """A warm-up batch finished: ``done`` of ``total`` tools have embeddings."""

    type: ClassVar[str] = "warmup.progress"

    done: int
    total: int


@attrs.frozen(kw_only=True)
class WarmupFinished(_EventBase):
    """Warm-up ended; selection now uses embeddings unless ``degraded``.

    Attributes:
        tools: tools in the catalogue.
        embedded: tools that have an embedding now.
        from_cache: of those, how many came from the disk cache.
        seconds: how long warm-up took.
        degraded: the embedder failed and selection stays keyword-only.
        reason: why it is degraded; empty otherwise.
    """

    type: ClassVar[str] = "warmup.finished"

    tools: int
    embedded: int
    from_cache: int
    seconds: float
    degraded: bool = False
    reason: str = ""


@attrs.frozen(kw_only=True)
class SelectionFinished(_EventBase):
    """One selection answered.

    Attributes:
        query_hash: the query as :func:`query_hash` shows it.
        query: the query itself, only when the engine is configured to include it.
        tool_ids: the picked tools, in the order the selection returned them.
        scores: per tool, its score on the strategy's scale, or ``None``.
        strategy: the strategy that produced the ranking.
        outcome: how the selection came about.
        degraded: ``True`` when recall fell back to keyword-only.
        reason: why the outcome is not ``applied``; empty otherwise.
        latency_ms: time from request to answer.
        session: the session the selection served, or ``None`` (``select`` has none).
        request_id: the id the operation's result carries (``Selection.request_id``).
        no_tool_needed: the decider said, confidently, that no tool is needed.
    """

    type: ClassVar[str] = "selection.finished"

    query_hash: str
    tool_ids: tuple[str, ...]
    scores: tuple[float | None, ...]
    strategy: str
    outcome: Outcome
    degraded: bool
    latency_ms: float
    reason: str = ""
    query: str | None = None
    session: str | None = None
    request_id: str | None = None
    no_tool_needed: bool = False


@attrs.frozen(kw_only=True)
class StepFinished(_EventBase):
    """One agent step prepared.

    Attributes:
        session: the caller's session id, or ``None`` for a stateless step.
        query_hash: the extracted query as :func:`query_hash` shows it.
        query: the extracted query itself, only when configured.
        page: the paging level used (0 = the first page of ranked tools).
        tool_ids: the tools shown, or ``None`` for all tools.
        outcome: how the step's selection came about.
        reason: why the outcome is not ``applied``; empty otherwise.
        latency_ms: time from request to answer.
        request_id: the id the step's result carries (``StepSelection.request_id``).
        no_tool_needed: the decider said, confidently, that no tool is needed.
    """

    type: ClassVar[str] = "step.finished"

    session: str | None
    query_hash: str
    page: int
    tool_ids: tuple[str, ...] | None
    outcome: Outcome
    latency_ms: float
    reason: str = ""
    query: str | None = None
    request_id: str | None = None
    no_tool_needed: bool = False


@attrs.frozen(kw_only=True)
class RoutingFinished(_EventBase):
    """One server-routing decision made.

    Attributes:
        query_hash: the query as :func:`query_hash` shows it.
        query: the query itself, only when configured.
        kept: ids of the servers kept.
        excluded: ids of the servers dropped on a confident ``false``.
        stage: the stage that decided (``decision``, ``generative`` or ``none``).
        outcome: how the routing came about.
        reason: why the outcome is not ``applied``; empty otherwise.
        latency_ms: time from request to answer.
        session: the session routed for (``route_servers(session=...)`` or a step's).
        request_id: the id of the operation the routing served; ``RoutingOutcome.request_id``
            (or the step's ``StepSelection.request_id``) carries the same.
    """

    type: ClassVar[str] = "routing.finished"

    query_hash: str
    kept: tuple[str, ...]
    excluded: tuple[str, ...]
    stage: str
    outcome: Outcome
    latency_ms: float
    reason: str = ""
    query: str | None = None
    session: str | None = None
    request_id: str | None = None


@attrs.frozen(kw_only=True)
class DecisionFinished(_EventBase):
    """One call to a decision provider finished (all of its batches).

    Attributes:
        provider: which decision provider answered.
        questions: questions asked.
        answered: questions that got a usable answer; the rest are kept (fail open).
        batches: provider requests made.
        outcome: how the decision came about.
        reason: why the outcome is not ``applied``; empty otherwise.
        latency_ms: time from request to answer.
        session: the session of the operation that asked, if it had one.
        request_id: the id of the operation that asked (a routing, a step, ``try_decide``).
    """

    type: ClassVar[str] = "decision.finished"

    provider: str
    questions: int
    answered: int
    batches: int
    outcome: Outcome
    latency_ms: float
    reason: str = ""
    session: str | None = None
    request_id: str | None = None


@attrs.frozen(kw_only=True)
class FailOpen(_EventBase):
    """An operation returned its fail-open result.

    Attributes:
        operation: the public operation (``select``, ``prepare_step``, ...) whose result
            failed open; during a public call, the call's own name.
        what_failed: the stage or service that failed (``embedder``, ``deadline``, ...).
        reason: a short, human-readable why.
        session: the session of that operation, if it had one.
        request_id: the id that operation's result carries (``Selection.request_id``,
            ``StepSelection.request_id``, ``RoutingOutcome.request_id``); ``None`` outside
            a public call (warm-up, for one).
    """

    type: ClassVar[str] = "fail_open"

    operation: str
    what_failed: str
    reason: str
    session: str | None = None
    request_id: str | None = None


@attrs.frozen(kw_only=True)
class ServiceRestarted(_EventBase):
    """A supervised service crashed and was started again.

    Attributes:
        service: the service's name.
        attempt: restarts within the current budget window, starting at 1.
        error: the crash, as ``"ExceptionType: message"``.
    """

    type: ClassVar[str] = "service.restarted"

    service: str
    attempt: int
    error: str


@attrs.frozen(kw_only=True)
class CatalogUpdated(_EventBase):
    """A catalogue update was applied and a new snapshot published.

    Attributes:
        added: ids of the tools added.
        removed: ids of the tools removed.
        replaced: ids of the tools whose definition changed.
        version: the new snapshot's version; it grows by one per update.
    """

    type: ClassVar[str] = "catalog.updated"

    added: tuple[str, ...]
    removed: tuple[str, ...]
    replaced: tuple[str, ...]
    version: int


@attrs.frozen(kw_only=True)
class SubscriptionStarted(_EventBase):
    """The first delivery of every subscription: the engine's state as it began.

    Events after it describe changes from this state, so a dashboard that subscribes late
    starts right instead of waiting for the next warm-up or update.

    Attributes:
        warmup: ``"pending"`` (embeddings not loaded yet, requests served keyword-only),
            ``"finished"``, ``"degraded"`` (warm-up failed: keyword-only until an update
            embeds again) or ``"none"`` (nothing to warm up: a keyword-only engine).
        warmup_reason: why warm-up is degraded; empty otherwise.
        catalog_version: the served snapshot's version (0 at start, one more per update,
            as ``catalog.updated`` counts).
        tools: tools served.
        fast_tier: ``"off"`` (none configured), ``"building"``, ``"open"`` (built, waiting
            for enough served requests to answer) or ``"ready"`` (answers under load).
    """

    type: ClassVar[str] = "subscription.started"

    warmup: str
    catalog_version: int
    tools: int
    fast_tier: str
    warmup_reason: str = ""


@attrs.frozen(kw_only=True)
class EventsDropped(_EventBase):
    """This subscriber lost ``count`` events to its full buffer since its last delivery.

    Sent on its own, without waiting for the next event, so a quiet subscriber learns of
    its loss: each subscriber's channel keeps one slot for it, and it is sent the moment
    an event is lost (or, while the last notice is still unread, within 50 ms of the
    subscriber reading that one). ``Delivery.dropped`` carries the same count; each loss
    is counted once, by this event or by the next event delivered.

    Attributes:
        count: events lost since the delivery before this one.
    """

    type: ClassVar[str] = "events.dropped"

    count: int


Event: TypeAlias = (
    WarmupProgress
    | WarmupFinished
    | SelectionFinished
    | StepFinished
    | RoutingFinished
    | DecisionFinished
    | FailOpen
    | ServiceRestarted
    | CatalogUpdated
    | SubscriptionStarted
    | EventsDropped
)


def _strict(kind: type[Any], accepted: tuple[type[Any], ...]) -> Any:
    # The default hooks coerce (``bool("no") is True``, ``int("7") == 7``); an event read
    # back from a broker should be what was written or an error. Hooks keyed on a class
    # also serve its subclasses, so ``cls`` may be ``Outcome`` (a StrEnum) for ``str``.
    def hook(value: Any, cls: type[Any]) -> Any:
        if isinstance(value, accepted) and (kind is bool or not isinstance(value, bool)):
            return cls(value)
        raise TypeError(f"expected {cls.__name__}, got {type(value).__name__}: {value!r}")

    return hook


def _tag_of(cls: type[Any]) -> str:
    tag: str = cls.type
    return tag


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter()
    converter.register_structure_hook(str, _strict(str, (str,)))
    converter.register_structure_hook(bool, _strict(bool, (bool,)))
    converter.register_structure_hook(int, _strict(int, (int,)))
    converter.register_structure_hook(float, _strict(float, (int, float)))
    configure_tagged_union(Event, converter, tag_generator=_tag_of, tag_name="type")
    return converter


_converter = _make_converter()


def to_json(event: Event) -> str:
    """The event as one line of JSON, with its tag under ``"type"``.

    Raises:
        ValueError: a float field is NaN or infinite (strict JSON has no spelling for them).
    """
    data = _converter.unstructure(event, unstructure_as=Event)
    # The tag first, so a human reading JSON lines sees what each line is.
    return json.dumps({"type": data.pop("type"), **data}, allow_nan=False)


def from_json(text: str | bytes) -> Event:
    """The event :func:`to_json` wrote; unknown keys are ignored, so newer writers are read.

    Raises:
        ValueError: the text is not JSON, has no known ``"type"`` tag, or a field is
            missing or of the wrong type.
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"expected a JSON event, got {text!r:.200}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    try:
        event: Event = _converter.structure(data, Event)  # type: ignore[arg-type]
    except KeyError as exc:
        raise ValueError(f"expected a known event 'type', got {data.get('type')!r}") from exc
    except cattrs.BaseValidationError as exc:
        problems = "; ".join(cattrs.transform_error(exc))
        raise ValueError(f"malformed {data.get('type')!r} event: {problems}") from exc
    except (TypeError, ValueError) as exc:
        raise ValueError(f"malformed {data.get('type')!r} event: {exc}") from exc
    return event

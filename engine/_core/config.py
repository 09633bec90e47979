"""``EngineConfig``: every knob of the runtime, validated, with documented defaults."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import cattrs
from cattrs.v import format_exception

from .catalog.dedup import DEFAULT_THRESHOLD, MODES, DedupMode
from .catalog.tool import id_tuple
from .errors import ConfigError
from .routing.config import RoutingConfig
from .validators import Check, is_number, rule

# Each rule names what it expects; a value of the wrong type fails the rule (ConfigError)
# instead of raising TypeError from a comparison.
_positive = rule(lambda v: is_number(v) and v > 0, "positive")
_non_negative_number = rule(lambda v: is_number(v) and v >= 0, "at least 0")
_non_negative = rule(lambda v: _is_int(v) and v >= 0, "at least 0 (an integer)")
_at_least_one = rule(lambda v: _is_int(v) and v >= 1, "at least 1 (an integer)")
_fraction = rule(lambda v: is_number(v) and 0.0 <= v <= 1.0, "between 0 and 1")
_flag = rule(lambda v: isinstance(v, bool), "true or false")
_threshold = rule(lambda v: v is None or is_number(v), "a finite number or None")
_dedup_mode = rule(lambda v: v in MODES, f"one of {', '.join(MODES)}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ids(value: Sequence[str]) -> tuple[str, ...]:
    ids = id_tuple(value, "always_active")
    if not all(isinstance(i, str) and i for i in ids):
        raise ConfigError(f"always_active must be a list of tool ids (strings), got {ids!r}")
    return ids


def _directory(value: object) -> str | None:
    # Kept as a string: the core does not import pathlib (the runtime makes it a Path).
    if value is None:
        return None
    if isinstance(value, str | os.PathLike):
        path = os.fspath(value)
        if isinstance(path, str) and path:
            return path
    raise ConfigError(f"cache_dir must be a directory path or None, got {value!r}")


def _section(kind: type[Any]) -> Check:
    """The field holds a ``kind`` object: a mapping or anything else is a mistake, named."""

    def check(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, kind):
            hint = (
                f"; build it as {kind.__name__}(...), or pass the whole config to"
                " EngineConfig.from_mapping"
                if isinstance(value, Mapping)
                else ""
            )
            raise ConfigError(
                f"{attribute.name} must be a {kind.__name__}, got {type(value).__name__}"
                f" {value!r}{hint}"
            )

    return check


@attrs.frozen(kw_only=True)
class SelectionDefaults:
    """Policy used when a call does not say otherwise (see ``toolroute.Policy``)."""

    max_tools: int = attrs.field(default=5, validator=_at_least_one)
    threshold: float | None = attrs.field(default=None, validator=_threshold)
    adaptive: bool = attrs.field(default=True, validator=_flag)
    always_active: tuple[str, ...] = attrs.field(default=(), converter=_ids)
    #: Ceiling on "show every tool" after two steps without a tool call.
    all_tools_ceiling: int = attrs.field(default=128, validator=_at_least_one)
    #: ``prepare_step`` also routes MCP servers (``config.routing``, the engine's decider) and
    #: hides the tools of servers dropped on a confident "no". Off: a decision call per step.
    route_servers: bool = attrs.field(default=False, validator=_flag)
    #: ``select`` and ``prepare_step`` ask the engine's decider whether the request needs any
    #: tool, and show none but ``always_active`` on a confident "no" (``no_tool_needed``).
    #: Off: on the test splits the chosen gate still hid a needed tool for 0.40 % of BFCL's
    #: tool-needing requests, and it costs a decision call per request.
    no_tool: bool = attrs.field(default=False, validator=_flag)
    #: How confident the "no" must be: ``|p - 0.5| * 2``; 0.9 hides tools at p(tool) ≤ 0.05
    #: (chosen on the MetaTool awareness and BFCL relevance dev splits).
    no_tool_min_confidence: float = attrs.field(default=0.9, validator=_fraction)
    #: Seconds the no-tool question may take; past it the selection stands as recall made it.
    no_tool_deadline_s: float = attrs.field(default=1.0, validator=_positive)


@attrs.frozen(kw_only=True)
class Deadlines:
    """Seconds each operation may take before it returns a fail-open result."""

    #: Embedding one request; past it, recall is keyword-only (``degraded``). It bounds
    #: ``select``, ``prepare_step`` and ``search_tools``, plus ``rerank.deadline_s`` in
    #: ``select`` when re-ranking is on.
    embed_s: float = attrs.field(default=0.25, validator=_positive)


@attrs.frozen(kw_only=True)
class WarmupConfig:
    #: ``open_engine`` waits until tool embeddings are ready instead of serving keyword-only.
    wait: bool = attrs.field(default=False, validator=_flag)
    #: Tools embedded per worker-thread call (one progress event each).
    batch: int = attrs.field(default=64, validator=_at_least_one)


@attrs.frozen(kw_only=True)
class SessionConfig:
    max_sessions: int = attrs.field(default=10_000, validator=_at_least_one)
    idle_s: float = attrs.field(default=3600.0, validator=_positive)
    #: Steps a tool set stays forced after its anchor activated it, so a follow-up ("now the
    #: second one") still sees the set's members; 0 turns this off.
    sticky_steps: int = attrs.field(default=3, validator=_non_negative)


@attrs.frozen(kw_only=True)
class DedupConfig:
    """Near-duplicate tools dropped before indexing (``toolroute.dedupe_tools``)."""

    #: Off: every mode merges some sibling tools at thresholds that find twins (README, Dedup).
    enabled: bool = attrs.field(default=False, validator=_flag)
    #: Similarity at which a tool folds into an earlier kept one: Jaccard of the signatures'
    #: tokens, or the embedder's cosine for ``embedding``.
    threshold: float = attrs.field(default=DEFAULT_THRESHOLD, validator=_fraction)
    #: ``signature`` (name, description, schema), ``content`` (without the name) or
    #: ``embedding`` (the engine's embedder, before ``open_engine`` returns).
    mode: DedupMode = attrs.field(default="signature", validator=_dedup_mode)


@attrs.frozen(kw_only=True)
class RoutingSessionConfig:
    """Memory of server routing across one session's turns (needs a session id)."""

    #: Reuse a session's routing for the same query instead of asking again (off, as in
    #: NeuroLink: a conversation's context can change what the same words need).
    cache: bool = attrs.field(default=False, validator=_flag)
    #: Seconds a cached routing stays valid.
    cache_ttl_s: float = attrs.field(default=60.0, validator=_positive)
    #: Cached routings kept across all sessions (least recently used dropped first).
    cache_entries: int = attrs.field(default=256, validator=_at_least_one)
    #: Routings for which a server the router selected stays kept (0: off; NeuroLink
    #: uses 3 when stickiness is on), so a follow-up turn keeps the servers in use.
    sticky_turns: int = attrs.field(default=0, validator=_non_negative)


@attrs.frozen(kw_only=True)
class DecisionConfig:
    #: Batches in flight per decision provider, shared by every caller of the engine
    #: (TypeSafe queues concurrent requests; Perplexity allows 10 requests/s).
    concurrency: int = attrs.field(default=4, validator=_at_least_one)


@attrs.frozen(kw_only=True)
class RerankConfig:
    """Re-ranking of ``select``'s candidates by the engine's generator (toolpick semantics)."""

    #: Off: it costs a chat-model call per request; worth it for slang and vague requests.
    enabled: bool = attrs.field(default=False, validator=_flag)
    #: Seconds the generator may take; past it the recall order is served (``degraded``).
    deadline_s: float = attrs.field(default=2.0, validator=_positive)


@attrs.frozen(kw_only=True)
class EnrichmentConfig:
    """Synonyms and informal phrasings added to each tool's recall text at warm-up."""

    #: Off: it costs one generator call per ``batch`` tools on a cold cache.
    enabled: bool = attrs.field(default=False, validator=_flag)
    #: Tools per generator call.
    batch: int = attrs.field(default=20, validator=_at_least_one)
    #: Generator calls in flight.
    concurrency: int = attrs.field(default=2, validator=_at_least_one)
    #: Seconds one call may take; a late batch keeps its tools' original text.
    deadline_s: float = attrs.field(default=30.0, validator=_positive)


@attrs.frozen(kw_only=True)
class EventConfig:
    #: Put the raw request text in events (off: only an HMAC with a per-engine random key).
    include_queries: bool = attrs.field(default=False, validator=_flag)
    #: Buffer of a subscriber that does not choose one.
    buffer: int = attrs.field(default=256, validator=_at_least_one)


@attrs.frozen(kw_only=True)
class LoadConfig:
    """What recall does under load: the query cache and the fast tier (README, Under load)."""

    #: Request vectors remembered by exact text, shared by every caller of the engine (a step
    #: that repeats its turn's user message costs no model call); 0 turns the cache off.
    query_cache: int = attrs.field(default=4096, validator=_non_negative)
    #: Build the fast tier (static token rows of the default MiniLM model) after warm-up and
    #: answer from it when the full model cannot answer within ``budget_s``.
    fast_tier: bool = attrs.field(default=True, validator=_flag)
    #: Keep fitting the fast tier to the requests the full tier answers (statistics only; the
    #: request text is never written to disk).
    learn: bool = attrs.field(default=True, validator=_flag)
    #: Seconds a request may be predicted to wait for the full model before the fast tier
    #: answers at once; ``None`` means half of ``deadlines.embed_s`` (the prediction counts
    #: model time only: scoring and the event loop need the rest under a burst).
    budget_s: float | None = attrs.field(
        default=None,
        validator=rule(lambda v: v is None or (is_number(v) and v > 0), "positive or None"),
    )
    #: Served requests the fast tier must have learned from before it answers. Fitted on
    #: the catalogue's text alone (0) and fused with its own weights it is above keyword-only
    #: on every dev split at every amount of traffic (``tests/bench/fast_tier_threshold.py``),
    #: so it answers from the first request: a new engine's first burst is not keyword-only.
    min_served: int = attrs.field(default=0, validator=_non_negative)
    #: Ask the fast tier first and the full model only where the fast tier is unsure: a
    #: combined ranking whose best fused score clears ``FAST_TIER_FLOOR`` stands (applied,
    #: not degraded). Chosen on the dev splits; on the test splits BFCL hit@5 +1.2 points,
    #: MetaTool -0.3, 47 % / 17 % of requests answered without the model
    #: (``tests/bench/bench_long.py --cascade``).
    cascade: bool = attrs.field(default=True, validator=_flag)
    #: (request, vector) pairs held in memory until the next fit.
    learn_buffer: int = attrs.field(default=2048, validator=_at_least_one)
    #: Served pairs that trigger a fit (in a worker thread; the old table serves meanwhile).
    refit_every: int = attrs.field(default=256, validator=_at_least_one)


@attrs.frozen(kw_only=True)
class LearningConfig:
    """Learning from example requests and from use (``Engine.learn``).

    One privacy rule for everything the engine learns from requests (this evidence, and the
    fast tier's served-request statistics): request text never reaches a store or the disk
    unless ``keep_text`` is on; a request is kept as its vector and a SHA-256 of its text.
    """

    #: Off by default: recording what the conversation shows learns from every step.
    record_calls: bool = attrs.field(default=False, validator=_flag)
    #: Evidence kept per tool (examples and learned requests); the oldest learned go first.
    per_tool: int = attrs.field(default=32, validator=_at_least_one)
    #: Keep request text with the evidence (for inspection); off: vectors and hashes only.
    keep_text: bool = attrs.field(default=False, validator=_flag)
    #: Seconds ``learn`` waits for the request's embedding (past it nothing is learned); far
    #: longer than a request's ``embed_s``, as nobody is waiting to be shown tools.
    deadline_s: float = attrs.field(default=5.0, validator=_positive)


@attrs.frozen(kw_only=True)
class RestartPolicy:
    """At most ``max_restarts`` restarts within ``window_s``; waits double from ``backoff_s``."""

    max_restarts: int = attrs.field(default=5, validator=_non_negative)
    window_s: float = attrs.field(default=60.0, validator=_positive)
    backoff_s: float = attrs.field(default=0.05, validator=_non_negative_number)
    max_backoff_s: float = attrs.field(default=5.0, validator=_non_negative_number)


@attrs.frozen(kw_only=True)
class EngineConfig:
    """Configuration of ``open_engine``; every section has working defaults.

    ``cache_dir`` ``None`` means the user cache directory (``$TOOLROUTE_CACHE_DIR`` overrides
    it); ``cache=False`` turns the embedding cache off. ``correct_spelling=False`` ranks
    requests as written (by default a misspelled word one edit from a word of the tools'
    text is read as that word).

    Every section is checked when the config is built: a mapping (or anything else) where a
    section belongs is a ``ConfigError`` naming the field; ``from_mapping`` builds the
    sections from mappings.

    Raises:
        ConfigError: a field of the wrong type or out of range, named.
    """

    selection: SelectionDefaults = attrs.field(
        factory=SelectionDefaults, validator=_section(SelectionDefaults)
    )
    deadlines: Deadlines = attrs.field(factory=Deadlines, validator=_section(Deadlines))
    warmup: WarmupConfig = attrs.field(factory=WarmupConfig, validator=_section(WarmupConfig))
    sessions: SessionConfig = attrs.field(factory=SessionConfig, validator=_section(SessionConfig))
    events: EventConfig = attrs.field(factory=EventConfig, validator=_section(EventConfig))
    dedup: DedupConfig = attrs.field(factory=DedupConfig, validator=_section(DedupConfig))
    routing: RoutingConfig = attrs.field(factory=RoutingConfig, validator=_section(RoutingConfig))
    routing_session: RoutingSessionConfig = attrs.field(
        factory=RoutingSessionConfig, validator=_section(RoutingSessionConfig)
    )
    decision: DecisionConfig = attrs.field(
        factory=DecisionConfig, validator=_section(DecisionConfig)
    )
    rerank: RerankConfig = attrs.field(factory=RerankConfig, validator=_section(RerankConfig))
    enrichment: EnrichmentConfig = attrs.field(
        factory=EnrichmentConfig, validator=_section(EnrichmentConfig)
    )
    restarts: RestartPolicy = attrs.field(factory=RestartPolicy, validator=_section(RestartPolicy))
    load: LoadConfig = attrs.field(factory=LoadConfig, validator=_section(LoadConfig))
    learning: LearningConfig = attrs.field(
        factory=LearningConfig, validator=_section(LearningConfig)
    )
    #: Where embeddings and enrichment are cached (a path, kept as a string).
    cache_dir: str | None = attrs.field(default=None, converter=_directory)
    cache: bool = attrs.field(default=True, validator=_flag)
    correct_spelling: bool = attrs.field(default=True, validator=_flag)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> EngineConfig:
        """Build from plain data (a parsed JSON/TOML file), e.g. ``{"deadlines": {"embed_s": 0.1}}``.

        Raises:
            ConfigError: an unknown key, a wrong type or an out-of-range value, named.
        """
        try:
            return _converter.structure(dict(data), cls)
        except ConfigError:
            raise
        except (cattrs.BaseValidationError, TypeError, ValueError) as exc:
            raise ConfigError(f"invalid engine config: {_describe(exc)}") from None


_converter = cattrs.Converter(forbid_extra_keys=True)


def _strict_bool(value: Any, _type: Any) -> bool:
    # cattrs would call bool(), so the string "false" would switch an option on.
    if not isinstance(value, bool):
        raise ConfigError(f"expected true or false, got {value!r}")
    return value


_converter.register_structure_hook(bool, _strict_bool)
# cattrs would call int(), float() or str(), so 2.5 sessions would become 2, true would
# become 1 and a number a cache path; the fields' own validators say what they expect.
for _scalar in (int, float, str):
    _converter.register_structure_hook(_scalar, lambda value, _type: value)
# Likewise a string given for a list of ids would become a tuple of its letters.
_converter.register_structure_hook_func(
    lambda type_: type_ == tuple[str, ...], lambda value, _type: value
)
# The mode's own validator names the choices; cattrs' Literal check would not.
_converter.register_structure_hook_func(lambda type_: type_ == DedupMode, lambda value, _: value)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc, format_exception=_format))
    return str(exc)


def _format(exc: BaseException, type_: Any) -> str:
    # Our own validators already say what was expected and what came.
    return str(exc) if isinstance(exc, ConfigError) else format_exception(exc, type_)

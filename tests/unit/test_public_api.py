"""The public names are a contract: adding one is a decision, losing one is a break."""

from __future__ import annotations

import contextlib
import enum
import importlib
import importlib.metadata
import inspect
import pickle
import traceback
import types
import typing
from collections.abc import Iterator

import attrs
import pytest

import toolroute
import toolroute.asyncio
import toolroute.config
import toolroute.decisions
import toolroute.evaluate
import toolroute.events
import toolroute.prompt_cache
import toolroute.providers
import toolroute.redis
import toolroute.stores
import toolroute.testing
import toolroute.tool_search
from toolroute._core.public import NoPublicConstructor, is_private_home

PUBLIC = {
    "CacheWarning",
    "Catalog",
    "CatalogError",
    "ConfigError",
    "DecisionError",
    "DecisionStatistics",
    "DedupResult",
    "EmbedderError",
    "Engine",
    "EngineConfig",
    "EngineCrashed",
    "EngineStatistics",
    "EventStatistics",
    "Explanation",
    "FROM_CONFIG",
    "FromConfig",
    "Messages",
    "ModelIntegrityError",
    "Outcome",
    "Policy",
    "ProviderError",
    "Ranking",
    "RecallStatistics",
    "Removed",
    "RoutingConfig",
    "RoutingOutcome",
    "Selection",
    "Server",
    "SessionStatistics",
    "StepSelection",
    "Strategy",
    "Tool",
    "ToolAccess",
    "ToolIndex",
    "ToolSet",
    "ToolrouteError",
    "decide",
    "dedupe_tools",
    "open_engine",
    "route_servers",
    "search_tools_definition",
    "system_prompts",
    "try_decide",
}
CONFIG = {
    "DecisionConfig",
    "Deadlines",
    "DedupConfig",
    "EngineConfig",
    "EnrichmentConfig",
    "EventConfig",
    "LearningConfig",
    "LoadConfig",
    "RerankConfig",
    "RestartPolicy",
    "RoutingConfig",
    "RoutingSessionConfig",
    "SelectionDefaults",
    "SessionConfig",
    "WarmupConfig",
}
EVENTS = {
    "CatalogUpdated",
    "DecisionFinished",
    "Delivery",
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
    "to_json",
}
DECISIONS = {
    "BooleanAnswer",
    "BooleanGate",
    "BooleanQuestion",
    "ChoiceAnswer",
    "ChoiceQuestion",
    "ChoiceReading",
    "DecisionError",
    "DecisionErrorKind",
    "DecisionLimits",
    "DecisionRequest",
    "DecisionResult",
    "MediaLimits",
    "ModelLimits",
    "PreparedMedia",
    "ScoreAnswer",
    "ScoreQuestion",
    "Usage",
    "boolean_confidence",
    "decide",
    "estimate_state_tokens",
    "gate_boolean",
    "read_boolean",
    "read_choice",
    "read_score",
    "try_decide",
}
STORES = {
    "EmbeddingCache",
    "EmbeddingStore",
    "EnrichmentCache",
    "EnrichmentStore",
    "FastTierStore",
    "LearnedExample",
    "LearningCache",
    "LearningStore",
    "MemoryLearningStore",
    "MemoryRoutingCache",
    "MemorySessionStore",
    "RoutingCache",
    "SessionState",
    "SessionStore",
    "Stores",
}
EVALUATE = {"Query", "evaluate", "load_queries", "routing_query", "split_of", "tokenize"}
TESTING = {"Fault", "ScriptedDecider", "ScriptedEmbedder", "ScriptedGenerator", "inline_cpu"}
PROVIDERS = {
    "BuildsFastTier",
    "FastTierModel",
    "AnthropicGenerator",
    "Calibration",
    "CalibrationModel",
    "ClefDecider",
    "Decider",
    "DecisionCodec",
    "Decoded",
    "Generator",
    "HttpDecider",
    "LayaDecider",
    "LocalDecider",
    "LogprobDecider",
    "LoopOptions",
    "OpenAICompatibleGenerator",
    "OpenAIDecisionsDecider",
    "PerplexityDecider",
    "ScaleDownDecider",
    "TypeSafeDecider",
    "UsageModel",
    "Wire",
    "XorDecider",
    "default_decider",
    "Embedder",
    "HashingEmbedder",
    "Int8Kernel",
    "MiniLMEmbedder",
    "ORIGINAL_MINILM_SHA256",
    "OnnxInt8Kernel",
    "OpenAIEmbedder",
    "Redactor",
    "Reply",
    "RetryPolicy",
    "default_embedder",
}


def public_names(module: object) -> set[str]:
    # Subpackages (toolroute.providers, toolroute.asyncio) are attributes once imported.
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }


REDIS = {
    "EventConsumer",
    "RedisStatistics",
    "RedisStores",
    "StreamedEvent",
    "open_event_consumer",
    "open_redis_stores",
}

PUBLIC_MODULES = [
    (toolroute, PUBLIC),
    (toolroute.config, CONFIG),
    (toolroute.events, EVENTS),
    (toolroute.evaluate, EVALUATE),
    (toolroute.decisions, DECISIONS),
    (toolroute.testing, TESTING),
    (toolroute.stores, STORES),
    (toolroute.redis, REDIS),
    (toolroute.providers, PROVIDERS),
    (
        toolroute.tool_search,
        {"SearchCall", "ToolSearch", "mark_deferred", "read_call", "search_tool"},
    ),
    (
        toolroute.prompt_cache,
        {"StickyPicks", "permitted_call", "restriction", "same_topic", "stable_order"},
    ),
]

#: The framework and protocol adapters, each pinned where its extra is installed (CI installs
#: every extra; without one, that adapter cannot even be imported).
ADAPTERS = {
    "toolroute.integrations.pydantic_ai": {"RouteTools", "search_strategy"},
    "toolroute.integrations.openai_agents": {"ToolRouter"},
    "toolroute.integrations.langchain": {"ToolRouteMiddleware", "retrieve_tools"},
    "toolroute.integrations.mcp": {
        "LiveCatalog",
        "McpConfig",
        "McpServerConfig",
        "McpServerUnavailable",
        "ServerStatus",
        "open_mcp_catalog",
        "read_mcp_config",
    },
}
for _name, _names in ADAPTERS.items():
    with contextlib.suppress(ImportError):
        PUBLIC_MODULES.append((importlib.import_module(_name), _names))


@pytest.mark.parametrize(
    ("module", "names"), PUBLIC_MODULES, ids=lambda v: getattr(v, "__name__", "")
)
def test_public_modules_export_exactly_the_public_names(
    module: types.ModuleType, names: set[str]
) -> None:
    assert set(module.__all__) == names
    assert len(module.__all__) == len(names)  # no name twice
    assert public_names(module) == names  # nothing public outside __all__, nothing missing


def test_the_asyncio_module_lists_its_names() -> None:
    exported = set(toolroute.asyncio.__all__)
    assert exported <= public_names(toolroute.asyncio)
    assert {"open_engine", "AsyncioEngine"} <= exported


@pytest.mark.parametrize(
    ("module", "names"), PUBLIC_MODULES, ids=lambda v: getattr(v, "__name__", "")
)
def test_public_objects_name_a_public_module(module: types.ModuleType, names: set[str]) -> None:
    private = {
        name: value.__module__
        for name in names
        if (value := getattr(module, name)) is not None
        and (isinstance(value, type) or callable(value))
        and isinstance(getattr(value, "__module__", None), str)
        and is_private_home(value.__module__)
    }
    assert private == {}


def test_errors_print_with_their_public_path() -> None:
    text = "".join(traceback.format_exception_only(toolroute.ConfigError("bad option")))
    assert text.strip() == "toolroute.ConfigError: bad option"
    assert repr(toolroute.Selection) == "<class 'toolroute.Selection'>"
    assert toolroute.config.WarmupConfig.__module__ == "toolroute.config"
    assert toolroute.decisions.DecisionRequest.__module__ == "toolroute.decisions"
    assert toolroute.events.SelectionFinished.__module__ == "toolroute.events"
    # Exported twice: the top level names it first.
    assert toolroute.decisions.decide.__module__ == "toolroute"
    # Methods follow their class; qualified names are untouched.
    assert toolroute.Catalog.from_file.__module__ == "toolroute"
    assert toolroute.Catalog.from_file.__qualname__ == "Catalog.from_file"


def test_strategy_is_a_string_enum_that_equals_its_names() -> None:
    assert [s.value for s in toolroute.Strategy] == ["keyword", "semantic", "combined"]
    assert toolroute.Strategy.COMBINED == "combined"
    assert toolroute.Strategy("keyword") is toolroute.Strategy.KEYWORD
    assert toolroute.Strategy.__module__ == "toolroute"
    assert pickle.loads(pickle.dumps(toolroute.Strategy.SEMANTIC)) is toolroute.Strategy.SEMANTIC


def test_renamed_objects_still_pickle_and_resolve_their_types() -> None:
    selection = toolroute.Selection(
        tool_ids=("a",), scores=(1.0,), strategy="keyword", outcome=toolroute.Outcome.APPLIED
    )
    assert pickle.loads(pickle.dumps(selection)) == selection
    config = toolroute.EngineConfig.from_mapping({"warmup": {"wait": True}})
    assert config.warmup == toolroute.config.WarmupConfig(wait=True)
    event = toolroute.events.WarmupFinished(tools=3, embedded=3, from_cache=1, seconds=0.5)
    assert toolroute.events.from_json(toolroute.events.to_json(event)) == event


#: The fields that tie events to their request and results (pinned: consumers join on them).
REQUEST_FIELDS = {
    toolroute.Selection: {"request_id"},
    toolroute.StepSelection: {"request_id"},
    toolroute.RoutingOutcome: {"request_id"},
    toolroute.events.SelectionFinished: {"session", "request_id"},
    toolroute.events.StepFinished: {"session", "request_id"},
    toolroute.events.RoutingFinished: {"session", "request_id"},
    toolroute.events.DecisionFinished: {"session", "request_id"},
    toolroute.events.FailOpen: {"operation", "session", "request_id"},
    toolroute.events.SubscriptionStarted: {
        "warmup",
        "warmup_reason",
        "catalog_version",
        "tools",
        "fast_tier",
        "time",
    },
    toolroute.events.EventsDropped: {"count", "time"},
}


@pytest.mark.parametrize(
    ("cls", "names"), REQUEST_FIELDS.items(), ids=lambda v: getattr(v, "__name__", "")
)
def test_request_fields_are_keyword_only_and_pinned(cls: type, names: set[str]) -> None:
    fields = attrs.fields_dict(cls)
    new_events = (toolroute.events.SubscriptionStarted, toolroute.events.EventsDropped)
    assert names == set(fields) if cls in new_events else names <= set(fields)
    # Keyword-only: a field added later never shifts a caller's arguments.
    assert all(fields[name].kw_only for name in names)


def test_reader_entry_points_exist() -> None:
    for name in (
        "from_file",
        "from_openai",
        "from_anthropic",
        "from_gemini",
        "from_mcp",
        "from_mcp_servers",
        "from_plain",
        "from_data",
        "demo",
    ):
        assert callable(getattr(toolroute.Catalog, name))


def test_errors_share_one_base_and_config_errors_are_value_errors() -> None:
    for error in (
        toolroute.EngineCrashed,
        toolroute.CatalogError,
        toolroute.ConfigError,
        toolroute.EmbedderError,
        toolroute.ModelIntegrityError,
        toolroute.ProviderError,
    ):
        assert issubclass(error, toolroute.ToolrouteError)
    assert issubclass(toolroute.CatalogError, ValueError)
    assert issubclass(toolroute.ConfigError, ValueError)


def test_asyncio_module_exposes_the_bridge() -> None:
    assert callable(toolroute.asyncio.open_engine)
    assert toolroute.asyncio.AsyncioEngine.select


def _named_types(hint: object) -> Iterator[type]:
    """Every class a type hint names, through unions, generics and ``Literal``."""
    if isinstance(hint, type):
        yield hint
    for argument in typing.get_args(hint):
        yield from _named_types(argument)


#: Names imported only for type checkers resolve against the public surface.
_PUBLIC_NAMESPACE = {
    name: getattr(module, name) for module, names in PUBLIC_MODULES for name in names
}


def _hints(target: object) -> dict[str, object]:
    return typing.get_type_hints(target, localns=_PUBLIC_NAMESPACE)


def _public_callables(module: types.ModuleType) -> Iterator[tuple[str, object]]:
    for name in module.__all__:
        value = getattr(module, name)
        if isinstance(value, type):
            yield name, value
            for attribute, member in vars(value).items():
                if not attribute.startswith("_") and inspect.isroutine(member):
                    yield f"{name}.{attribute}", member
                elif isinstance(member, property) and member.fget is not None:
                    yield f"{name}.{attribute}", member.fget
        elif inspect.isroutine(value):
            yield name, value


#: Diagnostic views of the index internals, read by the runtime and the benchmarks; a user
#: never builds one. Listed so that a new private type in a public signature is a decision.
PRIVATE_BY_DESIGN = {
    # The shape of ``toolroute.Engine`` the shared stores need (the stores layer cannot
    # import the runtime); callers pass an ``Engine``.
    "RedisStores.attach: SharedEngine",
    "RedisStores.update: SharedEngine",
    "Engine.index: RecallIndex",
    "ToolIndex.int8: Int8Index",
    "ToolIndex.keyword: KeywordIndex",
    "ToolIndex.rank: RequestVector",
    "ToolIndex.ranked: RequestVector",
    "ToolIndex.vectors: VectorIndex",
    "ToolIndex.vectors_verdict: Verdict",
}


@pytest.mark.parametrize(
    ("module", "names"), PUBLIC_MODULES, ids=lambda v: getattr(v, "__name__", "")
)
def test_every_type_and_default_in_a_public_signature_is_public(
    module: types.ModuleType, names: set[str]
) -> None:
    private: dict[str, str] = {}
    for where, value in _public_callables(module):
        # A class only the library creates (``Engine``) takes private services.
        made_by_hand = isinstance(value, type) and not isinstance(value, NoPublicConstructor)
        target = value.__init__ if made_by_hand else value  # type: ignore[misc]
        target = getattr(target, "__func__", target)
        hints = _hints(target) if callable(target) else {}
        if isinstance(value, type) and attrs.has(value):
            public_fields = {field.name for field in attrs.fields(value) if field.init}
            hints |= {k: v for k, v in _hints(value).items() if k in public_fields}
        named = {cls for hint in hints.values() for cls in _named_types(hint)}
        try:
            parameters = inspect.signature(target).parameters.values()
        except (TypeError, ValueError):
            parameters = ()  # type: ignore[assignment]
        named |= {
            type(p.default)
            for p in parameters
            if p.default is not inspect.Parameter.empty and isinstance(p.default, enum.Enum)
        }
        for cls in named:
            key = f"{where}: {cls.__qualname__}"
            if is_private_home(cls.__module__) and key not in PRIVATE_BY_DESIGN:
                private[key] = cls.__module__
    assert private == {}


def test_engine_is_made_by_open_engine_only() -> None:
    with pytest.raises(TypeError, match=r"toolroute\.Engine cannot be constructed by hand; use"):
        toolroute.Engine()


def test_the_version_is_the_distribution_s_and_the_cli_prints_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from toolroute._cli.main import main

    assert toolroute.__version__ == importlib.metadata.version("toolroute")
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"toolroute {toolroute.__version__}"


@pytest.mark.parametrize(
    "cls",
    [
        toolroute.Selection,
        toolroute.StepSelection,
        toolroute.events.SelectionFinished,
        toolroute.events.StepFinished,
    ],
    ids=lambda c: c.__name__,
)
def test_the_no_tool_outcome_is_a_keyword_only_flag_off_by_default(cls: type) -> None:
    field = attrs.fields_dict(cls)["no_tool_needed"]
    assert field.kw_only
    assert field.default is False


def test_the_no_tool_options_are_pinned() -> None:
    defaults = toolroute.config.SelectionDefaults()
    assert (defaults.no_tool, defaults.no_tool_min_confidence, defaults.no_tool_deadline_s) == (
        False,
        0.9,
        1.0,
    )

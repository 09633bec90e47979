"""The public names are a contract: adding one is a decision, losing one is a break."""

from __future__ import annotations

import pickle
import traceback
import types

import pytest

import toolroute
import toolroute.asyncio
import toolroute.config
import toolroute.decisions
import toolroute.events
import toolroute.providers
import toolroute.stores
import toolroute.testing
from toolroute._core.public import is_private_home

PUBLIC = {
    "CacheWarning",
    "Catalog",
    "CatalogError",
    "ConfigError",
    "DecisionError",
    "DedupResult",
    "EmbedderError",
    "EmbeddingCache",
    "Engine",
    "EngineConfig",
    "EngineCrashed",
    "ModelIntegrityError",
    "Outcome",
    "Policy",
    "ProviderError",
    "Query",
    "Ranking",
    "RoutingConfig",
    "RoutingOutcome",
    "Selection",
    "Server",
    "RecallStatistics",
    "StepSelection",
    "Strategy",
    "Tool",
    "ToolIndex",
    "ToolSet",
    "ToolrouteError",
    "decide",
    "dedupe_tools",
    "evaluate",
    "load_queries",
    "open_engine",
    "route_servers",
    "routing_query",
    "search_tools_definition",
    "split_of",
    "system_prompts",
    "tokenize",
    "try_decide",
}
CONFIG = {
    "DecisionConfig",
    "Deadlines",
    "DedupConfig",
    "EngineConfig",
    "EnrichmentConfig",
    "EventConfig",
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
    "FailOpen",
    "RoutingFinished",
    "SelectionFinished",
    "ServiceRestarted",
    "StepFinished",
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
    "MemoryRoutingCache",
    "MemorySessionStore",
    "RoutingCache",
    "SessionState",
    "SessionStore",
    "Stores",
}
TESTING = {"Fault", "ScriptedDecider", "ScriptedEmbedder", "ScriptedGenerator", "inline_cpu"}
PROVIDERS = {
    "AnthropicGenerator",
    "ClefDecider",
    "Decider",
    "Generator",
    "HttpDecider",
    "LayaDecider",
    "LogprobDecider",
    "OpenAICompatibleGenerator",
    "OpenAIDecisionsDecider",
    "PerplexityDecider",
    "ScaleDownDecider",
    "TypeSafeDecider",
    "XorDecider",
    "default_decider",
    "Embedder",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
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


PUBLIC_MODULES = [
    (toolroute, PUBLIC),
    (toolroute.config, CONFIG),
    (toolroute.events, EVENTS),
    (toolroute.decisions, DECISIONS),
    (toolroute.testing, TESTING),
    (toolroute.stores, STORES),
    (toolroute.providers, PROVIDERS),
]


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

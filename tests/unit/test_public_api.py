"""The public names are a contract: adding one is a decision, losing one is a break."""

from __future__ import annotations

import types

import toolroute
import toolroute.asyncio
import toolroute.providers

PUBLIC = {
    "RoutingConfig",
    "RoutingOutcome",
    "route_servers",
    "routing_query",
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
    "CacheWarning",
    "DedupResult",
    "dedupe_tools",
    "Engine",
    "EngineCrashed",
    "EngineConfig",
    "StepSelection",
    "open_engine",
    "search_tools_definition",
    "Catalog",
    "CatalogError",
    "ConfigError",
    "EmbedderError",
    "EmbeddingCache",
    "ModelIntegrityError",
    "Outcome",
    "Policy",
    "ProviderError",
    "Query",
    "Ranking",
    "Selection",
    "Server",
    "Tool",
    "ToolIndex",
    "ToolSet",
    "ToolrouteError",
    "evaluate",
    "load_queries",
    "split_of",
    "tokenize",
}
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


def test_toolroute_exports_exactly_the_public_names() -> None:
    assert public_names(toolroute) == PUBLIC


def test_providers_export_exactly_the_public_names() -> None:
    assert public_names(toolroute.providers) == PROVIDERS


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

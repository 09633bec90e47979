"""toolroute: decide, on every step of an LLM agent, which tools the model should see.

The everyday names live here; ``toolroute.config`` holds every config section,
``toolroute.events`` the events, ``toolroute.decisions`` the decision API's types and readers,
``toolroute.testing`` scripted fakes, ``toolroute.asyncio`` the engine for asyncio hosts and
``toolroute.providers`` everything that talks to a model.
"""

from ._core.catalog import Catalog as Catalog
from ._core.catalog import Server as Server
from ._core.catalog import Tool as Tool
from ._core.config import EngineConfig as EngineConfig
from ._core.dedup import DedupResult as DedupResult
from ._core.dedup import dedupe_tools as dedupe_tools
from ._core.errors import CatalogError as CatalogError
from ._core.errors import ConfigError as ConfigError
from ._core.errors import DecisionError as DecisionError
from ._core.errors import EmbedderError as EmbedderError
from ._core.errors import EngineCrashed as EngineCrashed
from ._core.errors import ModelIntegrityError as ModelIntegrityError
from ._core.errors import ProviderError as ProviderError
from ._core.errors import ToolrouteError as ToolrouteError
from ._core.evaluate import Query as Query
from ._core.evaluate import evaluate as evaluate
from ._core.evaluate import load_queries as load_queries
from ._core.evaluate import split_of as split_of
from ._core.outcome import Outcome as Outcome
from ._core.policy import Policy as Policy
from ._core.public import publish as _publish
from ._core.routing_config import RoutingConfig as RoutingConfig
from ._core.search_tool import search_tools_definition as search_tools_definition
from ._core.selection import Ranking as Ranking
from ._core.selection import Selection as Selection
from ._core.selection import Strategy as Strategy
from ._core.text import tokenize as tokenize
from ._core.toolsets import ToolSet as ToolSet
from ._core.toolsets import system_prompts as system_prompts
from ._routing.pipeline import RoutingOutcome as RoutingOutcome
from ._routing.pipeline import route_servers as route_servers
from ._routing.pipeline import routing_query as routing_query
from ._runtime.engine import Engine as Engine
from ._runtime.engine import StepSelection as StepSelection
from ._runtime.engine import open_engine as open_engine
from ._runtime.recall import RecallStatistics as RecallStatistics
from ._runtime.stateless import decide as decide
from ._runtime.stateless import try_decide as try_decide
from ._runtime.tool_index import ToolIndex as ToolIndex
from ._stores.embedding_cache import CacheWarning as CacheWarning
from ._stores.embedding_cache import EmbeddingCache as EmbeddingCache

__all__ = [
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
    "RecallStatistics",
    "RoutingConfig",
    "RoutingOutcome",
    "Selection",
    "Server",
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
]

_publish(__name__, globals())

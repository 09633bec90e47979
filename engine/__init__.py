"""toolroute: decide, on every step of an LLM agent, which tools the model should see.

The everyday names live here; ``toolroute.config`` holds every config section,
``toolroute.events`` the events, ``toolroute.evaluate`` the evaluation helpers, ``toolroute.decisions`` the decision API's types and readers,
``toolroute.testing`` scripted fakes, ``toolroute.asyncio`` the engine for asyncio hosts and
``toolroute.providers`` everything that talks to a model.
"""

from importlib.metadata import version as _version

from ._core.catalog.catalog import Catalog as Catalog
from ._core.catalog.catalog import Server as Server
from ._core.catalog.catalog import Tool as Tool
from ._core.catalog.dedup import DedupResult as DedupResult
from ._core.catalog.dedup import Removed as Removed
from ._core.catalog.dedup import dedupe_tools as dedupe_tools
from ._core.config import EngineConfig as EngineConfig
from ._core.errors import CatalogError as CatalogError
from ._core.errors import ConfigError as ConfigError
from ._core.errors import DecisionError as DecisionError
from ._core.errors import EmbedderError as EmbedderError
from ._core.errors import EngineCrashed as EngineCrashed
from ._core.errors import ModelIntegrityError as ModelIntegrityError
from ._core.errors import ProviderError as ProviderError
from ._core.errors import ToolrouteError as ToolrouteError
from ._core.outcome import Outcome as Outcome
from ._core.public import publish as _publish
from ._core.routing.config import RoutingConfig as RoutingConfig
from ._core.select.access import ToolAccess as ToolAccess
from ._core.select.conversation import Messages as Messages
from ._core.select.explain import Explanation as Explanation
from ._core.select.policy import Policy as Policy
from ._core.select.search_tool import search_tools_definition as search_tools_definition
from ._core.select.selection import Ranking as Ranking
from ._core.select.selection import Selection as Selection
from ._core.select.selection import Strategy as Strategy
from ._core.select.toolsets import ToolSet as ToolSet
from ._core.select.toolsets import system_prompts as system_prompts
from ._decisions.actor import DecisionStatistics as DecisionStatistics
from ._routing.pipeline import RoutingOutcome as RoutingOutcome
from ._routing.pipeline import route_servers as route_servers
from ._runtime.engine import Engine as Engine
from ._runtime.engine import StepSelection as StepSelection
from ._runtime.engine import open_engine as open_engine
from ._runtime.hub import EventStatistics as EventStatistics
from ._runtime.recall import RecallStatistics as RecallStatistics
from ._runtime.selector import FROM_CONFIG as FROM_CONFIG
from ._runtime.selector import FromConfig as FromConfig
from ._runtime.stateless import decide as decide
from ._runtime.stateless import try_decide as try_decide
from ._runtime.statistics import EngineStatistics as EngineStatistics
from ._runtime.statistics import SessionStatistics as SessionStatistics
from ._runtime.tool_index import ToolIndex as ToolIndex
from ._stores.embedding_cache import CacheWarning as CacheWarning

__all__ = [
    "FROM_CONFIG",
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
]

#: The installed distribution's version (``toolroute --version`` prints it).
__version__: str = _version("toolroute")

_publish(__name__, globals())

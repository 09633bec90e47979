"""toolroute: decide, on every step of an LLM agent, which tools the model should see."""

from ._cache import CacheWarning as CacheWarning
from ._cache import EmbeddingCache as EmbeddingCache
from ._catalog import Catalog as Catalog
from ._catalog import Server as Server
from ._catalog import Tool as Tool
from ._config import EngineConfig as EngineConfig
from ._engine import Engine as Engine
from ._engine import StepSelection as StepSelection
from ._engine import open_engine as open_engine
from ._errors import CatalogError as CatalogError
from ._errors import ConfigError as ConfigError
from ._errors import EmbedderError as EmbedderError
from ._errors import ModelIntegrityError as ModelIntegrityError
from ._errors import ProviderError as ProviderError
from ._errors import ToolrouteError as ToolrouteError
from ._evaluate import Query as Query
from ._evaluate import evaluate as evaluate
from ._evaluate import load_queries as load_queries
from ._evaluate import split_of as split_of
from ._index import ToolIndex as ToolIndex
from ._outcome import Outcome as Outcome
from ._policy import Policy as Policy
from ._search_tool import search_tools_definition as search_tools_definition
from ._selection import Ranking as Ranking
from ._selection import Selection as Selection
from ._text import tokenize as tokenize

"""Every section of the engine's configuration, each validated when it is built.

::

    from toolroute.config import EngineConfig, Deadlines, WarmupConfig

    config = EngineConfig(deadlines=Deadlines(embed_s=0.5), warmup=WarmupConfig(wait=True))
    config = EngineConfig.from_mapping({"deadlines": {"embed_s": 0.5}})   # from JSON/TOML
"""

from ._core.config import Deadlines as Deadlines
from ._core.config import DecisionConfig as DecisionConfig
from ._core.config import DedupConfig as DedupConfig
from ._core.config import EngineConfig as EngineConfig
from ._core.config import EnrichmentConfig as EnrichmentConfig
from ._core.config import EventConfig as EventConfig
from ._core.config import LearningConfig as LearningConfig
from ._core.config import LoadConfig as LoadConfig
from ._core.config import RerankConfig as RerankConfig
from ._core.config import RestartPolicy as RestartPolicy
from ._core.config import RoutingSessionConfig as RoutingSessionConfig
from ._core.config import SelectionDefaults as SelectionDefaults
from ._core.config import SessionConfig as SessionConfig
from ._core.config import WarmupConfig as WarmupConfig
from ._core.public import publish as _publish
from ._core.routing.config import RoutingConfig as RoutingConfig

__all__ = [
    "Deadlines",
    "DecisionConfig",
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
]

_publish(__name__, globals())

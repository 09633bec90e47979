"""Everything in toolroute that talks to a model."""

from .._core.protocols import Decider as Decider
from .._core.protocols import Embedder as Embedder
from .._core.protocols import Generator as Generator
from .._core.protocols import Int8Kernel as Int8Kernel
from .._core.public import publish as _publish
from ._decision_loop import HttpDecider as HttpDecider
from ._default_decider import default_decider as default_decider
from ._generators import AnthropicGenerator as AnthropicGenerator
from ._generators import OpenAICompatibleGenerator as OpenAICompatibleGenerator
from ._hashing import HashingEmbedder as HashingEmbedder
from ._int8_product import OnnxInt8Kernel as OnnxInt8Kernel
from ._minilm import MiniLMEmbedder as MiniLMEmbedder
from ._minilm import default_embedder as default_embedder
from ._openai_embeddings import OpenAIEmbedder as OpenAIEmbedder
from ._rules import RetryPolicy as RetryPolicy
from ._vendors.clef import ClefDecider as ClefDecider
from ._vendors.laya import LayaDecider as LayaDecider
from ._vendors.logprob import LogprobDecider as LogprobDecider
from ._vendors.openai_decisions import OpenAIDecisionsDecider as OpenAIDecisionsDecider
from ._vendors.perplexity import PerplexityDecider as PerplexityDecider
from ._vendors.scaledown import ScaleDownDecider as ScaleDownDecider
from ._vendors.typesafe import TypeSafeDecider as TypeSafeDecider
from ._vendors.xor import XorDecider as XorDecider

__all__ = [
    "AnthropicGenerator",
    "ClefDecider",
    "Decider",
    "Embedder",
    "Generator",
    "HashingEmbedder",
    "HttpDecider",
    "Int8Kernel",
    "LayaDecider",
    "LogprobDecider",
    "MiniLMEmbedder",
    "OnnxInt8Kernel",
    "OpenAICompatibleGenerator",
    "OpenAIDecisionsDecider",
    "OpenAIEmbedder",
    "PerplexityDecider",
    "RetryPolicy",
    "ScaleDownDecider",
    "TypeSafeDecider",
    "XorDecider",
    "default_decider",
    "default_embedder",
]

_publish(__name__, globals())

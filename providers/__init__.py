"""Everything in toolroute that talks to a model."""

from .._core.protocols import BuildsFastTier as BuildsFastTier
from .._core.protocols import Decider as Decider
from .._core.protocols import Embedder as Embedder
from .._core.protocols import FastTierModel as FastTierModel
from .._core.protocols import Generator as Generator
from .._core.protocols import Int8Kernel as Int8Kernel
from .._core.public import publish as _publish
from ._deciders.codec import DecisionCodec as DecisionCodec
from ._deciders.default import default_decider as default_decider
from ._deciders.local import Calibration as Calibration
from ._deciders.local import CalibrationModel as CalibrationModel
from ._deciders.local import LocalDecider as LocalDecider
from ._deciders.local import UsageModel as UsageModel
from ._deciders.loop import HttpDecider as HttpDecider
from ._deciders.vendors.clef import ClefDecider as ClefDecider
from ._deciders.vendors.laya import LayaDecider as LayaDecider
from ._deciders.vendors.logprob import LogprobDecider as LogprobDecider
from ._deciders.vendors.openai_decisions import OpenAIDecisionsDecider as OpenAIDecisionsDecider
from ._deciders.vendors.perplexity import PerplexityDecider as PerplexityDecider
from ._deciders.vendors.scaledown import ScaleDownDecider as ScaleDownDecider
from ._deciders.vendors.typesafe import TypeSafeDecider as TypeSafeDecider
from ._deciders.vendors.xor import XorDecider as XorDecider
from ._deciders.wire import Decoded as Decoded
from ._deciders.wire import Wire as Wire
from ._embedders.hashing import HashingEmbedder as HashingEmbedder
from ._embedders.int8_product import OnnxInt8Kernel as OnnxInt8Kernel
from ._embedders.minilm import ORIGINAL_MINILM_SHA256 as ORIGINAL_MINILM_SHA256
from ._embedders.minilm import MiniLMEmbedder as MiniLMEmbedder
from ._embedders.minilm import default_embedder as default_embedder
from ._embedders.openai_compatible import OpenAIEmbedder as OpenAIEmbedder
from ._generators import AnthropicGenerator as AnthropicGenerator
from ._generators import OpenAICompatibleGenerator as OpenAICompatibleGenerator
from ._http.async_driver import LoopOptions as LoopOptions
from ._http.retry import Redactor as Redactor
from ._http.retry import Reply as Reply
from ._http.rules import RetryPolicy as RetryPolicy

__all__ = [
    "ORIGINAL_MINILM_SHA256",
    "AnthropicGenerator",
    "BuildsFastTier",
    "Calibration",
    "CalibrationModel",
    "ClefDecider",
    "Decider",
    "DecisionCodec",
    "Decoded",
    "Embedder",
    "FastTierModel",
    "Generator",
    "HashingEmbedder",
    "HttpDecider",
    "Int8Kernel",
    "LayaDecider",
    "LocalDecider",
    "LogprobDecider",
    "LoopOptions",
    "MiniLMEmbedder",
    "OnnxInt8Kernel",
    "OpenAICompatibleGenerator",
    "OpenAIDecisionsDecider",
    "OpenAIEmbedder",
    "PerplexityDecider",
    "Redactor",
    "Reply",
    "RetryPolicy",
    "ScaleDownDecider",
    "TypeSafeDecider",
    "UsageModel",
    "Wire",
    "XorDecider",
    "default_decider",
    "default_embedder",
]

_publish(__name__, globals())

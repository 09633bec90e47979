"""Everything in toolroute that talks to a model."""

from ._hashing import HashingEmbedder as HashingEmbedder
from ._http import RetryPolicy as RetryPolicy
from ._minilm import MiniLMEmbedder as MiniLMEmbedder
from ._minilm import default_embedder as default_embedder
from ._openai_embeddings import OpenAIEmbedder as OpenAIEmbedder
from ._protocols import Embedder as Embedder

"""The bundled model as the default embedder, or a stand-in where it cannot load.

onnxruntime that does not import (a missing system library, a platform without its wheel) or
a damaged model file is an embedder failure like any other: an index or engine opened with
the default embedder ranks by keywords, marked degraded with the load's error as the reason,
instead of failing to open. An embedder the caller passes is the caller's, and its errors
are theirs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .._core.errors import EmbedderError
from .._core.protocols import Embedder

logger = logging.getLogger("toolroute.runtime")


class UnavailableEmbedder:
    """Every ``embed`` raises why the bundled model did not load."""

    identity: str = "unavailable"
    dim: int = 384  # the bundled model's
    max_batch: int = 1

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        raise EmbedderError(self.reason)


def bundled_or_unavailable() -> Embedder:
    """``default_embedder()``, or an ``UnavailableEmbedder`` saying why it failed (logged)."""
    from ..providers import default_embedder

    try:
        return default_embedder()
    except EmbedderError as exc:
        reason = f"the bundled model cannot load: {exc}"
        logger.warning("%s; recall is keyword-only", reason)
        return UnavailableEmbedder(reason)

"""The seams between the engine and the models it uses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors, synchronously.

    The engine calls ``embed`` from a worker thread. Implementations raise
    ``toolroute.EmbedderError`` (or ``ProviderError`` for remote ones) when they
    cannot produce vectors; the caller decides how to degrade.
    """

    #: Model and weights fingerprint; two embedders with equal identity give equal vectors.
    identity: str
    #: Vector width.
    dim: int
    #: The most texts one ``embed`` call sends to the model at once.
    max_batch: int

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Vectors for ``texts``: float32 of shape ``(len(texts), dim)``, rows L2-normalised."""
        ...

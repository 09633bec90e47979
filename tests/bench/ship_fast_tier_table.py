"""Distil the bundled model into the fast tier's shipped table, and print the pins to set.

    python tests/bench/ship_fast_tier_table.py

Writes ``providers/_embedders/fast_tier/fast_tier_table.npz`` (every vocabulary token on its
own through the default model, int8 rows with one float32 scale each, stored uncompressed)
and prints the three sha256 values ``fast_tier/files.py`` pins the table to. Run it whenever
the bundled model or tokenizer changes (about 20 s of CPU on 2 cores).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from toolroute.providers import default_embedder
from toolroute.providers._embedders.fast_tier.files import SHIPPED_TABLE, quantised
from toolroute.providers._embedders.fast_tier.tier import distil


def main() -> None:
    embedder = default_embedder()
    with SHIPPED_TABLE.open("wb") as f:
        np.savez(f, **quantised(distil(embedder)))
    digest = hashlib.sha256(Path(SHIPPED_TABLE).read_bytes()).hexdigest()
    print(f"wrote {SHIPPED_TABLE}")
    print(f'SHIPPED_TABLE_SHA256: Final = "{digest}"')
    print(f'SHIPPED_MODEL_SHA256: Final = "{embedder.model_sha256}"')
    print(f'SHIPPED_TOKENIZER_SHA256 = "{embedder.tokenizer_sha256}"')


if __name__ == "__main__":
    main()

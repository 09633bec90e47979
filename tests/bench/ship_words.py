"""Write ``engine/data/words.txt``: the words spelling correction never changes.

    python tests/bench/ship_words.py

They are the whole, lower-case, ASCII words of four letters or more in the bundled model's
WordPiece vocabulary (``providers/_embedders/tokenizer.json``): words the model reads as
themselves, so a request that uses one meant it (``toolroute._core.recall.spelling``).
"""

from __future__ import annotations

import json
from pathlib import Path

from toolroute._core.recall.spelling import MIN_LETTERS

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "providers/_embedders/tokenizer.json"
OUT = ROOT / "engine/data/words.txt"


def main() -> None:
    vocab = json.loads(TOKENIZER.read_text("utf-8"))["model"]["vocab"]
    words = sorted(
        w for w in vocab if w.isascii() and w.isalpha() and w.islower() and len(w) >= MIN_LETTERS
    )
    OUT.write_text("".join(f"{w}\n" for w in words), "utf-8")
    print(f"wrote {len(words)} words to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

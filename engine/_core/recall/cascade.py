"""Fast tier first: the full model is asked only when the fast tier's ranking is unsure.

Most of a lone selection's time is the full model reading the request (5-20 ms on two
cores); the fast tier answers in about 0.1 ms in the same vector space, but ranks worse
(BFCL dev hit@5 0.826 against 0.871). Where its best tool's fused score is high, though, the
full model rarely changes the top five: a ranking whose top score clears ``FAST_TIER_FLOOR``
stands, and only the others wait for the full model
(``tests/bench/bench_long.py --cascade`` chose the floor and prints the figures).

The floor is on the combined (fused) score of the default embedder: the cascade applies to
``combined`` recall only, and a fused score of another model says nothing about it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

#: The best fused score (cosine + keyword terms, ``fusion.fuse``) a fast-tier ranking needs
#: to stand without the full model. Chosen on the dev splits: the largest share of requests
#: answered by the fast tier with every dataset's dev hit@5 within 0.3 points of the full
#: model's (``tests/bench/bench_long.py --cascade``; 20 % of dev requests answered with the
#: bundled model). BFCL's dev split alone allows a lower floor, but MetaTool's fast tier,
#: fitted on 199 tool texts, ranks far worse.
FAST_TIER_FLOOR: Final = 0.600


def fast_ranking_stands(scores: Sequence[float], floor: float = FAST_TIER_FLOOR) -> bool:
    """Whether a fast-tier ranking (fused scores, best first) is sure enough to be the answer.

    An empty ranking, or a non-finite best score, never stands: the full model decides.
    """
    if not scores:
        return False
    best = float(scores[0])
    return best == best and best != float("inf") and best >= floor

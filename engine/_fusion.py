"""Fusion of keyword and embedding evidence into one score.

The default was chosen on the dev split of the bundled datasets (``tests/bench/fusion_sweep.py``)
among per-query z-scores, max-normalised BM25, rank cut-offs and coverage boosts. Z-score
and max-norm mixes gain most on catalogues that share words with requests (BFCL, LiveMCPBench)
but lose 5 points hit@5 on paraphrased requests with no word overlap, because one weak shared
word lifts the wrong tool. A squared-coverage boost barely moves those requests and still adds
4 points hit@5 on BFCL, so it is the default:

    combined = cosine + weight * coverage ** 2

``coverage`` is the share of the request's IDF mass a tool's text contains (see
``KeywordIndex.coverage``). The combined score stays on the cosine scale, lifted by at most
``weight``: its range is [-1, 1 + weight].
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Scores = npt.NDArray[np.float32]

#: Weight of the squared keyword coverage added to the cosine.
COVERAGE_WEIGHT = 0.4


def fuse(cosine: Scores, coverage: Scores, *, weight: float = COVERAGE_WEIGHT) -> Scores:
    """Combined score of every tool: ``cosine + weight * coverage**2``.

    A tool without a usable vector (``-inf`` cosine) counts as cosine 0, "no semantic
    evidence", so keyword evidence can still surface it rather than hide it for good.
    """
    fused: Scores = np.where(np.isfinite(cosine), cosine, np.float32(0.0)).astype(np.float32)
    fused += np.float32(weight) * coverage * coverage
    return fused

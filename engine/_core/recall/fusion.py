"""Fusion of keyword and embedding evidence into one score.

The default was chosen on the dev split of the bundled datasets (``tests/bench/fusion_sweep.py``)
among per-query z-scores, max-normalised BM25, rank cut-offs and coverage boosts. Z-score
and max-norm mixes gain most on catalogues that share words with requests (BFCL, LiveMCPBench)
but lose 5 points hit@5 on paraphrased requests with no word overlap, because one weak shared
word lifts the wrong tool. Squared coverage boosts barely move those requests and still add 5 points hit@5
on BFCL and 4 on LiveMCPBench, so they are the default:

    combined = cosine + 0.4 * coverage ** 2 + 0.1 * name_coverage ** 2

A fast-tier vector (a mean of static token rows) is rougher than the model's, so its fusion
leans on the words: ``cosine + 4 * coverage ** 2 + 0.33 * name_coverage ** 2``
(``FAST_TIER``; chosen on the dev splits by ``tests/bench/fast_tier_fusion.py``: above the
model's weights at every amount of served traffic, and above keyword-only from the first
request, which the model's weights are not on BFCL).

``coverage`` is the share of the request's IDF mass a tool's text contains;
``name_coverage`` the share of the tool name's IDF mass the request contains (see
``KeywordIndex``). Squaring keeps a weak, one-word match near zero. The combined score stays
on the cosine scale, lifted by at most 0.5 (4.33 for the fast tier's, whose scores no
threshold reads: a degraded ranking is on another scale).
"""

from __future__ import annotations

from typing import Final

import attrs
import numpy as np
import numpy.typing as npt

Scores = npt.NDArray[np.float32]

#: Weight of the squared share of the request found in the tool's text.
COVERAGE_WEIGHT = 0.4
#: Weight of the squared share of the tool's name found in the request.
NAME_WEIGHT = 0.1


@attrs.frozen
class FusionWeights:
    """How much the two keyword terms weigh next to the cosine."""

    coverage: float
    name: float


#: For the full model's vectors.
FULL_TIER: Final = FusionWeights(COVERAGE_WEIGHT, NAME_WEIGHT)
#: For the fast tier's vectors, which need the words' help more.
FAST_TIER: Final = FusionWeights(4.0, 0.33)


def keyword_terms(
    coverage: Scores, name_coverage: Scores, weights: FusionWeights = FULL_TIER
) -> tuple[Scores, Scores]:
    """The two keyword terms ``fuse`` adds to the cosine, in the order it adds them:
    ``0.4 * coverage**2`` and ``0.1 * name_coverage**2`` (with ``FULL_TIER`` weights).

    The int8 scorer adds the same terms to its candidates' exact cosines, in the same order,
    so its sums round exactly as ``fuse``'s do.
    """
    return (
        np.float32(weights.coverage) * coverage * coverage,
        np.float32(weights.name) * name_coverage * name_coverage,
    )


def fuse(
    cosine: Scores, coverage: Scores, name_coverage: Scores, weights: FusionWeights = FULL_TIER
) -> Scores:
    """Combined score of every tool: ``cosine + 0.4 * coverage**2 + 0.1 * name_coverage**2``
    (with ``FULL_TIER`` weights).

    A tool without a usable vector (``-inf`` cosine) counts as cosine 0, "no semantic
    evidence", so keyword evidence can still surface it rather than hide it for good.
    """
    fused: Scores = np.where(np.isfinite(cosine), cosine, np.float32(0.0)).astype(np.float32)
    for term in keyword_terms(coverage, name_coverage, weights):
        fused += term
    return fused

"""The selection planner: every decision on the ``select`` path, made once, as plain functions.

Which strategy ranks, what the ranking's outcome and reason are, how many candidates recall
fetches, which policy applies, whether the generator re-ranks and sees the whole catalogue:
each is one function here. The sync index (``RecallIndex``, ``ToolIndex``) and the trio
shells (the engine's selector, recall and re-ranker) only carry the plan out.

A result's outcome and its reason travel together as a ``Verdict``: a reason is never a flag
(an empty reason does not mean "applied"; the outcome says so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import attrs
import numpy as np
import numpy.typing as npt

from ..errors import ConfigError
from ..outcome import Outcome
from ..recall.fusion import FAST_TIER, FULL_TIER, FusionWeights
from ..text import has_words
from .explain import Tier
from .policy import Policy
from .selection import Ranking, Strategy, anchor_scores, strategy_named, threshold_applies
from .toolsets import ToolSet, activated_sets

Vector = npt.NDArray[np.float32]

#: Recall ranks this many candidates per pick when tool sets are served: an anchor may rank
#: just below the picks and still activate its set.
ANCHOR_OVERFETCH: Final = 3
#: toolpick's ``RERANK_TOOL_LIMIT``: up to this many tools, the re-ranker sees the whole
#: catalogue (the model may find what recall missed).
RERANK_TOOL_LIMIT: Final = 50
#: Recall fetches this many candidates per wanted tool for the re-ranker to choose from.
POOL_FACTOR: Final = 3


# -- outcome and reason -----------------------------------------------------------------------


@attrs.frozen
class Verdict:
    """An outcome and why: the outcome says whether the result was judged normally; the
    reason is text for people (empty when ``applied``)."""

    outcome: Outcome
    reason: str = ""

    @classmethod
    def applied(cls) -> Verdict:
        return APPLIED

    @classmethod
    def degraded(cls, reason: str) -> Verdict:
        """A degraded verdict; ours always say why.

        Raises:
            ValueError: ``reason`` is empty.
        """
        if not reason:
            raise ValueError("a degraded verdict needs a reason")
        return cls(Outcome.DEGRADED, reason)


#: The one ``applied`` verdict (frozen, so shared: the hot path allocates none).
APPLIED: Final = Verdict(Outcome.APPLIED)


def combined_verdict(first: Verdict, then: Verdict) -> Verdict:
    """The verdict of a result that went through two stages: ``first``'s unless the second
    stage degraded (a skipped or applied second stage changes nothing), then degraded with
    both reasons, first stage first."""
    if then.outcome is not Outcome.DEGRADED:
        return first
    return Verdict(Outcome.DEGRADED, "; ".join(r for r in (first.reason, then.reason) if r))


# -- strategy ---------------------------------------------------------------------------------


def default_strategy(*, has_embedder: bool) -> Strategy:
    """``combined`` with an embedder, else ``keyword``."""
    return Strategy.COMBINED if has_embedder else Strategy.KEYWORD


def chosen_strategy(given: object, *, has_embedder: bool, strict: bool) -> Strategy:
    """The strategy a request ranks with: ``given`` (a name or a ``Strategy``) or the default.

    Args:
        strict: ask for ``semantic``/``combined`` without an embedder and get an error (the
            sync index, whose embedder is fixed), rather than a degraded keyword-only ranking
            (the engine, which asks before its embeddings are ready).

    Raises:
        ConfigError: an unknown strategy, or (``strict``) one that needs an embedder.
    """
    if given is None:
        return default_strategy(has_embedder=has_embedder)
    strategy = strategy_named(given)
    if strict and strategy is not Strategy.KEYWORD and not has_embedder:
        raise ConfigError(f"strategy {strategy.value!r} needs an embedder; this index has none")
    return strategy


# -- recall -----------------------------------------------------------------------------------


@attrs.frozen
class RequestVector:
    """A request's vector and how it was obtained.

    ``vector`` ``None``: there is none (the verdict says why: recall is keyword-only).
    ``applied``: a fresh or cached vector of the full model, or the fast tier's where its
    ranking is sure enough to stand (``sure``: the cascade); ``degraded``: a step down (the
    fast tier), which ranks like any other, fused with its own ``weights``, but makes the
    answer degraded. ``tier`` says which model made the vector.
    """

    vector: Vector | None
    verdict: Verdict
    weights: FusionWeights = FULL_TIER
    tier: Tier = "full"
    #: The vector's cosine with every tool of the index it is ranked on, when a burst's
    #: vectors were scored together (one matrix product); ``None``: scored when ranked.
    cosines: Vector | None = attrs.field(default=None, eq=False)

    @classmethod
    def full(cls, vector: Vector) -> RequestVector:
        return cls(vector, Verdict.applied())

    @classmethod
    def sure(cls, vector: Vector) -> RequestVector:
        """The fast tier's vector whose ranking stood (``fast_ranking_stands``): fused with
        the model's weights, the ones its floor was chosen with."""
        return cls(vector, Verdict.applied(), FULL_TIER, "fast")

    @classmethod
    def stepped_down(
        cls, vector: Vector, reason: str, cosines: Vector | None = None
    ) -> RequestVector:
        return cls(vector, Verdict.degraded(reason), FAST_TIER, "fast", cosines)

    @classmethod
    def missing(cls, reason: str) -> RequestVector:
        return cls(None, Verdict.degraded(reason or "no request vector"))


@attrs.frozen(kw_only=True)
class RecallPlan:
    """How one request is ranked.

    Attributes:
        strategy: what scores the candidates and what the ranking reports (``keyword`` when
            recall degraded to keyword-only).
        verdict: the ranking's outcome and reason.
        vector: the request vector to score with (``None`` for keyword scoring).
        weights: how keyword evidence is fused with that vector's cosine (``combined``).
        tier: which model made the vector (``keyword``: none was used).
        cosines: the vector's cosines with every tool, when they were computed already.
    """

    strategy: Strategy
    verdict: Verdict
    vector: Vector | None = attrs.field(default=None, eq=False)
    weights: FusionWeights = FULL_TIER
    tier: Tier = "keyword"
    cosines: Vector | None = attrs.field(default=None, eq=False)

    @property
    def ranks(self) -> bool:
        """Whether there is anything to rank (an empty request ranks nothing)."""
        return self.verdict.outcome is not Outcome.SKIPPED


def plan_recall(
    query: str, strategy: Strategy, request: RequestVector | None, *, tool_vectors: Verdict
) -> RecallPlan:
    """The one rule for a ranking's strategy, outcome and reason.

    Args:
        strategy: the strategy asked for (``chosen_strategy``).
        request: the request's vector, or why there is none; ``None`` when none was sought
            (``needs_request_vector`` said no).
        tool_vectors: whether the index has tool vectors (``applied``), or why not.

    An empty request, or one without a word (``"?!"``, emoji alone), is ``skipped``;
    ``keyword`` is ``applied`` whatever the embedder did;
    ``semantic``/``combined`` without a request vector or without tool vectors rank by
    keyword only, ``degraded`` with the reason; otherwise the request vector's verdict (a
    step-down vector ranks, but the answer is degraded).
    """
    if not has_words(query):
        return (_SKIPPED if not query.strip() else _WORDLESS)[strategy]
    if strategy is Strategy.KEYWORD:
        return _KEYWORD
    if request is None:
        unsought = tool_vectors if tool_vectors.outcome is not Outcome.APPLIED else _UNSOUGHT
        return RecallPlan(strategy=Strategy.KEYWORD, verdict=unsought)
    if request.vector is None:
        return RecallPlan(strategy=Strategy.KEYWORD, verdict=request.verdict)
    if tool_vectors.outcome is not Outcome.APPLIED:
        return RecallPlan(strategy=Strategy.KEYWORD, verdict=tool_vectors)
    return RecallPlan(
        strategy=strategy,
        verdict=request.verdict,
        vector=request.vector,
        weights=request.weights,
        tier=request.tier,
        cosines=request.cosines,
    )


# Plans that depend on nothing but the strategy, made once (the keyword path allocates none).
_SKIPPED: Final = {
    s: RecallPlan(strategy=s, verdict=Verdict(Outcome.SKIPPED, "empty query")) for s in Strategy
}
_WORDLESS: Final = {
    s: RecallPlan(strategy=s, verdict=Verdict(Outcome.SKIPPED, "no words in the query"))
    for s in Strategy
}
_KEYWORD: Final = RecallPlan(strategy=Strategy.KEYWORD, verdict=APPLIED)
_UNSOUGHT: Final = Verdict.degraded("no request vector")


def needs_request_vector(query: str, strategy: Strategy, *, tool_vectors: Verdict) -> bool:
    """Whether ranking ``query`` would use a request vector (so it is worth embedding)."""
    return (
        has_words(query)
        and strategy is not Strategy.KEYWORD
        and tool_vectors.outcome is Outcome.APPLIED
    )


# -- candidates and policy --------------------------------------------------------------------


def overfetched(picks: int, *, tool_sets: bool) -> int:
    """How many candidates to rank for ``picks`` shown: ``ANCHOR_OVERFETCH`` times as many
    when tool sets are served (their anchors may rank just below the picks)."""
    return picks * (ANCHOR_OVERFETCH if tool_sets else 1)


def policy_from_options(
    *,
    max_tools: int,
    threshold: float | None,
    adaptive: bool,
    always_active: Sequence[str],
    related: Mapping[str, Sequence[str]] | None,
    max_related: int,
    tool_sets: Sequence[ToolSet],
    forced_sets: Sequence[str],
) -> Policy:
    """The ``Policy`` a caller's selection keyword arguments describe.

    Raises:
        ConfigError: an option is out of range or of the wrong type (saying which).
    """
    try:
        return Policy(
            max_tools=max_tools,
            threshold=threshold,
            adaptive=adaptive,
            always_active=always_active,
            related={} if related is None else related,
            max_related=max_related,
            tool_sets=tool_sets,
            forced_sets=forced_sets,
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid selection option: {exc}") from None


def anchored_sets(ranking: Ranking, sets: Sequence[ToolSet]) -> tuple[str, ...]:
    """The sets an anchor genuinely activates in ``ranking`` (``anchor_scores`` decides which
    scores count)."""
    if not sets:
        return ()
    return activated_sets(anchor_scores(ranking), sets)


# -- re-ranking -------------------------------------------------------------------------------


def rerank_whole(catalogue_size: int) -> bool:
    """Whether the re-ranker sees the whole catalogue (at most ``RERANK_TOOL_LIMIT`` tools)."""
    return catalogue_size <= RERANK_TOOL_LIMIT


def rerank_pool_size(limit: int, catalogue_size: int) -> int:
    """How many candidates recall should hand to the re-ranker for ``limit`` picks.

    toolpick: the whole catalogue when ``rerank_whole``, else ``POOL_FACTOR × limit``
    candidates (never more than the catalogue).

    Raises:
        ValueError: a negative ``limit`` or ``catalogue_size``.
    """
    if limit < 0 or catalogue_size < 0:
        raise ValueError(f"limit and catalogue_size must be >= 0, got {limit}, {catalogue_size}")
    if rerank_whole(catalogue_size):
        return catalogue_size
    return min(POOL_FACTOR * limit, catalogue_size)


def rerank_candidates(ranking: Ranking, policy: Policy, catalogue: Sequence[str]) -> list[str]:
    """The ids the re-ranker chooses from, best first: recall's candidates (those at or above
    the threshold when it applies: toolpick thresholds before re-ranking, after which scores
    are on another scale), then, when ``rerank_whole``, the rest of the catalogue."""
    ids = list(ranking.tool_ids)
    if policy.threshold is not None and threshold_applies(ranking):
        ids = [i for i, s in zip(ids, ranking.scores, strict=True) if s >= policy.threshold]
    if rerank_whole(len(catalogue)):
        shown = set(ids)
        ids += [i for i in catalogue if i not in shown]
    return ids


def policy_after_rerank(policy: Policy, recall: Ranking) -> Policy:
    """The policy for re-ranked scores: no threshold and no elbow (scores are on the
    re-ranker's scale), with the sets recall's anchors activated forced (the floors read
    recall's cosine scores, not the re-ranker's)."""
    activated = anchored_sets(recall, policy.tool_sets)
    return attrs.evolve(
        policy, threshold=None, adaptive=False, forced_sets=(*policy.forced_sets, *activated)
    )


# -- one selection ----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class SelectPlan:
    """What one ``select`` does before the policy picks.

    Attributes:
        strategy: the strategy recall ranks with.
        policy: the policy, its ids checked against the catalogue.
        wanted: how many candidates recall ranks.
        rerank: whether the generator re-ranks the candidates.
    """

    strategy: Strategy
    policy: Policy
    wanted: int
    rerank: bool


def plan_select(
    query: str,
    strategy: Strategy,
    policy: Policy,
    catalogue: Mapping[str, object] | Sequence[str] | object,
    *,
    catalogue_size: int,
    can_rerank: bool = False,
) -> SelectPlan:
    """Plan one selection.

    Args:
        strategy: from ``chosen_strategy``.
        policy: the policy as the caller gave or built it.
        catalogue: what ``policy``'s ids are checked against.
        can_rerank: a generator is there and re-ranking is on.

    Raises:
        ConfigError: ``policy`` names a tool or tool set the catalogue does not have.
    """
    policy.check_ids(catalogue)
    # max_tools 0 still ranks a few: anchors may activate tool sets with no ranked pick.
    wanted = overfetched(max(policy.max_tools, 1), tool_sets=bool(policy.tool_sets))
    rerank = can_rerank and has_words(query)
    if rerank:
        wanted = max(wanted, rerank_pool_size(policy.max_tools, catalogue_size))
    return SelectPlan(strategy=strategy, policy=policy, wanted=wanted, rerank=rerank)

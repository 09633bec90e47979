"""The selection planner: one test group per rule, each against the one function holding it."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute import Catalog, ConfigError, Outcome, Policy, Ranking, Strategy, ToolSet
from toolroute._core.recall.fusion import FAST_TIER, FULL_TIER, fuse, keyword_terms
from toolroute._core.select.plan import (
    ANCHOR_OVERFETCH,
    RERANK_TOOL_LIMIT,
    RequestVector,
    Verdict,
    anchored_sets,
    chosen_strategy,
    combined_verdict,
    default_strategy,
    needs_request_vector,
    overfetched,
    plan_recall,
    plan_select,
    policy_after_rerank,
    policy_from_options,
    rerank_candidates,
    rerank_pool_size,
    rerank_whole,
)
from toolroute._core.select.selection import anchor_scores, strategy_named, threshold_applies

VECTOR = np.array([1.0, 0.0], dtype=np.float32)
HAS_VECTORS = Verdict.applied()
NO_VECTORS = Verdict.degraded("embedder failed while indexing: RuntimeError: boom")
TRAVEL = ToolSet(name="travel", members=["book_flight", "get_weather"], anchors=["book_flight"])
CATALOG = Catalog.from_plain(
    [{"name": n, "description": n} for n in ("book_flight", "get_weather", "send_email", "x")]
)


def ranking(
    strategy: str = "combined",
    outcome: Outcome = Outcome.APPLIED,
    scores: tuple[float, ...] = (0.9, 0.5),
    ids: tuple[str, ...] = ("book_flight", "send_email"),
    reason: str = "",
) -> Ranking:
    return Ranking(tool_ids=ids, scores=scores, strategy=strategy, outcome=outcome, reason=reason)


# -- strategy ---------------------------------------------------------------------------------


def test_strategy_names_and_members_are_interchangeable() -> None:
    assert strategy_named("semantic") is Strategy.SEMANTIC
    assert strategy_named(Strategy.KEYWORD) is Strategy.KEYWORD
    assert Strategy.COMBINED == "combined"
    assert f"{Strategy.COMBINED}+rerank" == "combined+rerank"


@pytest.mark.parametrize("bad", ["hybrid", "", None, 3, "Keyword"])
def test_an_unknown_strategy_says_what_was_expected_and_what_came(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"unknown strategy .*expected one of keyword, semantic"):
        strategy_named(bad)


def test_the_default_strategy_is_combined_with_an_embedder_else_keyword() -> None:
    assert default_strategy(has_embedder=True) is Strategy.COMBINED
    assert default_strategy(has_embedder=False) is Strategy.KEYWORD
    assert chosen_strategy(None, has_embedder=True, strict=True) is Strategy.COMBINED
    assert chosen_strategy(None, has_embedder=False, strict=True) is Strategy.KEYWORD


def test_strict_choice_refuses_embedding_strategies_without_an_embedder() -> None:
    with pytest.raises(ConfigError, match="needs an embedder"):
        chosen_strategy("semantic", has_embedder=False, strict=True)
    # The engine asks before its embeddings are ready: it degrades instead.
    assert chosen_strategy("semantic", has_embedder=False, strict=False) is Strategy.SEMANTIC
    with pytest.raises(ConfigError, match="unknown strategy"):
        chosen_strategy("bogus", has_embedder=True, strict=False)


# -- the ranking's strategy, outcome and reason -----------------------------------------------


def test_an_empty_request_is_skipped_with_the_strategy_asked() -> None:
    plan = plan_recall(
        "  ", Strategy.SEMANTIC, RequestVector.full(VECTOR), tool_vectors=HAS_VECTORS
    )
    assert (plan.strategy, plan.verdict) == (
        Strategy.SEMANTIC,
        Verdict(Outcome.SKIPPED, "empty query"),
    )
    assert not plan.ranks


@pytest.mark.parametrize("query", ["?!", "👍", "🔥 🔥", "...", "— ✓ —"])
def test_a_request_without_a_word_is_skipped_and_never_embedded(query: str) -> None:
    plan = plan_recall(
        query, Strategy.COMBINED, RequestVector.full(VECTOR), tool_vectors=HAS_VECTORS
    )
    assert plan.verdict == Verdict(Outcome.SKIPPED, "no words in the query")
    assert not plan.ranks
    assert not needs_request_vector(query, Strategy.COMBINED, tool_vectors=HAS_VECTORS)


@pytest.mark.parametrize("query", ["42", "天気", "é!", "👍 ok", "مرحبا"])
def test_one_letter_or_digit_of_any_script_is_a_word_to_rank_by(query: str) -> None:
    plan = plan_recall(
        query, Strategy.COMBINED, RequestVector.full(VECTOR), tool_vectors=HAS_VECTORS
    )
    assert plan.verdict.outcome is Outcome.APPLIED
    assert needs_request_vector(query, Strategy.COMBINED, tool_vectors=HAS_VECTORS)


def test_keyword_recall_is_applied_whatever_the_embedder_did() -> None:
    missing = RequestVector.missing("embedder failed on the query: boom")
    plan = plan_recall("email", Strategy.KEYWORD, missing, tool_vectors=NO_VECTORS)
    assert (plan.strategy, plan.verdict, plan.vector) == (Strategy.KEYWORD, Verdict.applied(), None)


def test_no_request_vector_ranks_by_keyword_degraded_with_its_reason() -> None:
    missing = RequestVector.missing("the request's embedding took longer than 0.5 s")
    plan = plan_recall("email", Strategy.COMBINED, missing, tool_vectors=HAS_VECTORS)
    assert plan.strategy is Strategy.KEYWORD
    assert plan.verdict == Verdict.degraded("the request's embedding took longer than 0.5 s")
    assert plan.vector is None


def test_no_tool_vectors_ranks_by_keyword_degraded_with_the_index_reason() -> None:
    plan = plan_recall(
        "email", Strategy.SEMANTIC, RequestVector.full(VECTOR), tool_vectors=NO_VECTORS
    )
    assert (plan.strategy, plan.verdict, plan.vector) == (Strategy.KEYWORD, NO_VECTORS, None)


def test_a_full_vector_is_applied_and_a_step_down_vector_ranks_but_degrades() -> None:
    full = plan_recall(
        "email", Strategy.COMBINED, RequestVector.full(VECTOR), tool_vectors=HAS_VECTORS
    )
    assert (full.strategy, full.verdict) == (Strategy.COMBINED, Verdict.applied())
    assert full.vector is VECTOR
    fast = RequestVector.stepped_down(VECTOR, "fast tier: full model busy")
    down = plan_recall("email", Strategy.SEMANTIC, fast, tool_vectors=HAS_VECTORS)
    assert (down.strategy, down.verdict) == (
        Strategy.SEMANTIC,
        Verdict.degraded("fast tier: full model busy"),
    )
    assert down.vector is VECTOR


def test_a_vector_never_sought_ranks_by_keyword_and_says_why() -> None:
    plan = plan_recall("email", Strategy.COMBINED, None, tool_vectors=NO_VECTORS)
    assert (plan.strategy, plan.verdict) == (Strategy.KEYWORD, NO_VECTORS)
    unsought = plan_recall("email", Strategy.SEMANTIC, None, tool_vectors=HAS_VECTORS)
    assert unsought.verdict == Verdict.degraded("no request vector")
    keyword = plan_recall("email", Strategy.KEYWORD, None, tool_vectors=NO_VECTORS)
    assert keyword.verdict == Verdict.applied()


def test_a_missing_vector_always_says_why() -> None:
    assert RequestVector.missing("").verdict == Verdict.degraded("no request vector")
    with pytest.raises(ValueError, match="needs a reason"):
        Verdict.degraded("")


REQUESTS = st.one_of(
    st.none(),
    st.just(RequestVector.full(VECTOR)),
    st.text(min_size=1, max_size=5).map(lambda r: RequestVector.stepped_down(VECTOR, r)),
    st.text(max_size=5).map(RequestVector.missing),
)


@given(
    query=st.text(max_size=6),
    strategy=st.sampled_from(Strategy),
    request=REQUESTS,
    tools=st.sampled_from([HAS_VECTORS, NO_VECTORS]),
)
def test_every_plan_reads_its_outcome_from_the_verdict_never_from_an_empty_reason(
    query: str, strategy: Strategy, request: RequestVector | None, tools: Verdict
) -> None:
    plan = plan_recall(query, strategy, request, tool_vectors=tools)
    # Applied means no reason; any other outcome gives one.
    assert (plan.verdict.outcome is Outcome.APPLIED) == (plan.verdict.reason == "")
    # Scoring by vector only with a vector on both sides; keyword scoring otherwise.
    if plan.vector is not None:
        assert plan.strategy is not Strategy.KEYWORD
        assert tools.outcome is Outcome.APPLIED
        assert request is not None
        assert plan.verdict == request.verdict
    # Fail-open: an embedding strategy is never "applied" without its vectors.
    if plan.verdict.outcome is Outcome.APPLIED and strategy is not Strategy.KEYWORD:
        assert plan.vector is not None
    assert needs_request_vector(query, strategy, tool_vectors=tools) == (
        # a word: a letter or digit of any script
        re.search(r"[^\W_]", query) is not None
        and strategy is not Strategy.KEYWORD
        and tools == HAS_VECTORS
    )


def test_two_stages_combine_into_one_verdict() -> None:
    applied, late = Verdict.applied(), Verdict.degraded("rerank took longer than 1 s")
    assert combined_verdict(applied, Verdict(Outcome.SKIPPED, "limit is 0")) == applied
    assert combined_verdict(applied, late) == late
    fast = Verdict.degraded("fast tier: busy")
    assert combined_verdict(fast, applied) == fast
    assert combined_verdict(fast, Verdict(Outcome.SKIPPED, "limit is 0")) == fast
    assert combined_verdict(fast, late) == Verdict.degraded(
        "fast tier: busy; rerank took longer than 1 s"
    )


# -- candidates, policy, anchors --------------------------------------------------------------


def test_tool_sets_overfetch_three_candidates_per_pick() -> None:
    assert ANCHOR_OVERFETCH == 3
    assert overfetched(5, tool_sets=False) == 5
    assert overfetched(5, tool_sets=True) == 15
    assert overfetched(0, tool_sets=True) == 0


def test_policy_options_build_a_policy_or_say_which_option_is_wrong() -> None:
    options = {
        "max_tools": 3,
        "threshold": 0.2,
        "adaptive": False,
        "always_active": ["x"],
        "related": None,
        "max_related": 2,
        "tool_sets": [TRAVEL],
        "forced_sets": [],
    }
    policy = policy_from_options(**options)  # type: ignore[arg-type]
    assert policy == Policy(
        max_tools=3,
        threshold=0.2,
        adaptive=False,
        always_active=("x",),
        max_related=2,
        tool_sets=[TRAVEL],
    )
    with pytest.raises(ConfigError, match=r"invalid selection option: .*max_tools"):
        policy_from_options(**{**options, "max_tools": -1})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="invalid selection option"):
        policy_from_options(**{**options, "tool_sets": ["travel"]})  # type: ignore[arg-type]


def test_thresholds_apply_only_to_a_ranking_judged_normally() -> None:
    assert threshold_applies(ranking())
    assert not threshold_applies(ranking(outcome=Outcome.DEGRADED, reason="late"))


@pytest.mark.parametrize(
    ("strategy", "outcome", "count"),
    [
        ("combined", Outcome.APPLIED, True),
        ("semantic", Outcome.APPLIED, True),
        ("keyword", Outcome.APPLIED, False),  # BM25 ≫ the cosine floors
        ("combined+rerank", Outcome.APPLIED, False),  # the re-ranker's 1 − 0.1·rank
        ("combined", Outcome.DEGRADED, False),  # a degraded ranking is keyword-only
    ],
)
def test_anchor_scores_count_only_on_the_cosine_scale_judged_normally(
    strategy: str, outcome: Outcome, count: bool
) -> None:
    ranked = ranking(
        strategy=strategy, outcome=outcome, reason="" if outcome is Outcome.APPLIED else "x"
    )
    assert bool(anchor_scores(ranked)) is count
    assert anchored_sets(ranked, [TRAVEL]) == (("travel",) if count else ())
    assert anchored_sets(ranked, []) == ()


def test_an_anchor_exactly_at_its_floor_activates_its_set() -> None:
    floor = TRAVEL.anchor_min_similarity
    assert anchored_sets(ranking(scores=(floor, 0.1)), [TRAVEL]) == ("travel",)
    below = float(np.nextafter(floor, -np.inf))
    assert anchored_sets(ranking(scores=(below, 0.1)), [TRAVEL]) == ()


# -- re-ranking -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "size", "expected"),
    [
        (5, 0, 0),
        (5, 3, 3),
        (5, 30, 30),
        (5, RERANK_TOOL_LIMIT, RERANK_TOOL_LIMIT),
        (5, RERANK_TOOL_LIMIT + 1, 15),
        (5, 1000, 15),
        (1, 1000, 3),
        (40, 100, 100),
        (0, 1000, 0),
    ],
)
def test_pool_is_the_whole_catalogue_up_to_50_tools_else_three_per_pick(
    limit: int, size: int, expected: int
) -> None:
    assert rerank_pool_size(limit, size) == expected


def test_pool_size_refuses_negative_numbers() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        rerank_pool_size(-1, 10)


def test_catalogues_of_at_most_50_tools_go_to_the_reranker_whole() -> None:
    assert rerank_whole(RERANK_TOOL_LIMIT)
    assert not rerank_whole(RERANK_TOOL_LIMIT + 1)
    ids = [f"t{i}" for i in range(RERANK_TOOL_LIMIT)]
    recall = ranking(ids=("t7", "t3"), scores=(0.9, 0.1))
    candidates = rerank_candidates(recall, Policy(), ids)
    assert candidates[:2] == ["t7", "t3"]  # recall's order first
    assert sorted(candidates) == sorted(ids)
    bigger = [*ids, "t50"]
    assert rerank_candidates(recall, Policy(), bigger) == ["t7", "t3"]


def test_the_threshold_cuts_before_reranking_only_when_it_applies() -> None:
    recall = ranking(ids=("a", "b"), scores=(0.9, 0.1))
    big = [f"t{i}" for i in range(RERANK_TOOL_LIMIT + 1)]
    assert rerank_candidates(recall, Policy(threshold=0.5), big) == ["a"]
    degraded = ranking(ids=("a", "b"), scores=(0.9, 0.1), outcome=Outcome.DEGRADED, reason="x")
    assert rerank_candidates(degraded, Policy(threshold=0.5), big) == ["a", "b"]


def test_after_reranking_no_threshold_no_elbow_and_recall_anchors_forced() -> None:
    policy = Policy(threshold=0.3, adaptive=True, tool_sets=[TRAVEL], forced_sets=())
    after = policy_after_rerank(policy, ranking(scores=(0.9, 0.5)))
    assert (after.threshold, after.adaptive, after.forced_sets) == (None, False, ("travel",))
    keyword = policy_after_rerank(policy, ranking(strategy="keyword", scores=(9.0, 5.0)))
    assert keyword.forced_sets == ()


# -- one selection ----------------------------------------------------------------------------


def test_a_plan_overfetches_for_tool_sets_and_for_the_reranker() -> None:
    plain = plan_select("q", Strategy.COMBINED, Policy(max_tools=2), CATALOG, catalogue_size=200)
    assert (plain.wanted, plain.rerank) == (2, False)
    sets = plan_select(
        "q", Strategy.COMBINED, Policy(max_tools=2, tool_sets=[TRAVEL]), CATALOG, catalogue_size=200
    )
    assert sets.wanted == 6
    # max_tools 0 still ranks: an anchor may activate a set with no ranked pick.
    none = plan_select(
        "q", Strategy.COMBINED, Policy(max_tools=0, tool_sets=[TRAVEL]), CATALOG, catalogue_size=200
    )
    assert none.wanted == 3
    reranked = plan_select(
        "q", Strategy.COMBINED, Policy(max_tools=2), CATALOG, catalogue_size=200, can_rerank=True
    )
    assert (reranked.wanted, reranked.rerank) == (6, True)
    small = plan_select(
        "q", Strategy.COMBINED, Policy(max_tools=2), CATALOG, catalogue_size=40, can_rerank=True
    )
    assert small.wanted == 40


def test_an_empty_request_is_never_reranked() -> None:
    plan = plan_select(" ", Strategy.KEYWORD, Policy(), CATALOG, catalogue_size=4, can_rerank=True)
    assert not plan.rerank


def test_a_plan_refuses_a_policy_naming_unknown_tools() -> None:
    with pytest.raises(
        ConfigError, match="always_active names tools not in the catalogue: 'ghost'"
    ):
        plan_select(
            "q", Strategy.KEYWORD, Policy(always_active=["ghost"]), CATALOG, catalogue_size=4
        )


# -- fusion: one formula for fp32 and int8 ----------------------------------------------------


@given(
    st.lists(st.floats(0, 1, width=32), min_size=1, max_size=20).flatmap(
        lambda c: st.tuples(
            st.just(c),
            st.lists(st.floats(0, 1, width=32), min_size=len(c), max_size=len(c)),
            st.lists(st.floats(-1, 1, width=32), min_size=len(c), max_size=len(c)),
        )
    )
)
def test_the_int8_scorers_keyword_terms_are_fuses_to_the_bit(
    data: tuple[list[float], list[float], list[float]],
) -> None:
    coverage, names, cosine = (np.array(x, dtype=np.float32) for x in data)
    fused = cosine.copy()
    for term in keyword_terms(coverage, names):
        fused += term  # as the int8 scorer adds them to its exact cosines
    np.testing.assert_array_equal(fused, fuse(cosine, coverage, names))


def test_a_fast_tier_vector_is_fused_with_the_fast_tiers_weights() -> None:
    full = plan_recall(
        "email", Strategy.COMBINED, RequestVector.full(VECTOR), tool_vectors=HAS_VECTORS
    )
    fast = plan_recall(
        "email",
        Strategy.COMBINED,
        RequestVector.stepped_down(VECTOR, "fast tier: full model busy"),
        tool_vectors=HAS_VECTORS,
    )
    assert (full.weights, fast.weights) == (FULL_TIER, FAST_TIER)
    assert FAST_TIER.coverage > FULL_TIER.coverage  # the rougher vector leans on the words

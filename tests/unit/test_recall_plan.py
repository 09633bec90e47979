"""The recall ladder's decisions, as pure functions (engine/_core/recall_plan.py).

The runtime's ladder tests (tests/actors/test_load_ladder.py) play these decisions out in
virtual time; here each rule is pinned on its own, and the fail-open invariants hold for
every input.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute._core.outcome import Outcome
from toolroute._core.recall_plan import (
    RecallPlan,
    Rung,
    Step,
    after_fast_tier_failed,
    after_full_tier,
    fast_tier_answered,
    first_rung,
    full_tier_failed,
    full_tier_missed,
    plan_recall,
    ranking_outcome,
)

strategies = st.sampled_from([None, "keyword", "semantic", "combined"])
seconds = st.floats(0, 10, allow_nan=False)


def test_the_default_strategy_is_combined_with_an_embedder_and_keyword_without() -> None:
    common = {"index_has_vectors": True, "index_reason": "", "warming": False, "query": "q"}
    assert plan_recall(None, has_embedder=True, **common) == RecallPlan(
        strategy="combined", wants_vector=True, reason=""
    )
    assert plan_recall(None, has_embedder=False, **common) == RecallPlan(
        strategy="keyword", wants_vector=False, reason=""
    )


@given(
    requested=strategies,
    has_embedder=st.booleans(),
    has_vectors=st.booleans(),
    index_reason=st.sampled_from(["", "embedder failed while indexing: boom"]),
    warming=st.booleans(),
    query=st.sampled_from(["", "  ", "weather in Oslo"]),
)
def test_a_vector_is_wanted_only_when_one_can_be_used(
    requested: str | None,
    has_embedder: bool,
    has_vectors: bool,
    index_reason: str,
    warming: bool,
    query: str,
) -> None:
    plan = plan_recall(
        requested,  # type: ignore[arg-type]
        has_embedder=has_embedder,
        index_has_vectors=has_vectors,
        index_reason=index_reason,
        warming=warming,
        query=query,
    )
    assert plan.strategy == (requested or ("combined" if has_embedder else "keyword"))
    assert plan.wants_vector == (
        plan.strategy != "keyword" and has_vectors and bool(query.strip()) and has_embedder
    )
    # The index's own reason wins; warming up is said only when nothing else is.
    assert plan.reason == (index_reason or ("warming up" if warming else ""))


def test_a_cached_vector_answers_first_whatever_the_load() -> None:
    step = first_rung(cached=True, outstanding=500, predicted_wait_s=9.0, budget_s=0.1,
                      fast_tier_ready=True)  # fmt: skip
    assert step == Step(rung=Rung.QUERY_CACHE, reason="")


def test_a_predicted_wait_past_the_budget_goes_to_a_ready_fast_tier_at_once() -> None:
    step = first_rung(cached=False, outstanding=3, predicted_wait_s=0.2, budget_s=0.125,
                      fast_tier_ready=True)  # fmt: skip
    assert step == Step(
        rung=Rung.FAST_TIER, reason="full model busy (predicted wait 200 ms > 125 ms)"
    )


@given(
    outstanding=st.integers(0, 1000),
    predicted=seconds,
    budget=seconds,
    ready=st.booleans(),
)
def test_the_first_rung_is_the_fast_tier_only_when_it_is_ready_and_the_model_is_busy(
    outstanding: int, predicted: float, budget: float, ready: bool
) -> None:
    step = first_rung(cached=False, outstanding=outstanding, predicted_wait_s=predicted,
                      budget_s=budget, fast_tier_ready=ready)  # fmt: skip
    if outstanding == 0 or not ready or predicted <= budget:
        # A lone caller always reaches the model (and measures it again).
        assert step == Step(rung=Rung.FULL_TIER)
    else:
        assert step.rung is Rung.FAST_TIER
        assert step.reason.startswith("full model busy")
    assert step.rung is not Rung.KEYWORD_ONLY  # nothing is given up before it is tried


def test_the_full_tier_reasons() -> None:
    assert full_tier_missed(0.25) == "the request's embedding took longer than 0.25 s"
    assert full_tier_failed("RuntimeError: boom") == "embedder failed on the query: RuntimeError: boom"


@pytest.mark.parametrize("ready", [True, False])
def test_after_the_full_tier_failed_the_fast_tier_answers_if_it_can(ready: bool) -> None:
    failure = full_tier_missed(0.25)
    step = after_full_tier(failure, fast_tier_ready=ready)
    assert step == Step(rung=Rung.FAST_TIER if ready else Rung.KEYWORD_ONLY, reason=failure)


def test_a_fast_tier_answer_and_failure_say_why_the_request_went_there() -> None:
    why = full_tier_missed(0.25)
    assert fast_tier_answered(why) == f"fast tier: {why}"
    assert after_fast_tier_failed("RuntimeError: table unreadable", why) == Step(
        rung=Rung.KEYWORD_ONLY,
        reason=f"keyword only: fast tier failed (RuntimeError: table unreadable); {why}",
    )


@given(
    outcome=st.sampled_from(list(Outcome)),
    reason=st.sampled_from(["", "fast tier: full model busy", "warming up"]),
    had_vector=st.booleans(),
)
def test_a_ranking_below_the_full_tier_is_never_reported_as_applied(
    outcome: Outcome, reason: str, had_vector: bool
) -> None:
    final, final_reason = ranking_outcome(outcome, reason, had_vector=had_vector)
    assert final_reason == reason
    if had_vector and reason and outcome is Outcome.APPLIED:
        assert final is Outcome.DEGRADED
    else:
        assert final is outcome  # keyword-only and skipped rankings keep their own
    assert not (final is Outcome.APPLIED and had_vector and reason)

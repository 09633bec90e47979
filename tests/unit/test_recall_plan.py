"""The recall ladder's decisions, as pure functions (engine/_core/recall/plan.py).

The runtime's ladder tests (tests/actors/test_load_ladder.py) play these decisions out in
virtual time; here each rule is pinned on its own, and the fail-open invariants hold for
every input.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute._core.recall.plan import (
    Rung,
    Step,
    after_fast_tier_failed,
    after_full_tier,
    fast_tier_answered,
    first_rung,
    full_tier_failed,
    full_tier_missed,
)

strategies = st.sampled_from([None, "keyword", "semantic", "combined"])
seconds = st.floats(0, 10, allow_nan=False)


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
    predicted=seconds | st.just(0.0),
    budget=seconds,
    ready=st.booleans(),
    wave=st.integers(0, 64),
)
def test_the_first_rung_is_the_fast_tier_only_when_it_is_ready_and_the_model_is_busy(
    outstanding: int, predicted: float, budget: float, ready: bool, wave: int
) -> None:
    step = first_rung(cached=False, outstanding=outstanding, predicted_wait_s=predicted,
                      budget_s=budget, fast_tier_ready=ready, first_wave=wave)  # fmt: skip
    past_wave = predicted == 0 and 0 < wave <= outstanding  # unmeasured: one batch waits
    if outstanding == 0 or not ready or (predicted <= budget and not past_wave):
        # A lone caller always reaches the model (and measures it again).
        assert step == Step(rung=Rung.FULL_TIER)
    else:
        assert step.rung is Rung.FAST_TIER
        assert step.reason.startswith("full model busy")
    assert step.rung is not Rung.KEYWORD_ONLY  # nothing is given up before it is tried


def test_before_the_model_is_measured_only_a_first_wave_waits_for_it() -> None:
    def rung(outstanding: int) -> Rung:
        return first_rung(cached=False, outstanding=outstanding, predicted_wait_s=0.0,
                          budget_s=0.125, fast_tier_ready=True, first_wave=16).rung  # fmt: skip

    assert [rung(n) for n in (0, 1, 15)] == [Rung.FULL_TIER] * 3
    assert [rung(n) for n in (16, 199)] == [Rung.FAST_TIER] * 2


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

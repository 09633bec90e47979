"""The recall ladder as pure decisions: which rung answers a request, and why.

A request's vector comes down the ladder:

1. the query cache (exact text): no model call;
2. the full tier (the query batcher), abandoned at ``deadlines.embed_s``;
3. the fast tier, at once, when the full model is predicted to be busy past the budget, or
   when the full tier failed or missed its deadline; only once it is ready;
4. keyword-only: no vector (the fast tier missing, not ready, or failed too).

Each function here makes one of these decisions from plain values; the runtime's recall
shell asks them in order and only carries out what they return (awaits the batcher, calls
the fast tier, ranks). Every reason text is written here, once.
"""

from __future__ import annotations

import enum

import attrs


class Rung(enum.Enum):
    """Where a request's vector comes from."""

    QUERY_CACHE = "query cache"
    FULL_TIER = "full tier"
    FAST_TIER = "fast tier"
    KEYWORD_ONLY = "keyword only"


@attrs.frozen(kw_only=True)
class Step:
    """A rung to take and, when it is below the full tier, why (empty otherwise)."""

    rung: Rung
    reason: str = ""


def first_rung(
    *,
    cached: bool,
    outstanding: int,
    predicted_wait_s: float,
    budget_s: float,
    fast_tier_ready: bool,
    first_wave: int = 0,
) -> Step:
    """The rung a request tries first.

    A cached vector answers at once. A request that finds the model idle (nothing
    outstanding) always goes to it: a lone caller gets the full tier, and the model's time
    is measured again, so one slow call cannot pin the ladder down. Otherwise a predicted
    wait past the budget sends it to a ready fast tier at once. Before the model's time is
    measured (``predicted_wait_s`` 0), a new engine's first burst would all queue for it:
    past the first ``first_wave`` requests (one model batch; 0: no limit) the rest go to a
    ready fast tier at once instead of waiting out the deadline.
    """
    if cached:
        return Step(rung=Rung.QUERY_CACHE)
    if outstanding and fast_tier_ready:
        if predicted_wait_s > budget_s:
            busy = (
                f"full model busy (predicted wait {predicted_wait_s * 1000:.0f} ms"
                f" > {budget_s * 1000:.0f} ms)"
            )
            return Step(rung=Rung.FAST_TIER, reason=busy)
        if predicted_wait_s == 0 and 0 < first_wave <= outstanding:
            wave = (
                f"full model busy (not measured yet; {outstanding} requests ahead,"
                f" a first wave of {first_wave})"
            )
            return Step(rung=Rung.FAST_TIER, reason=wave)
    return Step(rung=Rung.FULL_TIER)


def full_tier_missed(deadline_s: float, waited_s: float | None = None) -> str:
    """Why a request left the full tier when its embedding was late: it took longer than the
    deadline, or than ``waited_s``, the part of it left once the requests queued with it
    have their scoring time."""
    if waited_s is None or waited_s >= deadline_s:
        return f"the request's embedding took longer than {deadline_s} s"
    return (
        f"the request's embedding took longer than {waited_s * 1000:.0f} ms, the part of"
        f" its {deadline_s} s deadline left after scoring the requests queued with it"
    )


def full_tier_too_slow(deadline_s: float) -> str:
    """Why a request left the model's queue early: its batch was predicted to end after the
    request gives up (the model runs slower under a burst than a lone call measured)."""
    return f"the busy model would have answered the request after its {deadline_s} s deadline"


def full_tier_failed(error: str) -> str:
    """Why a request left the full tier when the embedder raised (``error`` is brief)."""
    return f"embedder failed on the query: {error}"


def after_full_tier(failure: str, *, fast_tier_ready: bool) -> Step:
    """Where a request goes when the full tier failed or was late (``failure`` says how):
    the fast tier when it is ready, keyword-only otherwise."""
    if fast_tier_ready:
        return Step(rung=Rung.FAST_TIER, reason=failure)
    return Step(rung=Rung.KEYWORD_ONLY, reason=failure)


def fast_tier_answered(why: str) -> str:
    """The reason of a ranking from a fast-tier vector taken because of ``why``."""
    return f"fast tier: {why}"


def after_fast_tier_failed(error: str, why: str) -> Step:
    """The last rung: the fast tier raised (``error`` is brief) after ``why`` sent the
    request to it."""
    return Step(rung=Rung.KEYWORD_ONLY, reason=f"keyword only: fast tier failed ({error}); {why}")

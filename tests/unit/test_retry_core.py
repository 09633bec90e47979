"""The retry core (providers/_http/retry.py): what follows each attempt, for both drivers.

A simulated driver with a fake clock runs the core over generated outcomes; the invariants
hold for every policy, deadline and sequence of replies.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute import ProviderError
from toolroute.providers import RetryPolicy
from toolroute.providers._http.plain_errors import PlainErrors
from toolroute.providers._http.retry import (
    EXCERPT_CHARS,
    Redactor,
    Reply,
    RetryCore,
    Stop,
    TransportError,
    Wait,
)

SECRET = "Zq7.tLm_94Tbx-Kw"
REDACT = Redactor([SECRET])


def core(retry: RetryPolicy) -> RetryCore:
    return RetryCore(PlainErrors(REDACT, "POST host/x"), retry=retry, rng=lambda: 0.5)


@attrs.frozen
class Outcome:
    """One attempt as a server would make it: a status with headers, or no response."""

    status: int | None
    headers: dict[str, str] = attrs.field(factory=dict)
    latency_s: float = 0.1


outcomes = st.builds(
    Outcome,
    st.one_of(st.none(), st.sampled_from([200, 400, 401, 403, 404, 408, 409, 429, 500, 503])),
    st.fixed_dictionaries(
        {},
        optional={
            "retry-after": st.sampled_from(["0", "0.2", "1", "30", "soon"]),
            "retry-after-ms": st.sampled_from(["50", "900", "x"]),
            "x-should-retry": st.sampled_from(["true", "false"]),
        },
    ),
    st.floats(0.0, 0.5),
)
policies = st.builds(
    RetryPolicy,
    retries=st.integers(0, 5),
    backoff_s=st.floats(0.0, 1.0),
    max_backoff_s=st.floats(0.0, 2.0),
    jitter=st.floats(0.0, 1.0),
)


@attrs.define
class Run:
    attempts: int = 0
    waits: list[tuple[float, float]] = attrs.field(factory=list)  # (now, delay)
    result: Reply | ProviderError | None = None


def drive(the_core: RetryCore, script: list[Outcome], budget_s: float) -> Run:
    """What a driver does: attempt, ask the core, wait or stop; the deadline ends waits."""
    now = 0.0
    call = the_core.start(deadline=budget_s, budget_s=budget_s)
    run = Run()
    for outcome in script:
        run.attempts += 1
        now += outcome.latency_s
        if outcome.status is None:
            step: Reply | Wait | Stop = call.after_transport_failure(
                TransportError("no connection"), now=now
            )
        else:
            reply = Reply(outcome.status, outcome.headers, b'{"error": {"message": "no"}}')
            step = call.after_reply(reply, now=now, wall=0.0)
        if isinstance(step, Reply):
            run.result = step
            return run
        if isinstance(step, Stop):
            run.result = step.error
            return run
        run.waits.append((now, step.delay_s))
        now += step.delay_s
    return run


@given(policies, st.lists(outcomes, min_size=1, max_size=10), st.floats(0.1, 10.0))
def test_attempts_and_waits_stay_within_the_policy_and_the_deadline(
    policy: RetryPolicy, script: list[Outcome], budget_s: float
) -> None:
    run = drive(core(policy), script, budget_s)
    assert run.attempts <= policy.retries + 1
    for now, delay in run.waits:
        # A wait that would end at or after the deadline is never started.
        assert delay >= 0
        assert now + delay < budget_s


@given(policies, st.lists(outcomes, min_size=1, max_size=10), st.floats(0.1, 10.0))
def test_the_call_stops_at_the_first_success_or_final_refusal(
    policy: RetryPolicy, script: list[Outcome], budget_s: float
) -> None:
    run = drive(core(policy), script, budget_s)
    last = script[run.attempts - 1]
    if isinstance(run.result, Reply):
        assert run.result.status == 200 == last.status
        assert all(o.status != 200 for o in script[: run.attempts - 1])
    elif isinstance(run.result, ProviderError):
        assert last.status != 200
        if last.status in (401, 403):
            assert not run.result.retryable
    # Every attempt before the last one failed in a way worth retrying.
    assert len(run.waits) == run.attempts - (0 if run.result is None else 1)


@given(st.sampled_from([401, 403]), st.sampled_from(["true", "false", None]))
def test_an_auth_refusal_latches_whatever_x_should_retry_says(
    status: int, should_retry: str | None
) -> None:
    the_core = core(RetryPolicy(retries=3))
    headers = {"x-should-retry": should_retry} if should_retry else {}
    run = drive(the_core, [Outcome(status, headers), Outcome(200)], 10.0)
    assert run.attempts == 1
    assert isinstance(run.result, ProviderError)
    assert run.result.status == status
    assert not run.result.retryable
    with pytest.raises(ProviderError, match="earlier request was refused") as later:
        the_core.check_latch()
    assert later.value.status == status


def test_x_should_retry_overrides_the_status_both_ways() -> None:
    stopped = drive(core(RetryPolicy()), [Outcome(503, {"x-should-retry": "false"})], 10.0)
    assert stopped.attempts == 1
    assert isinstance(stopped.result, ProviderError)
    assert not stopped.result.retryable
    retried = drive(
        core(RetryPolicy()), [Outcome(400, {"x-should-retry": "true"}), Outcome(200)], 10.0
    )
    assert isinstance(retried.result, Reply)
    assert retried.attempts == 2


def test_retry_after_is_waited_exactly_when_it_fits_and_stops_the_call_when_not() -> None:
    fits = drive(
        core(RetryPolicy()), [Outcome(429, {"retry-after-ms": "900"}, 0.0), Outcome(200)], 2.0
    )
    assert fits.waits == [(0.0, 0.9)]
    too_long = drive(core(RetryPolicy()), [Outcome(429, {"retry-after": "30"}, 0.0)], 2.0)
    assert isinstance(too_long.result, ProviderError)
    assert too_long.result.retryable
    assert "Retry-After asks for 30 s" in str(too_long.result)


def test_giving_up_names_the_attempts_and_keeps_the_last_status() -> None:
    run = drive(core(RetryPolicy(retries=1, backoff_s=0.0)), [Outcome(500), Outcome(503)], 10.0)
    assert isinstance(run.result, ProviderError)
    assert run.result.status == 503
    assert run.result.retryable
    assert "gave up after 2 attempts" in str(run.result)


def test_the_deadline_error_names_the_last_failure() -> None:
    call = core(RetryPolicy()).start(deadline=1.0, budget_s=1.0)
    assert isinstance(call.after_transport_failure(TransportError("reset"), now=0.1), Wait)
    error = call.too_late()
    assert error.retryable
    assert "reset" in str(error)


def test_a_transport_failure_keeps_its_retryable_flag_and_status() -> None:
    call = core(RetryPolicy(retries=3)).start(deadline=10.0, budget_s=10.0)
    step = call.after_transport_failure(
        TransportError("too large", retryable=False, status=200), now=0.0
    )
    assert isinstance(step, Stop)
    assert step.error.status == 200
    assert not step.error.retryable


@given(st.integers(0, EXCERPT_CHARS + 20), st.text(max_size=50))
def test_an_excerpt_never_shows_part_of_the_secret(offset: int, tail: str) -> None:
    # Redacted before it is cut: a secret that straddles the cut is hidden whole.
    body = ("x" * offset + SECRET + tail).encode()
    assert SECRET[:8] not in REDACT.excerpt(body)
    # At most EXCERPT_CHARS characters and the ellipsis, before repr quotes it.
    assert len(REDACT.cut(body.decode())) <= EXCERPT_CHARS + 1


def test_an_empty_body_is_named_not_quoted() -> None:
    assert REDACT.excerpt(b"") == "an empty body"
    assert Reply(500, {}, b"  a \n b ").excerpt() == "'a b'"

"""``decide`` (one strict call) and ``try_decide`` (batched, fail-open), through a decision actor.

Every call goes through a :class:`~.actor.DecisionActor`: the engine's, or this trio run's
stateless one (:func:`~.shared.shared_actor`). The actor owns each provider's admission, so
the guarantee is the same inside and outside an engine: a call waits for a provider in trio,
under its deadline, and ends by it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Literal

import attrs
import trio

from .._core.decide.limits import check_state
from .._core.decide.types import (
    DecisionRequest,
    DecisionResult,
    answered_reason,
    merge_results,
    reply_outcome,
    split_questions,
)
from .._core.errors import DecisionError, DecisionErrorKind
from .._core.outcome import Outcome
from .._core.protocols import Decider, check_provider
from .actor import Answered, DecisionActor
from .shared import shared_actor

logger = logging.getLogger("toolroute.decisions")

#: Batches of one request in flight at once, unless the caller says otherwise.
DEFAULT_CONCURRENCY = 4


def check_caller_state(request: DecisionRequest, provider: Decider) -> None:
    """Refuse a provider that is not a ``Decider`` and a state that is not JSON (NaN,
    ±inf, nested or not, a circular object).

    Both are the caller's mistake, so ``decide`` and ``try_decide`` alike raise them, before
    any batch waits for admission; fail-open covers only the provider's faults.

    Raises:
        ConfigError: ``provider`` is not a ``Decider`` (a provider's name, say).
        DecisionError: ``invalid_request``, saying what the state holds.
    """
    check_provider(provider, "provider", Decider)
    check_state(request.state, vendor=str(getattr(provider, "vendor", provider.name)))


async def decide(
    request: DecisionRequest,
    *,
    provider: Decider | None = None,
    actor: DecisionActor | None = None,
) -> DecisionResult:
    """Send ``request`` to ``provider`` as one call, strictly (``toolroute.decide``)."""
    decider = provider
    if decider is None:
        raise DecisionError(
            DecisionErrorKind.INVALID_REQUEST,
            "No decision provider is configured. Set TYPESAFE_API_KEY, LAYA_API_KEY +"
            " LAYA_BASE_URL, XOR_API_KEY + XOR_BASE_URL, PERPLEXITY_API_KEY or"
            " CLOUDFLARE_API_KEY + CLOUDFLARE_ACCOUNT_ID, or pass provider= explicitly.",
        )
    check_caller_state(request, decider)
    answered = await (actor or shared_actor()).submit(decider, [request], window=1)
    outcome = answered.outcomes[0] if answered is not None else None
    if isinstance(outcome, DecisionError):
        raise outcome
    if outcome is None:
        reason = "the decision service stopped" if answered is None else answered.dropped
        raise DecisionError(
            DecisionErrorKind.TIMEOUT,
            f"{decider.name} was not asked: {reason or 'the deadline passed'} before the"
            " request's turn came.",
            retryable=True,
        )
    return outcome


@attrs.frozen(kw_only=True)
class BatchReport:
    """How a batched call went.

    Attributes:
        result: the merged result; ``None`` when nothing usable came back.
        batches: batches sent.
        failed: batches that failed or were late.
        reason: what went wrong, with ``"k of n answered"`` first when not
            every question was answered.
        asked: questions asked.
        answered: well-formed answers received.
    """

    result: DecisionResult | None
    batches: int
    failed: int
    reason: str
    asked: int = 0
    answered: int = 0

    @property
    def outcome(self) -> Outcome:
        """``applied``, ``degraded`` or ``failed_open``, by :func:`reply_outcome`."""
        return reply_outcome(self.asked, self.answered)


async def decide_in_batches(
    request: DecisionRequest,
    provider: Decider,
    *,
    actor: DecisionActor | None = None,
    window: int = DEFAULT_CONCURRENCY,
    limiter: trio.CapacityLimiter | None = None,
    schedule: Literal["sliding", "grouped"] = "sliding",
    deadline_s: float | None = None,
) -> BatchReport:
    """Split ``request`` into the provider's batches and run them.

    ``sliding`` starts the next batch as soon as any finishes (at most ``window`` of this
    request in flight, within the provider's admission); ``grouped`` runs groups of that
    size one after another, as NeuroLink does, and exists for comparison. A ``limiter``
    (shared across calls) is held by each batch while it runs, and its tokens are the
    window. A failed or late batch loses only its own answers. Never raises
    ``DecisionError``.
    """
    return await decide_parts(
        [request],
        provider,
        actor=actor,
        window=window,
        limiter=limiter,
        schedule=schedule,
        deadline_s=deadline_s,
    )


async def decide_parts(
    parts: Sequence[DecisionRequest],
    provider: Decider,
    *,
    actor: DecisionActor | None = None,
    window: int = DEFAULT_CONCURRENCY,
    limiter: trio.CapacityLimiter | None = None,
    schedule: Literal["sliding", "grouped"] = "sliding",
    deadline_s: float | None = None,
) -> BatchReport:
    """Run the parts of one request (each with its own state), each cut into batches.

    A caller splits its state into ``parts`` when the whole would not fit the
    provider's window (routing lists a share of the servers in each); question
    ids must be distinct across parts. Batches of every part share the sliding
    window, the deadline and the report, as :func:`decide_in_batches` runs them.
    The deadline is ``deadline_s`` from now, or the caller's own, whichever comes first.
    """
    actor = actor or shared_actor()
    if limiter is not None:
        window = max(1, int(limiter.total_tokens))
    requests = [
        part.with_questions(chunk)
        for part in parts
        for chunk in split_questions(part.questions, provider.limits.max_questions)
    ]
    deadline = trio.current_time() + deadline_s if deadline_s is not None else math.inf
    # Whose deadline ends the job, for the reason: this call's, or the caller's own scope's.
    named = deadline_s if deadline <= trio.current_effective_deadline() else None
    replies: list[Answered | None] = []
    if schedule == "sliding":
        replies.append(
            await actor.submit(
                provider, requests, window=window, deadline=deadline, limiter=limiter
            )
        )
    else:
        for start in range(0, len(requests), window):
            group = requests[start : start + window]
            replies.append(
                await actor.submit(
                    provider, group, window=window, deadline=deadline, limiter=limiter
                )
            )
    return _report(requests, replies, named)


def _report(
    requests: Sequence[DecisionRequest],
    replies: Sequence[Answered | None],
    deadline_s: float | None,
) -> BatchReport:
    """The merged report of a call's replies (one per job), as the sliding window saw it;
    ``deadline_s`` is the budget to name when the deadline passed (``None``: the caller's)."""
    results: list[DecisionResult] = []
    errors: list[str] = []
    late = stopped = False
    dropped = ""
    index = 0
    for reply in replies:
        if reply is None:
            stopped = True
            continue
        late = late or reply.late or reply.dropped == "deadline"
        dropped = dropped or (reply.dropped if reply.dropped != "deadline" else "")
        for outcome in reply.outcomes:
            index += 1
            if isinstance(outcome, DecisionResult):
                results.append(outcome)
            elif isinstance(outcome, DecisionError):
                errors.append(f"batch {index}/{len(requests)}: {outcome.kind}: {outcome}")
                logger.warning("decision %s", errors[-1])
    notes: list[str] = []
    if late:
        notes.append(
            f"deadline of {deadline_s:g} s passed" if deadline_s is not None else "deadline passed"
        )
    if stopped:
        notes.append("the decision service stopped before answering")
    if dropped:
        notes.append(f"dropped: {dropped}")
    reason = "; ".join([*notes, *errors])
    merged = merge_results(results) if results else None
    if merged is not None and not merged.answers:
        # Answers that were all malformed tell the caller as little as no answer.
        merged, reason = None, reason or "no well-formed answers"
    asked = sum(len(r.questions) for r in requests)
    answered = len(merged.answers) if merged is not None else 0
    if 0 < answered < asked:
        reason = "; ".join(filter(None, [answered_reason(asked, answered), reason]))
    return BatchReport(
        result=merged,
        batches=len(requests),
        failed=len(requests) - len(results),
        reason=reason,
        asked=asked,
        answered=answered,
    )


async def try_decide(
    request: DecisionRequest,
    *,
    provider: Decider | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    deadline_s: float | None = None,
    actor: DecisionActor | None = None,
) -> DecisionResult | None:
    """Batched and fail-open (``toolroute.try_decide``); ``None`` means no provider.

    Raises:
        ValueError: ``concurrency`` below 1.
        ConfigError: ``provider`` is not a ``Decider`` (a provider's name, say).
        DecisionError: ``invalid_request`` for a state that is not JSON, as ``decide``.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency!r}")
    decider = provider
    if decider is None or not request.questions:
        return None
    check_caller_state(request, decider)
    report = await decide_in_batches(
        request, decider, actor=actor, window=concurrency, deadline_s=deadline_s
    )
    return report.result

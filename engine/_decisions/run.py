"""``decide`` (one strict call) and ``try_decide`` (batched, fail-open)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import attrs
import trio

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

if TYPE_CHECKING:
    from .._core.protocols import Decider

logger = logging.getLogger("toolroute.decision")

#: Batches of one request in flight at once, when the caller does not share a limiter.
DEFAULT_CONCURRENCY = 4


async def decide(request: DecisionRequest, *, provider: Decider | None = None) -> DecisionResult:
    """Send ``request`` to ``provider`` as one call, strictly (``toolroute.decide``)."""
    decider = provider
    if decider is None:
        raise DecisionError(
            DecisionErrorKind.INVALID_REQUEST,
            "No decision provider is configured. Set TYPESAFE_API_KEY, LAYA_API_KEY +"
            " LAYA_BASE_URL, XOR_API_KEY + XOR_BASE_URL, PERPLEXITY_API_KEY or"
            " CLOUDFLARE_API_KEY + CLOUDFLARE_ACCOUNT_ID, or pass provider= explicitly.",
        )
    try:
        return await decider.decide(request)
    except DecisionError:
        raise
    except Exception as exc:
        # A custom decider's bug must not escape as something callers do not expect.
        raise DecisionError(
            DecisionErrorKind.SERVER,
            f"{getattr(decider, 'name', type(decider).__name__)} failed:"
            f" {type(exc).__name__}: {exc}",
        ) from exc


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
    limiter: trio.CapacityLimiter | None = None,
    schedule: Literal["sliding", "grouped"] = "sliding",
    deadline_s: float | None = None,
) -> BatchReport:
    """Split ``request`` into the provider's batches and run them.

    ``sliding`` starts the next batch as soon as any finishes (at most
    ``limiter``'s tokens in flight, FIFO); ``grouped`` runs groups of that size
    one after another, as NeuroLink does, and exists for comparison. A failed
    or late batch loses only its own answers. Never raises ``DecisionError``.
    """
    return await decide_parts(
        [request], provider, limiter=limiter, schedule=schedule, deadline_s=deadline_s
    )


async def decide_parts(
    parts: Sequence[DecisionRequest],
    provider: Decider,
    *,
    limiter: trio.CapacityLimiter | None = None,
    schedule: Literal["sliding", "grouped"] = "sliding",
    deadline_s: float | None = None,
) -> BatchReport:
    """Run the parts of one request (each with its own state), each cut into batches.

    A caller splits its state into ``parts`` when the whole would not fit the
    provider's window (routing lists a share of the servers in each); question
    ids must be distinct across parts. Batches of every part share the sliding
    window, the deadline and the report, as :func:`decide_in_batches` runs them.
    """
    limiter = limiter or trio.CapacityLimiter(DEFAULT_CONCURRENCY)
    requests = [
        part.with_questions(chunk)
        for part in parts
        for chunk in split_questions(part.questions, provider.limits.max_questions)
    ]
    chunks = [r.questions for r in requests]
    results: list[DecisionResult | None] = [None] * len(chunks)
    errors: list[str] = []

    async def run(
        index: int, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with limiter:
            task_status.started()
            try:
                results[index] = await decide(requests[index], provider=provider)
            except DecisionError as exc:
                errors.append(f"batch {index + 1}/{len(chunks)}: {exc.kind}: {exc}")
                logger.warning("decision %s", errors[-1])

    with trio.move_on_after(deadline_s if deadline_s is not None else float("inf")) as scope:
        if schedule == "sliding":
            async with trio.open_nursery() as nursery:
                for index in range(len(chunks)):
                    # ``start`` returns once the batch holds a token: batches go out in
                    # question order (trio would otherwise start them in either order).
                    await nursery.start(run, index)
        else:
            width = max(1, int(limiter.total_tokens))
            for start in range(0, len(chunks), width):
                async with trio.open_nursery() as nursery:
                    for index in range(start, min(start + width, len(chunks))):
                        nursery.start_soon(run, index)
    done = [r for r in results if r is not None]
    failed = len(chunks) - len(done)
    reason = "; ".join(errors)
    if scope.cancelled_caught:
        reason = "; ".join(filter(None, [f"deadline of {deadline_s:g} s passed", reason]))
    merged = merge_results(done) if done else None
    if merged is not None and not merged.answers:
        # Answers that were all malformed tell the caller as little as no answer.
        merged, reason = None, reason or "no well-formed answers"
    asked = sum(len(chunk) for chunk in chunks)
    answered = len(merged.answers) if merged is not None else 0
    if 0 < answered < asked:
        reason = "; ".join(filter(None, [answered_reason(asked, answered), reason]))
    return BatchReport(
        result=merged,
        batches=len(chunks),
        failed=failed,
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
) -> DecisionResult | None:
    """Batched and fail-open (``toolroute.try_decide``); ``None`` means no provider."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency!r}")
    decider = provider
    if decider is None or not request.questions:
        return None
    report = await decide_in_batches(
        request, decider, limiter=trio.CapacityLimiter(concurrency), deadline_s=deadline_s
    )
    return report.result

"""The stateless decision entry points, with the environment's provider by default.

The decision layer takes its provider explicitly; finding one in the environment is the
providers' business, so it happens here, where both layers meet.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .._core.decide.types import DecisionRequest, DecisionResult
from .._decisions import run
from .._decisions.hosts import require_trio
from ..providers import default_decider

if TYPE_CHECKING:
    from .._core.protocols import Decider

logger = logging.getLogger("toolroute.decisions")


async def decide(request: DecisionRequest, *, provider: Decider | None = None) -> DecisionResult:
    """Send ``request`` to ``provider`` as one call, strictly.

    Args:
        request: the state and the questions; ``timeout_s`` bounds the call.
        provider: the decision provider; by default the environment's (``toolroute.providers.default_decider()``).

    Returns:
        The provider's answers under the request's question ids. A malformed answer is
        missing from ``answers`` (and logged), never fatal.

    Raises:
        ConfigError: the caller's set-up, before anything is sent: ``provider`` is not a
            ``Decider`` (a provider's name, say), or ``TOOLROUTE_DECISION_PROVIDER`` names a
            provider that is unknown or lacks its settings.
        DecisionError: anything else, with ``kind`` and ``retryable``. A request over
            the provider's caps, with a state that is not JSON (NaN, infinity), or with
            no provider configured is refused (``invalid_request`` or
            ``max_tokens_exceeded``) before any network call; a reply that cannot be
            matched to the questions with certainty is ``server``. A custom provider's
            other exceptions are wrapped as ``server``.

    **Cancellation:** the provider's deadline (the request's ``timeout_s``, else its
    default) covers retries and waits; a caller's cancel scope still cancels it. The call
    waits for its turn at the provider (this trio run's decision actor admits at most as
    many calls per provider as its HTTP pool holds) under the caller's own deadline.

    **Fail-open:** none: this is the strict call. Use :func:`try_decide` to carry on
    without answers when the provider fails.
    """
    require_trio("toolroute.decide", "toolroute.asyncio.decide")
    return await run.decide(
        request, provider=provider if provider is not None else default_decider()
    )


async def try_decide(
    request: DecisionRequest,
    *,
    provider: Decider | None = None,
    concurrency: int = run.DEFAULT_CONCURRENCY,
    deadline_s: float | None = None,
) -> DecisionResult | None:
    """Like :func:`decide`, but batched and fail-open.

    Questions are cut, in order, into batches of the provider's question cap;
    each batch carries the whole state and media. Batches run in a sliding
    window of ``concurrency``; their results merge (answers in order, usage
    summed, latency the maximum, request ids joined with ``,``).

    Args:
        request: the state and the questions.
        provider: the decision provider; by default the environment's (``toolroute.providers.default_decider()``).
        concurrency: batches in flight at once, at least 1.
        deadline_s: budget of the whole call; late batches lose their answers.

    Returns:
        The merged result, or ``None`` when no provider is configured, every
        batch failed, or the deadline passed before any batch answered — all
        of which mean "carry on as before".

    Raises:
        ValueError: ``concurrency`` below 1 (the caller's mistake).
        ConfigError: ``provider`` is not a ``Decider`` (a provider's name, say).
        DecisionError: ``invalid_request``, exactly as :func:`decide` raises it, when the
            state is not JSON (NaN, ±infinity, nested at any depth, or a circular object):
            that is the caller's mistake, refused before any batch is sent, never a
            ``None`` that would read as a provider failure.

    **Cancellation:** ends by ``deadline_s`` (``None`` when nothing answered in
    time), or by the caller's own deadline if that comes first; a caller's cancel
    scope still cancels it. Batches wait for the provider in a queue that knows
    their deadline (this trio run's decision actor admits at most as many batches
    per provider as its HTTP pool holds), and one that is still waiting when the
    deadline passes is never sent.

    **Fail-open:** a failed, late or misaligned batch costs only its own answers;
    a provider failure is never raised. A partial result carries the answers that
    came; the questions missing from it are unanswered.
    """
    require_trio("toolroute.try_decide", "toolroute.asyncio.try_decide")
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency!r}")
    if provider is None:
        try:
            provider = default_decider()
        except Exception as exc:  # a broken environment is "no provider", loudly
            logger.warning("decision provider from the environment failed: %s", exc)
            return None
    return await run.try_decide(
        request, provider=provider, concurrency=concurrency, deadline_s=deadline_s
    )

"""The query batcher: concurrent request embeddings micro-batched into one model call.

Batching is opportunistic: a batch is whatever is queued when the model becomes free, so a
lone caller never waits for company, and under load every caller that arrived during one
model call rides in the next. A queued request whose batch is predicted to end past its
``give_up_at`` is answered ``ModelTooSlow`` when the batch forms, instead of waiting out its
deadline for nothing (under a burst the model runs slower than a lone call measured).
"""

from __future__ import annotations

import contextlib
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs
import numpy as np
import numpy.typing as npt
import trio

Vectors = npt.NDArray[np.float32]
EmbedBatch = Callable[[Sequence[str]], Vectors]

#: Weight of the newest batch in the per-text model time (an EWMA: a few batches adapt it).
_EWMA_WEIGHT: Final = 0.3
#: Batches the early leave reads the model's time from: the newest, or the median of the
#: newest three when slower, and nothing before three. One cold or stalled batch (a first
#: call, a small batch's fixed cost) then cannot turn a whole burst away once a newer batch
#: ran at speed, while a slowdown is acted on from the batch that shows it.
_RECENT_BATCHES: Final = 3


class BatcherLoad:
    """What the batcher knows about its own load: texts waiting or in the model, and the
    model's measured time per text (an EWMA of batch time / batch size).

    ``clock`` is trio's (so a ``MockClock`` drives it in tests); model time is measured around
    the worker call, so it includes the wait for a worker slot.
    """

    def __init__(self) -> None:
        self.outstanding = 0
        self.seconds_per_text = 0.0
        self._recent: deque[float] = deque(maxlen=_RECENT_BATCHES)

    def predicted_wait(self) -> float:
        """Seconds a request sent now would wait for its vector (0 before any measurement)."""
        return (self.outstanding + 1) * self.seconds_per_text

    def recent_seconds_per_text(self) -> float | None:
        """The newest batch's time per text, or the median of the newest three when slower;
        ``None`` before three batches."""
        if len(self._recent) < _RECENT_BATCHES:
            return None
        return max(self._recent[-1], statistics.median(self._recent))

    def measured(self, seconds: float, texts: int) -> None:
        sample = seconds / max(texts, 1)
        self._recent.append(sample)
        self.seconds_per_text = ewma(self.seconds_per_text, sample, _EWMA_WEIGHT)


def ewma(current: float, sample: float, weight: float) -> float:
    """``current`` moved ``weight`` of the way to ``sample``; the first sample (``current``
    0, nothing measured yet) is taken whole."""
    return sample if current == 0.0 else current + weight * (sample - current)


@attrs.frozen
class Embed:
    """Embed ``text``; the reply is the vector or the exception that stopped it.
    ``give_up_at`` (trio time) is when the caller stops waiting."""

    text: str
    reply: trio.MemorySendChannel[Vectors | Exception]
    give_up_at: float = float("inf")


class ModelTooSlow(Exception):
    """The request's batch was predicted to end after its caller gives up."""


class QueryBatcher:
    """Handle on the batching service; ``run`` is the (restartable) service itself."""

    def __init__(
        self,
        embed_batch: Callable[[], EmbedBatch],
        run_cpu: Callable[..., Any],
        *,
        max_batch: int,
        limiter: trio.CapacityLimiter,
    ) -> None:
        self._embed_batch = embed_batch
        self._run_cpu = run_cpu
        self._max_batch = max_batch
        self._limiter = limiter
        self._inbox: trio.MemorySendChannel[Embed] | None = None
        #: Texts outstanding and the measured model time per text (the load ladder reads it).
        self.load = BatcherLoad()

    @property
    def max_batch(self) -> int:
        """Texts per model call at most."""
        return self._max_batch

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve requests until closed; each (re)start opens a fresh inbox."""
        send, receive = trio.open_memory_channel[Embed](self._max_batch * 4)
        self._inbox = send
        await run_batcher(
            receive,
            lambda: self._embed_batch(),  # looked up per batch: the handle may be re-pointed
            self._run_cpu,
            self._max_batch,
            self._limiter,
            load=self.load,
            task_status=task_status,
        )

    async def embed(self, text: str, *, give_up_at: float = float("inf")) -> Vectors:
        """The vector of ``text``, embedded together with whatever else is waiting.

        Raises:
            ModelTooSlow: its batch was predicted to end after ``give_up_at``.
            Exception: whatever the embedding raised (the caller degrades).
            trio.BrokenResourceError: the service is down (stopped, or restarting).
        """
        if self._inbox is None:
            raise trio.BrokenResourceError("the query batcher is not running")
        reply_send, reply_receive = trio.open_memory_channel[Vectors | Exception](1)
        self.load.outstanding += 1
        try:
            result = await self._exchange(Embed(text, reply_send, give_up_at), reply_receive)
        finally:
            self.load.outstanding -= 1
        if isinstance(result, Exception):
            raise result
        return result

    async def _exchange(
        self, message: Embed, reply_receive: trio.MemoryReceiveChannel[Vectors | Exception]
    ) -> Vectors | Exception:
        assert self._inbox is not None
        with reply_receive:
            try:
                await self._inbox.send(message)
            except trio.ClosedResourceError:
                raise trio.BrokenResourceError("the query batcher stopped") from None
            try:
                return await reply_receive.receive()
            except trio.EndOfChannel:
                raise trio.BrokenResourceError("the query batcher stopped") from None

    def close(self) -> None:
        if self._inbox is not None:
            self._inbox.close()


async def run_batcher(
    inbox: trio.MemoryReceiveChannel[Embed],
    embed_batch: Callable[[], EmbedBatch],
    run_cpu: Callable[..., Any],
    max_batch: int,
    limiter: trio.CapacityLimiter,
    *,
    load: BatcherLoad | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``Embed`` requests in batches of at most ``max_batch``.

    The loop awaits each model call on purpose: batches are sequential (the model already
    uses every core), and the requests that arrive meanwhile form the next batch.
    """
    task_status.started()
    load = load if load is not None else BatcherLoad()
    pending: list[Embed] = []
    try:
        while True:
            if not pending:
                try:
                    pending.append(await inbox.receive())
                except trio.EndOfChannel:
                    return
            while len(pending) < max_batch:
                try:
                    pending.append(inbox.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            batch, pending = pending[:max_batch], pending[max_batch:]
            # Callers that gave up (deadline, cancellation) closed their reply channel.
            batch = [m for m in batch if m.reply.statistics().open_receive_channels > 0]
            alone = not pending and inbox.statistics().current_buffer_used == 0
            batch = _without_late(batch, alone=alone, load=load)
            if batch:
                await _serve(batch, embed_batch, run_cpu, limiter, load)
            # Not held while the loop waits for the next request: a served batch's texts and
            # reply channels would stay alive until then (up to ``max_batch`` of them).
            del batch
    finally:
        # Whatever is left gets an EndOfChannel instead of a reply, so no caller hangs.
        for message in pending:
            message.reply.close()
        while True:
            try:
                inbox.receive_nowait().reply.close()
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        inbox.close()


def _without_late(batch: list[Embed], *, alone: bool, load: BatcherLoad) -> list[Embed]:
    """``batch`` less the requests it would answer after they give up (answered
    ``ModelTooSlow`` at once). A lone request (nothing else queued) always runs: it is how
    the model's time is measured again after a slow moment."""
    if alone and len(batch) == 1:
        return batch
    # The newest batches, not the average: a burst slows the model from one batch to the
    # next faster than the average follows, and a cold first batch would weigh on the
    # average long after. Before three batches nothing is predicted.
    per_text = load.recent_seconds_per_text()
    if per_text is None:
        return batch
    ends = trio.current_time() + per_text * len(batch)
    kept = []
    for message in batch:
        if ends <= message.give_up_at:
            kept.append(message)
            continue
        with contextlib.suppress(trio.BrokenResourceError):
            message.reply.send_nowait(ModelTooSlow("its batch would end after the deadline"))
        message.reply.close()
    return kept


async def _serve(
    batch: list[Embed],
    embed_batch: Callable[[], EmbedBatch],
    run_cpu: Callable[..., Any],
    limiter: trio.CapacityLimiter,
    load: BatcherLoad,
) -> None:
    result: Vectors | Exception
    try:
        embed = embed_batch()  # inside the try: if this crashes the service, replies still close
        started = trio.current_time()
        try:
            result = await run_cpu(embed, [m.text for m in batch], limiter=limiter)
        except Exception as exc:  # every caller in the batch degrades on its own
            result = exc
        else:
            load.measured(trio.current_time() - started, len(batch))
        for index, message in enumerate(batch):
            try:
                reply = result if isinstance(result, Exception) else result[index]
                message.reply.send_nowait(reply)
            except trio.BrokenResourceError:
                pass  # the caller gave up while the batch ran
    finally:
        for message in batch:
            message.reply.close()

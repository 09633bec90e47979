"""The query batcher: concurrent request embeddings micro-batched into one model call.

Batching is opportunistic: a batch is whatever is queued when the model becomes free, so a
lone caller never waits for company, and under load every caller that arrived during one
model call rides in the next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import trio

Vectors = npt.NDArray[np.float32]
EmbedBatch = Callable[[Sequence[str]], Vectors]


@attrs.frozen
class Embed:
    """Embed ``text``; the reply is the vector or the exception that stopped it."""

    text: str
    reply: trio.MemorySendChannel[Vectors | Exception]


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
            task_status=task_status,
        )

    async def embed(self, text: str) -> Vectors:
        """The vector of ``text``, embedded together with whatever else is waiting.

        Raises:
            Exception: whatever the embedding raised (the caller degrades).
            trio.BrokenResourceError: the service is down (stopped, or restarting).
        """
        if self._inbox is None:
            raise trio.BrokenResourceError("the query batcher is not running")
        reply_send, reply_receive = trio.open_memory_channel[Vectors | Exception](1)
        with reply_receive:
            try:
                await self._inbox.send(Embed(text, reply_send))
            except trio.ClosedResourceError:
                raise trio.BrokenResourceError("the query batcher stopped") from None
            try:
                result = await reply_receive.receive()
            except trio.EndOfChannel:
                raise trio.BrokenResourceError("the query batcher stopped") from None
        if isinstance(result, Exception):
            raise result
        return result

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
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``Embed`` requests in batches of at most ``max_batch``.

    The loop awaits each model call on purpose: batches are sequential (the model already
    uses every core), and the requests that arrive meanwhile form the next batch.
    """
    task_status.started()
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
            if batch:
                await _serve(batch, embed_batch, run_cpu, limiter)
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


async def _serve(
    batch: list[Embed],
    embed_batch: Callable[[], EmbedBatch],
    run_cpu: Callable[..., Any],
    limiter: trio.CapacityLimiter,
) -> None:
    result: Vectors | Exception
    try:
        embed = embed_batch()  # inside the try: if this crashes the service, replies still close
        try:
            result = await run_cpu(embed, [m.text for m in batch], limiter=limiter)
        except Exception as exc:  # every caller in the batch degrades on its own
            result = exc
        for index, message in enumerate(batch):
            try:
                reply = result if isinstance(result, Exception) else result[index]
                message.reply.send_nowait(reply)
            except trio.BrokenResourceError:
                pass  # the caller gave up while the batch ran
    finally:
        for message in batch:
            message.reply.close()

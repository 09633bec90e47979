"""The query batcher holds nothing of a request once it has answered it."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import trio
import trio.testing

from toolroute._runtime.batcher import Embed, run_batcher


def embed(texts: Sequence[str]) -> npt.NDArray[np.float32]:
    return np.ones((len(texts), 4), dtype=np.float32)


async def inline(fn: Callable[..., Any], *args: Any, limiter: trio.CapacityLimiter) -> Any:
    return fn(*args)


async def test_a_served_batch_is_not_kept_while_the_batcher_waits() -> None:
    # The last batch's messages (request texts, reply channels) once stayed referenced by
    # the loop until the next request came: 899 of them in the 10k-request load test.
    send, receive = trio.open_memory_channel[Embed](8)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_batcher, receive, lambda: embed, inline, 8, trio.CapacityLimiter(1))
        reply_send, reply_receive = trio.open_memory_channel[Any](1)
        message = Embed("a private request", reply_send)
        served = weakref.ref(message)
        await send.send(message)
        del message, reply_send
        assert (await reply_receive.receive()).shape == (4,)
        await trio.testing.wait_all_tasks_blocked()  # the batcher waits for the next request
        gc.collect()
        assert served() is None
        nursery.cancel_scope.cancel()

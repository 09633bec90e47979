"""The async driver of the retry core (ProviderLoop) over an in-memory sender, in virtual time.

The loop takes any object with ``post`` and ``aclose`` (the seam httpx calls a transport), so
these tests need no socket: each scripted attempt sleeps its latency on trio's clock.
"""

from __future__ import annotations

from collections import deque

import attrs
import pytest
import trio
import trio.testing

from toolroute import ProviderError
from toolroute.providers import RetryPolicy
from toolroute.providers._http.async_driver import ProviderLoop
from toolroute.providers._http.plain_errors import PlainErrors
from toolroute.providers._http.retry import Redactor, Reply, TransportError

OK = Reply(200, {}, b"{}")
FAST = RetryPolicy(retries=2, backoff_s=0.5, max_backoff_s=0.5, jitter=0.0)


@attrs.define
class MemorySender:
    """Answers each attempt with the next scripted reply (or failure) after ``latency_s``."""

    script: deque[Reply | TransportError | None]
    latency_s: float = 0.1
    sent: list[tuple[float, str]] = attrs.field(factory=list)
    closed: bool = False

    async def post(self, path: str, payload: object) -> Reply:
        self.sent.append((trio.current_time(), path))
        await trio.sleep(self.latency_s)
        step = self.script.popleft() if self.script else OK
        if step is None:
            await trio.sleep_forever()  # a server that never answers
        if isinstance(step, TransportError):
            raise step
        assert isinstance(step, Reply)
        return step

    async def aclose(self) -> None:
        self.closed = True


def loop_over(
    *script: Reply | TransportError | None, retry: RetryPolicy = FAST
) -> tuple[ProviderLoop, MemorySender]:
    sender = MemorySender(deque(script))
    codec = PlainErrors(Redactor(["Zq7.tLm_94Tbx-Kw"]), "POST memory/x")
    return ProviderLoop(sender, codec, retry=retry, rng=lambda: 0.0), sender


async def test_a_retried_call_waits_the_back_off_in_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    loop, sender = loop_over(Reply(503, {}, b"busy"), TransportError("reset"))
    start = trio.current_time()
    assert await loop.send("x", {}, deadline=start + 10.0, budget_s=10.0) == OK
    # attempt, 0.5 s back-off, attempt, 0.5 s back-off, attempt.
    assert [at - start for at, _ in sender.sent] == pytest.approx([0.0, 0.6, 1.2])


async def test_retry_after_is_waited_exactly(autojump_clock: trio.testing.MockClock) -> None:
    loop, sender = loop_over(Reply(429, {"retry-after-ms": "1500"}, b""))
    start = trio.current_time()
    await loop.send("x", {}, deadline=start + 10.0, budget_s=10.0)
    assert sender.sent[1][0] - start == pytest.approx(0.1 + 1.5)


async def test_the_deadline_covers_every_attempt_and_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    loop, sender = loop_over(Reply(500, {}, b"boom"), None)
    start = trio.current_time()
    with pytest.raises(ProviderError, match="no answer within 2 s") as caught:
        await loop.send("x", {}, deadline=start + 2.0, budget_s=2.0)
    assert trio.current_time() - start == pytest.approx(2.0)
    assert caught.value.retryable
    assert "boom" in str(caught.value)  # the last failure is named
    assert len(sender.sent) == 2


async def test_an_auth_refusal_latches_the_loop_without_another_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    loop, sender = loop_over(Reply(401, {"x-should-retry": "true"}, b"bad key Zq7.tLm_94Tbx-Kw"))
    with pytest.raises(ProviderError) as first:
        await loop.send("x", {}, deadline=trio.current_time() + 5.0, budget_s=5.0)
    assert first.value.status == 401
    assert "Zq7.tLm_94Tbx-Kw" not in str(first.value)
    with pytest.raises(ProviderError, match="earlier request was refused with HTTP 401"):
        await loop.send("x", {}, deadline=trio.current_time() + 5.0, budget_s=5.0)
    assert len(sender.sent) == 1


async def test_a_caller_cancel_mid_wait_leaves_the_loop_usable(
    autojump_clock: trio.testing.MockClock,
) -> None:
    loop, sender = loop_over(Reply(503, {}, b"busy"))
    with trio.move_on_after(0.3) as scope:
        await loop.send("x", {}, deadline=trio.current_time() + 10.0, budget_s=10.0)
    assert scope.cancelled_caught
    assert len(sender.sent) == 1
    # Nothing latched, nothing half-done: the next call goes out and succeeds.
    assert await loop.send("x", {}, deadline=trio.current_time() + 10.0, budget_s=10.0) == OK
    await loop.aclose()
    assert sender.closed


async def test_a_final_refusal_is_raised_after_one_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    loop, sender = loop_over(Reply(404, {}, b'{"error": {"message": "no model", "type": "nf"}}'))
    with pytest.raises(ProviderError, match="expected HTTP 2xx, got HTTP 404: 'nf: no model'"):
        await loop.send("x", {}, deadline=trio.current_time() + 5.0, budget_s=5.0)
    assert len(sender.sent) == 1

"""Chaos at 200-way: concurrent routings through one decider against a real loopback vendor
that is slow, fails, hangs and answers garbage, while some callers give up mid-flight.

Real sockets, so real time: the bound on each call is generous (a loaded two-core machine
must not make it flaky); the tight figures are the benchmark's
(``python tests/bench/bench_decide.py --section concurrency``).
"""

from __future__ import annotations

import itertools
import random
import time

import httpx
import pytest
import trio
from loopback.decision_vendors import KEY, Asked, Fault, serve_vendor

from toolroute import Outcome, RoutingConfig, Server, route_servers
from toolroute._core.decide.limits import PROVIDER_CONNECTIONS
from toolroute.decisions import DecisionRequest, DecisionResult
from toolroute.providers import LayaDecider

CALLERS = 200
DEADLINE_S = 1.0
#: Real seconds a call may overrun its deadline before the test calls it a failure.
GENEROUS_S = 2.0

SERVERS = [
    Server("github", "Manage GitHub repositories, issues and pull requests."),
    Server("slack", "Read and send Slack messages in channels and direct messages."),
    Server("weather", "Current weather and forecasts for a city or coordinates."),
    Server("stripe", "Look up Stripe customers, invoices, refunds and subscriptions."),
]

#: What the vendor does to its requests, in turn: mostly answers, sometimes not.
CHAOS = [
    None,
    None,
    Fault.error(500),
    None,
    Fault.hang(),
    None,
    Fault.garbage(),
    None,
    Fault.error(429, retry_after=30),
    Fault.close(),
    None,
]


class CountingLaya(LayaDecider):
    """Laya, counting the calls it has in flight."""

    in_flight = 0
    peak = 0

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            return await super().decide(request)
        finally:
            self.in_flight -= 1


def answer(_question_id: str, question: Asked) -> float:
    """A confident false for the weather server only: nothing else may ever be dropped."""
    return 0.02 if '"weather"' in question.instructions else 0.97


# httpx sends a request body through an async generator and does not close it when the
# request is cancelled mid-write (as a deadline does here); trio then warns as it collects it.
@pytest.mark.filterwarnings(
    "ignore:Async generator 'httpx._content.ByteStream.__aiter__' was garbage collected"
    ":ResourceWarning"
)
async def test_200_concurrent_routings_against_a_faulty_vendor_fail_open_by_their_deadline() -> (
    None
):
    rng = random.Random(16)
    config = RoutingConfig(deadline_s=DEADLINE_S, generative=False)
    with serve_vendor("laya") as server:
        server.delay_for = lambda _index: 0.3
        server.answer = answer
        server.fault = list(itertools.islice(itertools.cycle(CHAOS), 4 * CALLERS))
        decider = CountingLaya(
            api_key=KEY, base_url=server.base_url, transport=httpx.AsyncHTTPTransport(verify=False)
        )
        overruns: list[float] = []
        outcomes: list[Outcome] = []
        excluded: set[str] = set()
        gave_up = 0

        async def caller(n: int) -> None:
            nonlocal gave_up
            patience = rng.uniform(0.05, 0.8) if n % 5 == 0 else float("inf")
            started = time.perf_counter()
            with trio.move_on_after(patience) as scope:
                routed = await route_servers(
                    f"request {n}: will it rain tomorrow?", SERVERS, decider=decider, config=config
                )
                outcomes.append(routed.outcome)
                excluded.update(routed.excluded)
            if scope.cancelled_caught:
                gave_up += 1
            overruns.append(time.perf_counter() - started - DEADLINE_S)

        try:
            async with trio.open_nursery() as nursery:
                for n in range(CALLERS):
                    nursery.start_soon(caller, n)
            # Batches cut off by a deadline end a moment after their callers do.
            await trio.sleep(0.3)
            settled = decider.in_flight
            sent = len(server.requests)
            await trio.sleep(0.5)
            after = len(server.requests)
            server.fault = None
            again = await route_servers("will it rain?", SERVERS, decider=decider, config=config)
        finally:
            await decider.aclose()

    assert len(overruns) == CALLERS
    assert max(overruns) <= GENEROUS_S
    assert gave_up + len(outcomes) == CALLERS
    assert set(outcomes) <= {Outcome.APPLIED, Outcome.DEGRADED, Outcome.FAILED_OPEN}
    assert excluded <= {"weather"}  # only a confident false ever drops a server
    assert decider.peak <= PROVIDER_CONNECTIONS
    assert settled == 0
    assert after == sent  # nothing left running once every caller is done
    assert again.outcome is Outcome.APPLIED
    assert again.excluded == ("weather",)

"""Properties of ``decide`` and ``try_decide`` under arbitrary provider faults, in virtual time."""

from __future__ import annotations

import json
import logging
import math
import os
import string

import httpx
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute._core.decide.types import BooleanQuestion, DecisionRequest
from toolroute._core.errors import DecisionError
from toolroute._decisions.run import decide, decide_in_batches, try_decide
from toolroute.providers import LayaDecider

#: The issue asks for at least 1,000 examples per property in CI.
EXAMPLES = 1000 if os.environ.get("CI") else 100
BATCH = LayaDecider.limits.max_questions or 64
TIMEOUT_S = 2.0

FAULTS = (
    "ok",
    "401",
    "403",
    "413",
    "429",
    "429-late",
    "500",
    "503",
    "504-html",
    "garbage",
    "no-answers",
    "bad-types",
    "other-ids",
    "hang",
    "slow",
    "connect-error",
    "echo-key",
)

# No ``sk-`` prefix: the generic patterns must not be what hides the key, configured-key
# redaction must.
keys = st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=24, max_size=48).map(
    lambda tail: "tr." + tail
)


def handler_for(faults: list[str], key: str) -> httpx.AsyncBaseTransport:
    attempts: dict[int, int] = {}

    async def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        ids = list(body["questions"])
        batch = int(ids[0].split("__")[1]) // BATCH
        fault = faults[batch % len(faults)]
        attempts[batch] = attempts.get(batch, 0) + 1
        answers = {k: {"type": "noul", "noul": 0.9} for k in ids}
        if fault == "hang":
            await trio.sleep_forever()
        if fault == "slow":
            await trio.sleep(TIMEOUT_S * 0.5)
        if fault == "connect-error":
            raise httpx.ConnectError(f"refused; key was {key}")
        statuses = {"401": 401, "403": 403, "413": 413, "500": 500, "503": 503}
        if fault in statuses:
            return httpx.Response(statuses[fault], json={"error": {"message": f"no: {key}"}})
        if fault == "429" and attempts[batch] == 1:
            # Asks for a short wait, then answers: the one retry must succeed.
            return httpx.Response(429, headers={"Retry-After": "0.1"}, json={"detail": "slow"})
        if fault == "429-late":
            return httpx.Response(429, headers={"Retry-After": "3600"}, json={"detail": "x"})
        if fault == "504-html":
            return httpx.Response(504, text=f"<html>gateway {key}</html>")
        if fault == "garbage":
            return httpx.Response(200, text="{not json")
        if fault == "no-answers":
            return httpx.Response(200, json={"model": "m"})
        if fault == "bad-types":
            answers = {k: {"type": "noul", "noul": "no"} for k in ids}
        if fault == "other-ids":
            answers = {f"x{k}": v for k, v in answers.items()}
        if fault == "echo-key":
            answers = {k: {"type": "noul", "noul": key} for k in ids}
        return httpx.Response(200, json={"answers": answers, "routing": {"model": "m"}})

    return httpx.MockTransport(handle)


def make_request(count: int) -> DecisionRequest:
    return DecisionRequest(
        state="a short state",
        questions={f"q__{i}": BooleanQuestion(f"question {i}") for i in range(count)},
        timeout_s=TIMEOUT_S,
    )


class Records(logging.Handler):
    """Collects every log record of the ``toolroute`` loggers while active."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def __enter__(self) -> Records:
        logging.getLogger("toolroute").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("toolroute").removeHandler(self)


def run_virtual(fn):  # type: ignore[no-untyped-def]
    clock = trio.testing.MockClock(autojump_threshold=0)
    return trio.run(fn, clock=clock)


@settings(max_examples=EXAMPLES)
@given(
    count=st.integers(1, 4 * BATCH),
    faults=st.lists(st.sampled_from(FAULTS), min_size=1, max_size=4),
    key=keys,
)
def test_try_decide_never_raises_and_loses_only_failed_batches(
    count: int, faults: list[str], key: str
) -> None:
    request = make_request(count)
    batches = math.ceil(count / BATCH)

    async def main() -> tuple[object, float]:
        decider = LayaDecider(
            api_key=key, base_url="http://127.0.0.1:1", transport=handler_for(faults, key)
        )
        start = trio.current_time()
        report = await decide_in_batches(
            request, decider, limiter=trio.CapacityLimiter(4), deadline_s=10 * TIMEOUT_S
        )
        return report, trio.current_time() - start

    with Records() as records:
        report, elapsed = run_virtual(main)
    # Batches run in a window of 4, each within its own budget; nothing waits longer.
    assert elapsed <= math.ceil(batches / 4) * TIMEOUT_S + 1e-6
    answered = set(report.result.answers) if report.result else set()
    used = {faults[i % len(faults)] for i in range(batches)}
    # A 401/403 latches the provider: batches after it fail without a request.
    latched = bool(used & {"401", "403"})
    for index in range(batches):
        ids = {f"q__{i}" for i in range(index * BATCH, min(count, (index + 1) * BATCH))}
        fault = faults[index % len(faults)]
        if fault in ("ok", "slow", "429") and not latched:
            assert ids <= answered
        elif fault not in ("ok", "slow", "429"):
            assert not ids & answered
    if not answered:
        assert report.result is None
    messages = [*records.messages, report.reason]
    assert all(key not in m for m in messages)


@settings(max_examples=EXAMPLES)
@given(fault=st.sampled_from(FAULTS), key=keys, count=st.integers(1, BATCH))
def test_decide_raises_only_decision_error_and_never_shows_the_key(
    fault: str, key: str, count: int
) -> None:
    request = make_request(count)

    async def main() -> tuple[BaseException | None, float]:
        decider = LayaDecider(
            api_key=key, base_url="http://127.0.0.1:1", transport=handler_for([fault], key)
        )
        start = trio.current_time()
        try:
            await decide(request, provider=decider)
        except DecisionError as exc:
            return exc, trio.current_time() - start
        return None, trio.current_time() - start

    error, elapsed = run_virtual(main)
    assert elapsed <= TIMEOUT_S + 1e-6
    # Answers under ids that were not asked cannot be matched: no reply, an error.
    if fault in ("ok", "slow", "429", "bad-types", "echo-key"):
        assert error is None
    else:
        assert isinstance(error, DecisionError)
        assert key not in str(error)


@settings(max_examples=EXAMPLES)
@given(count=st.integers(1, 3 * BATCH), key=keys)
def test_try_decide_all_batches_failing_is_none(count: int, key: str) -> None:
    async def main() -> object:
        decider = LayaDecider(
            api_key=key, base_url="http://127.0.0.1:1", transport=handler_for(["500"], key)
        )
        return await try_decide(make_request(count), provider=decider)

    assert run_virtual(main) is None


async def test_try_decide_without_provider_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.endswith(("_API_KEY", "_BASE_URL", "_ACCOUNT_ID")) or name.startswith("TOOLROUTE_"):
            monkeypatch.delenv(name)
    assert await try_decide(make_request(3)) is None
    with pytest.raises(DecisionError, match="No decision provider is configured"):
        await decide(make_request(3))


@settings(max_examples=EXAMPLES)
@given(faults=st.lists(st.sampled_from(FAULTS), min_size=1, max_size=3), key=keys)
def test_no_key_reaches_engine_events(faults: list[str], key: str) -> None:
    from toolroute import Catalog, Server
    from toolroute._core.events import to_json
    from toolroute._runtime.engine import open_engine

    catalog = Catalog.from_mcp_servers(
        {s: {"tools": [{"name": f"{s}_tool", "description": f"Works with {s}"}]} for s in "abc"}
    )

    async def main() -> list[str]:
        decider = LayaDecider(
            api_key=key, base_url="http://127.0.0.1:1", transport=handler_for(faults, key)
        )
        async with (
            open_engine(catalog, embedder=None, decider=decider) as engine,
            engine.subscribe(buffer=64) as events,
        ):
            await engine.try_decide(make_request(2 * BATCH))
            await engine.route_servers(f"route this {key}", servers=[Server("a"), Server("b")])
            seen: list[str] = []
            while True:
                with trio.move_on_after(1):  # virtual time: jumps when nothing is left
                    seen.append(to_json((await events.__anext__()).event))
                    continue
                return seen

    seen = run_virtual(main)
    assert seen  # decision.finished and routing.finished at least
    assert all(key not in text for text in seen)

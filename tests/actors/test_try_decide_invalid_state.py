"""``try_decide`` raises on a caller's state that is not JSON, exactly as ``decide`` does."""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
import trio.testing

from toolroute import Catalog, DecisionError, decide, open_engine, try_decide
from toolroute._core.config import EngineConfig
from toolroute._core.errors import DecisionErrorKind
from toolroute.decisions import BooleanQuestion, DecisionRequest
from toolroute.providers import LayaDecider
from toolroute.testing import ScriptedDecider


def circular() -> dict[str, Any]:
    state: dict[str, Any] = {"name": "loop"}
    state["self"] = state
    return state


INVALID_STATES = {
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "nested nan": {"servers": [{"score": 0.5}, {"score": math.nan}]},
    "circular": circular(),
}


def request(state: Any) -> DecisionRequest:
    return DecisionRequest(state=state, questions={"q__0": BooleanQuestion("Is it?")})


@pytest.mark.parametrize("name", sorted(INVALID_STATES))
async def test_try_decide_raises_invalid_request_on_a_state_that_is_not_json(
    name: str, autojump_clock: trio.testing.MockClock
) -> None:
    decider = ScriptedDecider()
    with pytest.raises(DecisionError) as raised:
        await try_decide(request(INVALID_STATES[name]), provider=decider)
    assert raised.value.kind is DecisionErrorKind.INVALID_REQUEST
    assert "JSON" in str(raised.value)
    assert decider.requests == []  # refused before any provider call


@pytest.mark.parametrize("name", sorted(INVALID_STATES))
async def test_a_vendor_refuses_the_same_state_in_decide_and_try_decide(name: str) -> None:
    # Nothing listens on port 9: a call that reached the network would fail as ``network``.
    laya = LayaDecider(api_key="key", base_url="http://127.0.0.1:9")
    try:
        with pytest.raises(DecisionError) as strict:
            await decide(request(INVALID_STATES[name]), provider=laya)
        with pytest.raises(DecisionError) as batched:
            await try_decide(request(INVALID_STATES[name]), provider=laya)
    finally:
        await laya.aclose()
    assert strict.value.kind is batched.value.kind is DecisionErrorKind.INVALID_REQUEST


@pytest.mark.parametrize("name", sorted(INVALID_STATES))
async def test_engine_try_decide_raises_like_engine_decide(
    name: str, autojump_clock: trio.testing.MockClock
) -> None:
    decider = ScriptedDecider()
    catalog = Catalog.from_mcp_servers({"a": {"tools": [{"name": "t", "description": "d"}]}})
    async with open_engine(
        catalog, config=EngineConfig(cache=False), embedder=None, decider=decider
    ) as engine:
        with pytest.raises(DecisionError) as strict:
            await engine.decide(request(INVALID_STATES[name]))
        with pytest.raises(DecisionError) as batched:
            await engine.try_decide(request(INVALID_STATES[name]))
    assert strict.value.kind is batched.value.kind is DecisionErrorKind.INVALID_REQUEST
    assert decider.requests == []


async def test_try_decide_still_fails_open_on_a_provider_fault(
    autojump_clock: trio.testing.MockClock,
) -> None:
    decider = ScriptedDecider(error=DecisionError(DecisionErrorKind.SERVER, "down"))
    assert await try_decide(request({"finite": 1.5}), provider=decider) is None

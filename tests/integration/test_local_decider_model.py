"""The bundled LocalDecider with the bundled model: its calibration fits the model it ships with."""

from __future__ import annotations

import pytest

from toolroute import Server, route_servers
from toolroute.decisions import BooleanAnswer, BooleanQuestion, DecisionRequest
from toolroute.providers import Calibration, LocalDecider, default_embedder

pytestmark = pytest.mark.slow

TOOLS = [
    {"name": "get_weather", "description": "Current weather and forecast for a city."},
    {"name": "send_email", "description": "Send an email to a recipient."},
    {"name": "stock_quote", "description": "Latest price of a stock ticker."},
]
ANY = BooleanQuestion("The request needs one of available_tools to be carried out.")


def test_the_bundled_calibration_is_for_the_bundled_model() -> None:
    assert Calibration.bundled().embedder == default_embedder().identity


async def test_a_request_a_tool_serves_is_likelier_than_small_talk() -> None:
    decider = LocalDecider()
    probabilities = []
    for text in ("What's the weather forecast in Paris tomorrow?", "Tell me a joke about cats."):
        state = {"request": text, "available_tools": TOOLS}
        result = await decider.decide(DecisionRequest(state=state, questions={"any": ANY}))
        answer = result.answers["any"]
        assert isinstance(answer, BooleanAnswer)
        probabilities.append(answer.probability)
    assert probabilities[0] > probabilities[1]


async def test_offline_routing_keeps_the_server_the_request_names() -> None:
    servers = [
        Server("weather", "Current weather and forecasts for any city", ("get_weather",)),
        Server("mail", "Send and read email", ("send_email",)),
        Server("stocks", "Stock prices and market data", ("stock_quote",)),
    ]
    outcome = await route_servers(
        "What's the weather forecast in Paris tomorrow?", servers, decider=LocalDecider()
    )
    assert outcome.strategy == "decision"
    assert "weather" in outcome.selected

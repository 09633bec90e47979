"""``route_servers`` through each vendor's loopback server: what a bad reply may never cost.

A needed server is never dropped on a reply that cannot be aligned with its questions;
a partial reply is ``degraded`` with how many answers came; a state too large for the
provider's window is split across requests instead of refused.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from loopback.decision_vendors import AnswerValue, Asked, Fault, serve_vendor
from test_deciders_loopback import API_KEY, MAP_VENDORS, NO_RETRY, opened

from toolroute import Outcome, RoutingConfig, Server, route_servers
from toolroute._core.decide.limits import estimate_state_tokens
from toolroute.providers import LayaDecider

SIX = [
    Server("files", "Reads and writes local files", ("files_read",)),
    Server("github", "Opens pull requests and issues on GitHub", ("github_pr",)),
    Server("slack", "Posts messages to Slack channels", ("slack_post",)),
    Server("jira", "Tracks tickets in Jira", ("jira_ticket",)),
    Server("postgres", "Runs SQL against Postgres", ("postgres_query",)),
    Server("mail", "Sends e-mail", ("mail_send",)),
]
QUERY = "open a pull request on GitHub for the fix"
GITHUB_KEY = "server__1"


def github_only(question_id: str, _question: Asked) -> AnswerValue:
    """The model's judgement: github needed (0.95), every other server not (0.05)."""
    return 0.95 if question_id == GITHUB_KEY else 0.05


def config(**kwargs: Any) -> RoutingConfig:
    # The generative fallback is off: these tests are about the decision router alone.
    return RoutingConfig(generative=False, **kwargs)


async def test_a_reply_with_fewer_answers_than_servers_drops_nothing() -> None:
    # Six servers asked; the reply carries three answers (positions 1, 3, 5). Matched by
    # position, github's 0.95 would land on "files" and "slack"'s 0.05 on github.
    with serve_vendor("openai_decisions", api_key=API_KEY) as server:
        server.answer = github_only
        server.fault = Fault.drop("server__0", "server__2", "server__4")
        async with opened("openai_decisions", server, retry=NO_RETRY) as decider:
            routing = await route_servers(QUERY, SIX, decider=decider, config=config())
    assert len(server.requests[0].body["questions"]) == 6
    assert routing.outcome is not Outcome.APPLIED
    assert routing.excluded == ()
    assert "github" in routing.selected
    assert routing.answered == 0


@pytest.mark.parametrize("vendor", [*MAP_VENDORS, "openai_decisions"])
async def test_a_reply_under_shifted_ids_drops_nothing(vendor: str) -> None:
    # Every answer filed one id off: server__i's answer arrives as server__(i+1).
    shifted = {f"server__{i}": f"server__{i + 1}" for i in range(len(SIX))}
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.answer = github_only
        server.fault = Fault.rename(shifted)
        async with opened(vendor, server, retry=NO_RETRY) as decider:
            routing = await route_servers(QUERY, SIX, decider=decider, config=config())
    assert routing.outcome is Outcome.FAILED_OPEN
    assert routing.excluded == ()
    assert "cannot be matched" in routing.reason


@pytest.mark.parametrize(
    "fault",
    [Fault.drop("server__3"), Fault.wrong_type("out_of_range", "server__3")],
    ids=["missing", "out-of-range"],
)
@pytest.mark.parametrize("vendor", MAP_VENDORS)
async def test_a_partial_reply_is_degraded_with_how_many_were_answered(
    vendor: str, fault: Fault
) -> None:
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.answer = github_only
        server.fault = fault
        async with opened(vendor, server, retry=NO_RETRY) as decider:
            routing = await route_servers(QUERY, SIX, decider=decider, config=config())
    assert routing.outcome is Outcome.DEGRADED
    assert "5 of 6 answered" in routing.reason
    assert routing.answered == 5
    # The unanswered server (jira) is kept; the answered ones are judged as usual.
    assert routing.selected == ("github", "jira")


@pytest.mark.parametrize("vendor", [*MAP_VENDORS, "openai_decisions"])
async def test_a_complete_reply_is_applied(vendor: str) -> None:
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.answer = github_only
        async with opened(vendor, server, retry=NO_RETRY) as decider:
            routing = await route_servers(QUERY, SIX, decider=decider, config=config())
    assert routing.outcome is Outcome.APPLIED
    assert "6 of 6 answered" in routing.reason
    assert routing.selected == ("github",)


def many_servers(count: int) -> list[Server]:
    return [
        Server(f"svc{i:02d}", f"Handles the internal service number {i} of the fleet", (f"t{i}",))
        for i in range(count)
    ]


@pytest.mark.parametrize("count", [30, 70, 200])
async def test_a_routing_state_too_large_for_laya_is_split_so_every_part_fits(count: int) -> None:
    servers = many_servers(count)
    needed = "svc07"

    def answer(question_id: str, _question: Asked) -> AnswerValue:
        return 0.95 if question_id == "server__7" else 0.05

    with serve_vendor("laya", api_key=API_KEY) as server:
        server.answer = answer
        async with opened("laya", server, retry=NO_RETRY) as decider:
            assert isinstance(decider, LayaDecider)
            routing = await route_servers(
                "use service 7", servers, decider=decider, config=config(max_servers=count)
            )
            limits = decider.limits.for_model(decider.model)
    window = limits.max_state_tokens
    assert window is not None
    states = [request.body["state"] for request in server.requests]
    assert len(states) > 1
    assert all(estimate_state_tokens(state, limits) <= window for state in states)
    asked = [name for request in server.requests for name in request.body["questions"]]
    assert sorted(asked) == sorted(f"server__{i}" for i in range(count))  # each once
    # Each part's state lists exactly the servers its questions ask about, in order.
    for request in server.requests:
        listed = [entry["name"] for entry in request.body["state"]["available_servers"]]
        keys = [int(name.split("__")[1]) for name in request.body["questions"]]
        assert listed == [servers[i].id for i in keys]
    assert routing.outcome is Outcome.APPLIED
    assert routing.selected == (needed,)
    assert json.dumps(routing.excluded).count("svc") == count - 1

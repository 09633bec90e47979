"""ScaleDown (one classify call per question) against an in-memory stand-in server."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
from loopback.memory import (
    FAST,
    QUESTIONS,
    Server,
    ask,
    never,
    png,
    reply,
    with_media,
)

from toolroute._core.decide.types import (
    BooleanAnswer,
    BooleanQuestion,
    ChoiceAnswer,
    ScoreAnswer,
)
from toolroute._core.errors import DecisionError, DecisionErrorKind
from toolroute.providers import (
    ScaleDownDecider,
)

Kind = DecisionErrorKind


# -- ScaleDown ----------------------------------------------------------------


def scaledown(server: Server, **kwargs: Any) -> ScaleDownDecider:
    return ScaleDownDecider(
        api_key="sd-key-1", transport=server.transport, retry=FAST, rng=lambda: 0.0, **kwargs
    )


def classify(request: httpx.Request) -> httpx.Response:
    """Scores the labels 0.6, 0.3, 0.1 … in order (unnormalised for 2 labels)."""
    body = json.loads(request.content)
    names = [label["name"] for label in body["labels"]]
    raw = [0.6, 0.2, 0.2, 0.0][: len(names)]
    return httpx.Response(
        200,
        json={
            "top_label": names[0],
            "scores": dict(zip(names, raw, strict=True)),
            "labels": [],
        },
        headers={"x-request-id": f"sd-{names[0]}"},
    )


async def test_scaledown_sends_one_classify_call_per_question() -> None:
    server = Server(classify)
    result = await scaledown(server).decide(ask({"body": "refund please"}, **QUESTIONS))
    assert len(server.requests) == 3
    assert all(r.url == "https://api.scaledown.xyz/classify" for r in server.requests)
    assert all(r.headers["x-api-key"] == "sd-key-1" for r in server.requests)
    assert all("authorization" not in r.headers for r in server.requests)
    by_first_label = {body["labels"][0]["name"]: body for body in server.bodies}
    assert by_first_label["true"] == {
        "text": '{"body":"refund please"}',
        "labels": [
            {"name": "true", "rubric": "Is the ticket urgent?\nAnswer: yes — needs action today"},
            {"name": "false", "rubric": "Is the ticket urgent?\nAnswer: no"},
        ],
    }
    assert by_first_label["billing"]["labels"] == [
        {
            "name": "billing",
            "rubric": "Which team handles it?\nAnswer: billing — payments and invoices",
        },
        {"name": "technical", "rubric": "Which team handles it?\nAnswer: technical"},
    ]
    assert by_first_label["0"]["labels"] == [
        {"name": "0", "rubric": "How upset is the customer?\nAnswer: level 0 of 0–2 — calm"},
        {"name": "1", "rubric": "How upset is the customer?\nAnswer: level 1 of 0–2 — annoyed"},
        {"name": "2", "rubric": "How upset is the customer?\nAnswer: level 2 of 0–2 — furious"},
    ]
    # Boolean: 0.6 / (0.6 + 0.2); choice normalised; score the weighted index.
    assert result.answers["urgent"] == BooleanAnswer(0.6 / (0.6 + 0.2))
    team = result.answers["team"]
    assert isinstance(team, ChoiceAnswer)
    assert team.choice == "billing"
    assert team.probabilities == {"billing": pytest.approx(0.75), "technical": pytest.approx(0.25)}
    assert team.confidence == pytest.approx(0.75)
    mood = result.answers["mood"]
    assert isinstance(mood, ScoreAnswer)
    assert mood.probabilities == {"0": 0.6, "1": 0.2, "2": 0.2}
    assert mood.score == pytest.approx(0.2 + 0.4)
    assert mood.legend == {"0": "calm", "1": "annoyed", "2": "furious"}
    assert result.model == "classify-1"
    assert result.provider == "scaledown"
    assert result.request_id == "sd-true,sd-billing,sd-0"


async def test_scaledown_reads_the_labels_list_and_drops_bad_scores(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        names = [label["name"] for label in json.loads(request.content)["labels"]]
        if names[0] == "true":
            return httpx.Response(
                200,
                json={
                    "top_label": "false",
                    "labels": [{"label": "true", "score": 0.1}, {"label": "false", "score": 0.9}],
                },
            )
        return httpx.Response(200, json={"scores": {"billing": "0.9", "technical": 0.1}})

    server = Server(respond)
    with caplog.at_level(logging.WARNING, "toolroute.decisions"):
        result = await scaledown(server).decide(
            ask(urgent=QUESTIONS["urgent"], team=QUESTIONS["team"])
        )
    assert result.answers == {"urgent": BooleanAnswer(0.1)}
    assert "dropped the answer to question 'team'" in caplog.text


@pytest.mark.parametrize(
    "reply_body",
    [
        {"scores": {"true": 0.9, "false": 0.1, "billing": 0.5}},
        {"labels": [{"label": "true", "score": 0.9}, {"label": "maybe", "score": 0.1}]},
        {"labels": [{"label": ["true"], "score": 0.9}, {"label": "false", "score": 0.1}]},
    ],
    ids=["scores", "labels", "unhashable-label"],
)
async def test_scaledown_a_reply_scoring_labels_not_sent_is_not_used(
    reply_body: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    server = Server(reply(reply_body))
    with caplog.at_level(logging.WARNING, "toolroute.decisions"):
        result = await scaledown(server).decide(ask(urgent=QUESTIONS["urgent"]))
    assert result.answers == {}
    assert "labels that were not offered" in caplog.text


async def test_scaledown_refuses_media_models_and_overflow_before_any_request() -> None:
    server = Server(never)
    decider = scaledown(server)
    with pytest.raises(DecisionError) as info:
        await decider.decide(with_media({"q": BooleanQuestion("x")}, [png()]))
    assert info.value.kind is Kind.INVALID_REQUEST
    with pytest.raises(DecisionError) as info:
        await decider.decide(with_media({"q": BooleanQuestion("x")}, model="big"))
    assert info.value.kind is Kind.INVALID_REQUEST
    with pytest.raises(DecisionError) as info:
        await decider.decide(ask(**{f"q{i}": BooleanQuestion("x") for i in range(17)}))
    assert info.value.kind is Kind.MAX_TOKENS_EXCEEDED
    with pytest.raises(DecisionError) as info:
        await ScaleDownDecider(api_key="", transport=server.transport).decide(
            ask(q=BooleanQuestion("x"))
        )
    assert info.value.kind is Kind.AUTHENTICATION
    assert server.requests == []


@pytest.mark.parametrize(
    ("status", "kind", "latches", "attempts"),
    [
        (401, Kind.AUTHENTICATION, True, 1),
        (403, Kind.AUTHENTICATION, True, 1),
        (402, Kind.INVALID_REQUEST, False, 1),
        (422, Kind.INVALID_REQUEST, False, 1),
        (429, Kind.RATE_LIMIT, False, 2),
        (500, Kind.SERVER, False, 2),
    ],
)
async def test_scaledown_error_kinds(status: int, kind: Kind, latches: bool, attempts: int) -> None:
    server = Server(reply({"detail": "no"}, status))
    decider = scaledown(server)
    with pytest.raises(DecisionError) as info:
        await decider.decide(ask(q=BooleanQuestion("x")))
    assert info.value.kind is kind
    assert len(server.requests) == attempts
    with pytest.raises(DecisionError) as info:
        await decider.decide(ask(q=BooleanQuestion("x")))
    assert len(server.requests) == (attempts if latches else 2 * attempts)


async def test_scaledown_422_detail_list_is_flattened() -> None:
    detail = [{"loc": ["body", "labels", 0, "rubric"], "msg": "too long"}]
    server = Server(reply({"detail": detail}, 422))
    with pytest.raises(DecisionError, match=r"body\.labels\.0\.rubric: too long"):
        await scaledown(server).decide(ask(q=BooleanQuestion("x")))


async def test_scaledown_a_failed_call_leaves_only_its_questions_unanswered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["labels"][0]["name"] == "billing":
            return httpx.Response(500, json={"detail": "boom"})
        return classify(request)

    with caplog.at_level(logging.WARNING, "toolroute.decisions"):
        result = await scaledown(Server(respond)).decide(
            ask(urgent=QUESTIONS["urgent"], team=QUESTIONS["team"])
        )
    assert set(result.answers) == {"urgent"}
    assert "1 of 2 questions left unanswered" in caplog.text


async def test_scaledown_auth_failure_is_raised_even_after_answers() -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["labels"][0]["name"] == "billing":
            return httpx.Response(401, json={"detail": "bad key"})
        return classify(request)

    with pytest.raises(DecisionError) as info:
        await scaledown(Server(respond)).decide(
            ask(urgent=QUESTIONS["urgent"], team=QUESTIONS["team"])
        )
    assert info.value.kind is Kind.AUTHENTICATION


async def test_scaledown_base_url_v1_is_stripped() -> None:
    server = Server(classify)
    await scaledown(server, base_url="https://api.scaledown.xyz/v1").decide(
        ask(q=BooleanQuestion("x"))
    )
    assert server.requests[0].url == "https://api.scaledown.xyz/classify"

"""The logprob decider (one chat completion per question) against an in-memory stand-in server."""

from __future__ import annotations

import json
import logging
import math
from typing import Any

import httpx
import pytest
from loopback.memory import (
    FAST,
    QUESTIONS,
    Handler,
    Server,
    ask,
    never,
    openai_error,
    reply,
)

from toolroute._core.decide.types import (
    BooleanAnswer,
    BooleanQuestion,
    Question,
    Usage,
)
from toolroute._core.errors import DecisionError, DecisionErrorKind
from toolroute.providers import (
    LogprobDecider,
)

Kind = DecisionErrorKind


# -- Logprob decider ------------------------------------------------------------


def completion(top: list[tuple[str, float]] | None, *, model: str = "qwen3:8b") -> Handler:
    logprobs = (
        None
        if top is None
        else {
            "content": [
                {
                    "token": top[0][0] if top else "",
                    "logprob": top[0][1] if top else 0.0,
                    "top_logprobs": [{"token": t, "logprob": lp} for t, lp in top],
                }
            ]
        }
    )
    return reply(
        {
            "model": model,
            "choices": [{"index": 0, "message": {"content": "x"}, "logprobs": logprobs}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 1},
        }
    )


def logprob(server: Server, **kwargs: Any) -> LogprobDecider:
    return LogprobDecider(
        model="qwen3:8b",
        base_url="http://127.0.0.1:11434/v1",
        transport=server.transport,
        retry=FAST,
        rng=lambda: 0.0,
        **kwargs,
    )


async def test_logprob_request_and_probability() -> None:
    server = Server(completion([("Yes", -0.1), ("yes", -2.5), ("No", -3.0), ("Maybe", -4.0)]))
    question = BooleanQuestion("The user wants a refund.", true="asks for money back", false=None)
    result = await logprob(server).decide(ask({"msg": "refund!"}, refund=question))
    (request,) = server.requests
    assert request.url == "http://127.0.0.1:11434/v1/chat/completions"
    assert "authorization" not in request.headers
    body = server.bodies[0]
    assert body == {
        "model": "qwen3:8b",
        "messages": [
            {
                "role": "system",
                "content": "You judge whether a statement is true of the state you are given."
                " Answer with exactly one word: yes or no.",
            },
            {
                "role": "user",
                "content": 'State:\n{"msg":"refund!"}\n\nStatement: The user wants a refund.\n'
                "Yes means: asks for money back\nAnswer yes or no.",
            },
        ],
        "max_tokens": 1,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 20,
    }
    yes = math.exp(-0.1) + math.exp(-2.5)
    no = math.exp(-3.0)
    answer = result.answers["refund"]
    assert isinstance(answer, BooleanAnswer)
    assert answer.probability == pytest.approx(yes / (yes + no))
    assert answer.probability == pytest.approx(0.9519, abs=1e-4)
    assert result.usage == Usage(input_tokens=40, output_tokens=1)
    assert result.model == "qwen3:8b"
    assert result.provider == "logprob"


async def test_logprob_whitespace_and_case_variants_count() -> None:
    server = Server(completion([(" NO", -0.2), ("no ", -1.0), (" Yes", -2.0)]))
    result = await logprob(server, api_key="local-key").decide(ask(q=BooleanQuestion("x")))
    assert server.requests[0].headers["authorization"] == "Bearer local-key"
    yes, no = math.exp(-2.0), math.exp(-0.2) + math.exp(-1.0)
    answer = result.answers["q"]
    assert isinstance(answer, BooleanAnswer)
    assert answer.probability == pytest.approx(yes / (yes + no))


async def test_logprob_neither_token_leaves_the_question_unanswered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = Server(completion([("The", -0.05), ("I", -3.0)]))
    with caplog.at_level(logging.WARNING, "toolroute.decisions"):
        result = await logprob(server).decide(ask(q=BooleanQuestion("x")))
    assert result.answers == {}
    assert "neither 'yes' nor 'no'" in caplog.text


async def test_logprob_below_the_floor_is_unanswered() -> None:
    top = [("The", -0.1), ("Yes", -3.0), ("No", -4.0)]
    result = await logprob(Server(completion(top))).decide(ask(q=BooleanQuestion("x")))
    assert result.answers == {}
    lenient = await logprob(Server(completion(top)), floor=0.0).decide(ask(q=BooleanQuestion("x")))
    assert "q" in lenient.answers


@pytest.mark.parametrize("top", [None, []])
async def test_logprob_missing_logprobs_is_a_server_error(
    top: list[tuple[str, float]] | None,
) -> None:
    server = Server(completion(top))
    with pytest.raises(DecisionError) as info:
        await logprob(server).decide(ask(q=BooleanQuestion("x")))
    assert info.value.kind is Kind.SERVER
    assert "did not return logprobs" in str(info.value)
    assert "top_logprobs" in str(info.value)
    assert info.value.retryable is False
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "question",
    [QUESTIONS["team"], QUESTIONS["mood"]],
    ids=["choice", "score"],
)
async def test_logprob_refuses_choice_and_score_before_any_request(question: Question) -> None:
    server = Server(never)
    with pytest.raises(DecisionError) as info:
        await logprob(server).decide(ask(ok=BooleanQuestion("x"), other=question))
    assert info.value.kind is Kind.INVALID_REQUEST
    assert "boolean questions only" in str(info.value)
    assert "OpenAI Decisions" in str(info.value)
    assert server.requests == []


async def test_logprob_one_call_per_question_in_order() -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        statement = json.loads(request.content)["messages"][1]["content"]
        lp = -0.1 if "Statement: A\n" in statement else -5.0
        return completion([("yes", lp), ("no", -1.0)])(request)

    server = Server(respond)
    result = await logprob(server).decide(ask(a=BooleanQuestion("A"), b=BooleanQuestion("B")))
    assert len(server.requests) == 2
    assert list(result.answers) == ["a", "b"]
    a, b = result.answers["a"], result.answers["b"]
    assert isinstance(a, BooleanAnswer)
    assert isinstance(b, BooleanAnswer)
    assert a.probability > 0.5 > b.probability


async def test_logprob_errors_use_the_openai_envelope() -> None:
    server = Server(openai_error(401, "invalid_api_key", "bad key"))
    decider = logprob(server, api_key="k")
    with pytest.raises(DecisionError) as info:
        await decider.decide(ask(q=BooleanQuestion("x")))
    assert info.value.kind is Kind.AUTHENTICATION
    with pytest.raises(DecisionError, match="rejected this API key earlier"):
        await decider.decide(ask(q=BooleanQuestion("x")))
    assert len(server.requests) == 1


def test_logprob_config_is_checked() -> None:
    from toolroute._core.errors import ConfigError

    with pytest.raises(ConfigError):
        LogprobDecider(model=" ")
    with pytest.raises(ConfigError):
        LogprobDecider(model="m", top_logprobs=21)
    with pytest.raises(ConfigError):
        LogprobDecider(model="m", floor=1.0)

"""OpenAI Decisions against an in-memory stand-in server (httpx.MockTransport)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from loopback.memory import (
    FAST,
    KEY,
    QUESTIONS,
    Server,
    ask,
    never,
    openai_error,
    png,
    reply,
    score,
    with_media,
)

from toolroute._core.decide.types import (
    BooleanAnswer,
    BooleanQuestion,
    ChoiceAnswer,
    DecisionRequest,
    Question,
    ScoreAnswer,
    Usage,
)
from toolroute._core.errors import DecisionError, DecisionErrorKind
from toolroute.providers import (
    OpenAIDecisionsDecider,
)

Kind = DecisionErrorKind


# -- OpenAI Decisions ---------------------------------------------------------


def openai(server: Server, **kwargs: Any) -> OpenAIDecisionsDecider:
    return OpenAIDecisionsDecider(
        api_key=KEY, transport=server.transport, retry=FAST, rng=lambda: 0.0, **kwargs
    )


ANSWERS = {
    "model": "gpt-6-luna-2026-10-01",
    "answers": [
        {"name": "urgent", "type": "predicate", "probability": 0.93},
        {
            "name": "team",
            "type": "choice",
            "choice": "billing",
            "confidence": 0.7,
            "probabilities": [
                {"value": "billing", "probability": 0.8},
                {"value": "technical", "probability": 0.2},
            ],
        },
        {
            "name": "mood",
            "type": "score",
            "score": 1.3,
            "confidence": 0.6,
            "probabilities": [
                {"value": 0, "label": "calm", "probability": 0.1},
                {"value": 1, "label": "annoyed", "probability": 0.5},
                {"value": 2, "label": "furious", "probability": 0.4},
            ],
        },
    ],
    "usage": {"input_tokens": 120, "output_tokens": 0, "total_tokens": 120},
}


async def test_openai_request_shape_is_an_ordered_question_array() -> None:
    server = Server(reply(ANSWERS, headers={"x-request-id": "req_1"}))
    decider = openai(server, safety_identifier="user-hash-1")
    result = await decider.decide(ask(**QUESTIONS))
    (request,) = server.requests
    assert request.url == "https://api.openai.com/v1/decisions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert server.bodies[0] == {
        "model": "gpt-6-luna",
        "input": "ticket text",
        "questions": [
            {
                "name": "urgent",
                "type": "predicate",
                "instructions": "Is the ticket urgent?\nTrue means: needs action today",
            },
            {
                "name": "team",
                "type": "choice",
                "instructions": "Which team handles it?",
                "choices": [
                    {"value": "billing", "description": "payments and invoices"},
                    {"value": "technical"},
                ],
            },
            {
                "name": "mood",
                "type": "score",
                "instructions": "How upset is the customer?",
                "levels": [{"label": "calm"}, {"label": "annoyed"}, {"label": "furious"}],
            },
        ],
        "safety_identifier": "user-hash-1",
    }
    assert result.provider == "openai-decisions"
    assert result.model == "gpt-6-luna-2026-10-01"
    assert result.request_id == "req_1"
    assert result.usage == Usage(input_tokens=120, output_tokens=0)
    assert result.answers["urgent"] == BooleanAnswer(0.93)
    assert result.answers["team"] == ChoiceAnswer(
        "billing", {"billing": 0.8, "technical": 0.2}, 0.7
    )
    assert result.answers["mood"] == ScoreAnswer(
        1.3,
        {"0": "calm", "1": "annoyed", "2": "furious"},
        {"0": 0.1, "1": 0.5, "2": 0.4},
        0.6,
    )


async def test_openai_criteria_folding_and_json_state() -> None:
    server = Server(reply({"answers": []}))
    questions: dict[str, Question] = {
        "both": BooleanQuestion("Paid?", true={"status": "paid"}, false="unpaid"),
        "none": BooleanQuestion("Late?"),
        "false_only": BooleanQuestion("Open?", false="closed"),
    }
    # The stand-in reply has no answers: no reply (misaligned); the request is what is tested.
    with pytest.raises(DecisionError, match="cannot be matched"):
        await openai(server).decide(ask({"id": 7, "text": "héllo"}, **questions))
    body = server.bodies[0]
    assert body["input"] == '{"id":7,"text":"héllo"}'
    assert "safety_identifier" not in body
    assert [q["instructions"] for q in body["questions"]] == [
        'Paid?\nTrue means: {"status":"paid"}\nFalse means: unpaid',
        "Late?",
        "Open?\nFalse means: closed",
    ]
    assert all(q["type"] == "predicate" for q in body["questions"])


async def test_openai_score_levels_fall_back_to_index_labels() -> None:
    levels = ["low", None, "a long description " * 5, {"n": 3}]
    server = Server(
        reply(
            {
                "answers": [
                    {
                        "type": "score",
                        "score": 1.0,
                        "probabilities": [
                            {"value": 0, "label": "0", "probability": 0.25},
                            {"value": 1, "label": "1", "probability": 0.5},
                            {"value": 2, "label": "2", "probability": 0.25},
                            {"value": 3, "label": "3", "probability": 0.0},
                        ],
                    }
                ]
            }
        )
    )
    result = await openai(server).decide(ask(level=score("How much?", levels)))
    assert server.bodies[0]["questions"][0]["levels"] == [
        {"label": "0", "description": "low"},
        {"label": "1"},
        {"label": "2", "description": "a long description " * 5},
        {"label": "3", "description": '{"n":3}'},
    ]
    answer = result.answers["level"]
    assert isinstance(answer, ScoreAnswer)
    # The legend says what the levels mean, not the echoed index labels.
    assert answer.legend == {"0": "low", "1": "1", "2": "a long description " * 5, "3": '{"n":3}'}
    assert answer.confidence == 0.5  # none reported: the uncalibrated max


async def test_openai_duplicate_short_levels_use_index_labels() -> None:
    server = Server(reply({"answers": []}))
    with pytest.raises(DecisionError, match="cannot be matched"):
        await openai(server).decide(ask(q=score("Rate", ["x", "x"])))
    assert server.bodies[0]["questions"][0]["levels"] == [
        {"label": "0", "description": "x"},
        {"label": "1", "description": "x"},
    ]


async def test_openai_images_make_a_message_input() -> None:
    server = Server(reply({"answers": [{"type": "predicate", "probability": 0.5}]}))
    image = png()
    request = with_media({"q": BooleanQuestion("A cat?")}, [image, image], state="look")
    result = await openai(server).decide(request)
    (message,) = server.bodies[0]["input"]
    assert message["type"] == "message"
    assert message["role"] == "user"
    content = message["content"]
    assert content[0] == {"type": "input_text", "text": "look"}
    assert [part["type"] for part in content[1:]] == ["input_image", "input_image"]
    assert content[1]["image_url"].startswith("data:image/png;base64,")
    assert result.media_bytes == 2 * len(content[1]["image_url"])


async def test_openai_refuses_video_before_any_request() -> None:
    server = Server(never)
    request = DecisionRequest(
        state="x", questions={"q": BooleanQuestion("ok?")}, video=b"\x1a\x45\xdf\xa3" + b"\0" * 8
    )
    with pytest.raises(DecisionError) as info:
        await openai(server).decide(request)
    assert info.value.kind is Kind.INVALID_REQUEST
    assert server.requests == []


@pytest.mark.parametrize(
    "answers",
    [
        # Names swapped: the answers may belong to each other's questions.
        [
            {"name": "second", "type": "predicate", "probability": 0.1},
            {"name": "first", "type": "predicate", "probability": 0.9},
        ],
        # One more answer than questions: which one is extra cannot be known.
        [
            {"name": "first", "type": "predicate", "probability": 0.1},
            {"name": "second", "type": "predicate", "probability": 0.9},
            {"name": "injected", "type": "predicate", "probability": 0.5},
        ],
        # One fewer: the one answer may be the second question's.
        [{"type": "predicate", "probability": 0.2}],
    ],
    ids=["swapped-names", "extra", "fewer"],
)
async def test_openai_a_reply_that_does_not_align_is_no_reply(answers: list[Any]) -> None:
    server = Server(reply({"answers": answers}))
    with pytest.raises(DecisionError, match="cannot be matched") as caught:
        await openai(server).decide(ask(first=BooleanQuestion("A?"), second=BooleanQuestion("B?")))
    assert caught.value.kind is DecisionErrorKind.SERVER


async def test_openai_answers_without_names_are_read_by_position() -> None:
    payload = {
        "answers": [
            {"type": "predicate", "probability": 0.1},
            {"name": "second", "type": "predicate", "probability": 0.9},
        ]
    }
    server = Server(reply(payload))
    result = await openai(server).decide(
        ask(first=BooleanQuestion("A?"), second=BooleanQuestion("B?"))
    )
    assert result.answers == {"first": BooleanAnswer(0.1), "second": BooleanAnswer(0.9)}


async def test_openai_refusal_and_malformed_answers_are_missing_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    payload = {
        "answers": [
            {"name": "urgent", "type": "refusal"},
            # A choice that is not one of the offered options (another question's answer).
            {
                "type": "choice",
                "choice": "sales",
                "probabilities": [{"value": "sales", "probability": 1.0}],
            },
            {"type": "score", "probabilities": [{"value": 7, "probability": 1.0}]},
        ]
    }
    server = Server(reply(payload))
    with caplog.at_level(logging.WARNING, "toolroute.decisions"):
        result = await openai(server).decide(ask(**QUESTIONS))
    assert result.answers == {}
    assert "refused to answer question 'urgent'" in caplog.text
    assert "'team'" in caplog.text
    assert "'mood'" in caplog.text


async def test_openai_score_without_score_is_the_weighted_index() -> None:
    payload = {
        "answers": [
            {
                "type": "score",
                "probabilities": [
                    {"value": 0, "probability": 0.2},
                    {"value": 1, "probability": 0.8},
                ],
            }
        ]
    }
    result = await openai(Server(reply(payload))).decide(ask(s=score("x", ["lo", "hi"])))
    answer = result.answers["s"]
    assert isinstance(answer, ScoreAnswer)
    assert answer.score == pytest.approx(0.8)
    assert answer.legend == {"0": "lo", "1": "hi"}


async def test_openai_without_answers_array_is_a_server_error() -> None:
    server = Server(reply({"answers": {"urgent": {"type": "predicate", "probability": 1}}}))
    with pytest.raises(DecisionError) as info:
        await openai(server).decide(ask(urgent=BooleanQuestion("x")))
    assert info.value.kind is Kind.SERVER
    assert "answers array" in str(info.value)


@pytest.mark.parametrize(
    ("status", "code", "message", "kind", "retryable", "attempts"),
    [
        (400, None, "bad field", Kind.INVALID_REQUEST, False, 1),
        (400, "context_length_exceeded", "too big", Kind.MAX_TOKENS_EXCEEDED, False, 1),
        (
            400,
            None,
            "This model's maximum context length is 8192",
            Kind.MAX_TOKENS_EXCEEDED,
            False,
            1,
        ),
        (403, "unsupported_country_region_territory", "region", Kind.INVALID_REQUEST, False, 1),
        (404, "model_not_found", "no model", Kind.INVALID_REQUEST, False, 1),
        (413, None, "too large", Kind.MAX_TOKENS_EXCEEDED, False, 1),
        (429, "rate_limit_exceeded", "slow down", Kind.RATE_LIMIT, True, 2),
        (429, "insufficient_quota", "pay up", Kind.RATE_LIMIT, False, 1),
        (500, None, "oops", Kind.SERVER, True, 2),
        (503, None, "busy", Kind.OVERLOADED, True, 2),
    ],
)
async def test_openai_error_kinds(
    status: int, code: str | None, message: str, kind: Kind, retryable: bool, attempts: int
) -> None:
    server = Server(openai_error(status, code, message))
    decider = openai(server)
    with pytest.raises(DecisionError) as info:
        await decider.decide(ask(q=BooleanQuestion("x")))
    assert info.value.kind is kind
    assert info.value.retryable is retryable
    assert info.value.status == status
    assert info.value.request_id == "req_err"
    assert message in str(info.value)
    assert len(server.requests) == attempts
    # Nothing but 401 latches: the next call goes out again.
    with pytest.raises(DecisionError):
        await decider.decide(ask(q=BooleanQuestion("x")))
    assert len(server.requests) == 2 * attempts


async def test_openai_401_latches_and_redacts_the_key() -> None:
    server = Server(openai_error(401, "invalid_api_key", f"Incorrect API key provided: {KEY}"))
    decider = openai(server)
    with pytest.raises(DecisionError) as info:
        await decider.decide(ask(q=BooleanQuestion("x")))
    assert info.value.kind is Kind.AUTHENTICATION
    assert KEY not in str(info.value)
    with pytest.raises(DecisionError, match="rejected this API key earlier"):
        await decider.decide(ask(q=BooleanQuestion("x")))
    assert len(server.requests) == 1


async def test_openai_local_limits_refuse_before_any_request() -> None:
    server = Server(never)
    decider = openai(server)
    too_many = {f"q{i}": BooleanQuestion("x") for i in range(201)}
    with pytest.raises(DecisionError) as info:
        await decider.decide(ask(**too_many))
    assert info.value.kind is Kind.MAX_TOKENS_EXCEEDED
    eleven = score("x", [str(i) for i in range(11)])
    with pytest.raises(DecisionError) as info:
        await decider.decide(ask(s=eleven))
    assert info.value.kind is Kind.INVALID_REQUEST
    with pytest.raises(DecisionError) as info:
        await OpenAIDecisionsDecider(api_key=None, transport=server.transport).decide(
            ask(q=BooleanQuestion("x"))
        )
    assert info.value.kind is Kind.AUTHENTICATION
    assert server.requests == []


async def test_openai_base_url_drops_v1_and_model_overrides() -> None:
    server = Server(reply({"answers": []}))
    decider = OpenAIDecisionsDecider(
        api_key=KEY,
        base_url="https://proxy.example/v1/",
        model="luna-x",
        transport=server.transport,
    )
    with pytest.raises(DecisionError, match="cannot be matched"):
        await decider.decide(ask(q=BooleanQuestion("x")))
    assert server.requests[0].url == "https://proxy.example/v1/decisions"
    assert server.bodies[0]["model"] == "luna-x"


def test_openai_safety_identifier_is_checked() -> None:
    from toolroute._core.errors import ConfigError

    with pytest.raises(ConfigError):
        OpenAIDecisionsDecider(api_key=KEY, safety_identifier="x" * 129)
    with pytest.raises(ConfigError):
        OpenAIDecisionsDecider(api_key=KEY, safety_identifier=" ")

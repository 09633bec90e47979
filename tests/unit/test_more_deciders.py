"""OpenAI Decisions, ScaleDown and the logprob decider, against stand-in HTTP servers."""

from __future__ import annotations

import json
import logging
import math
import struct
import zlib
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from toolroute._core.decision import (
    BooleanAnswer,
    BooleanQuestion,
    ChoiceAnswer,
    ChoiceQuestion,
    DecisionRequest,
    Question,
    ScoreAnswer,
    ScoreQuestion,
    Usage,
)
from toolroute._core.errors import DecisionError, DecisionErrorKind
from toolroute.providers import (
    LogprobDecider,
    OpenAIDecisionsDecider,
    RetryPolicy,
    ScaleDownDecider,
    default_decider,
)
from toolroute.providers._deciders.default import IMPLICIT

Kind = DecisionErrorKind
FAST = RetryPolicy(retries=1, backoff_s=0.0)
# No generic credential shape: only configured-key redaction can hide it.
KEY = "tk.Zq7tLm94Tbx-ghijklmnop"

Handler = Callable[[httpx.Request], httpx.Response]


class Server:
    """A stand-in server: records every request and answers with ``respond``."""

    def __init__(self, respond: Handler) -> None:
        self.requests: list[httpx.Request] = []
        self._respond = respond

    @property
    def bodies(self) -> list[Any]:
        return [json.loads(r.content) for r in self.requests]

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self._respond(request)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)


def reply(payload: object, status: int = 200, headers: dict[str, str] | None = None) -> Handler:
    return lambda _request: httpx.Response(status, json=payload, headers=headers)


def never(_request: httpx.Request) -> httpx.Response:
    raise AssertionError("no request may be sent")


def png(width: int = 3, height: int = 2) -> bytes:
    ihdr = b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + ihdr + struct.pack(">I", zlib.crc32(ihdr))


def ask(state: object = "ticket text", **questions: Question) -> DecisionRequest:
    return DecisionRequest(state=state, questions=questions)


# Built through ``Any``: mypy's attrs plugin cannot type the ``dict``/``tuple`` converters.
def choice(instructions: str, options: Any) -> ChoiceQuestion:
    return ChoiceQuestion(instructions, options)


def score(instructions: str, levels: Any) -> ScoreQuestion:
    return ScoreQuestion(instructions, levels)


def with_media(questions: dict[str, Question], images: Any = (), **kwargs: Any) -> DecisionRequest:
    return DecisionRequest(
        state=kwargs.pop("state", "x"), questions=questions, images=images, **kwargs
    )


QUESTIONS: dict[str, Question] = {
    "urgent": BooleanQuestion("Is the ticket urgent?", true="needs action today", false=None),
    "team": choice(
        "Which team handles it?", {"billing": "payments and invoices", "technical": None}
    ),
    "mood": score("How upset is the customer?", ["calm", "annoyed", "furious"]),
}


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
    with caplog.at_level(logging.WARNING, "toolroute.decision"):
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


def openai_error(status: int, code: str | None = None, message: str = "nope") -> Handler:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return reply(body, status, headers={"x-request-id": "req_err"})


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
    with caplog.at_level(logging.WARNING, "toolroute.decision"):
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
    with caplog.at_level(logging.WARNING, "toolroute.decision"):
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

    with caplog.at_level(logging.WARNING, "toolroute.decision"):
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
    with caplog.at_level(logging.WARNING, "toolroute.decision"):
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


# -- default_decider ----------------------------------------------------------


def test_new_providers_are_explicit_only() -> None:
    env = {
        "OPENAI_API_KEY": "sk-abc",
        "SCALEDOWN_API_KEY": "sd",
        "TOOLROUTE_LOGPROB_BASE_URL": "http://localhost:8000/v1",
        "TOOLROUTE_LOGPROB_MODEL": "m",
    }
    assert default_decider(env=env) is None
    assert {name for name, _build in IMPLICIT}.isdisjoint(
        {"openai-decisions", "scaledown", "logprob"}
    )


def test_default_decider_builds_them_by_name() -> None:
    chosen = default_decider(
        "openai-decisions",
        env={"OPENAI_API_KEY": "sk-abc", "OPENAI_DECISIONS_MODEL": "luna-mini"},
    )
    assert isinstance(chosen, OpenAIDecisionsDecider)
    assert chosen.model == "luna-mini"
    assert default_decider("openai-decisions", env={}) is None
    via_env = default_decider(
        env={"TOOLROUTE_DECISION_PROVIDER": "scaledown", "SCALEDOWN_API_KEY": "sd"}
    )
    assert isinstance(via_env, ScaleDownDecider)
    assert default_decider("scaledown", env={"SCALEDOWN_API_KEY": " "}) is None
    local = default_decider(
        "logprob",
        env={
            "TOOLROUTE_LOGPROB_BASE_URL": "http://localhost:8000/v1",
            "TOOLROUTE_LOGPROB_MODEL": "m",
        },
    )
    assert isinstance(local, LogprobDecider)
    assert local.model == "m"
    assert default_decider("logprob", env={"TOOLROUTE_LOGPROB_MODEL": "m"}) is None
    assert (
        default_decider("logprob", env={"TOOLROUTE_LOGPROB_BASE_URL": "http://localhost"}) is None
    )

"""An in-memory stand-in server for decision vendors: an ``httpx.MockTransport`` that records
every request, plus the requests and questions the vendor tests share."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from typing import Any

import httpx

from toolroute._core.decide.types import (
    BooleanQuestion,
    ChoiceQuestion,
    DecisionRequest,
    Question,
    ScoreQuestion,
)
from toolroute.providers import RetryPolicy

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


def openai_error(status: int, code: str | None = None, message: str = "nope") -> Handler:
    """A reply in OpenAI's error envelope (OpenAI Decisions and the logprob decider)."""
    body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return reply(body, status, headers={"x-request-id": "req_err"})


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

"""A real HTTP server on 127.0.0.1 that speaks the decision vendors' wire formats.

The formats are those of ``wire-formats.md`` §1–§8 and §11, plus Anthropic Messages.
One server is started per test for one *vendor*. It also answers
``/v1/chat/completions``, ``/v1/messages`` and ``/classify`` unless the
vendor's own path is one of those::

    with serve_vendor("typesafe") as server:
        httpx.post(server.url("/v1/systemone"), json=body, headers={"Authorization": "Bearer KEY"})
        server.requests            # [Received(path, headers, body), ...]; header names lower-case
        server.fault = Fault.error(429, retry_after=2)
        server.answer = lambda qid, q: 0.2 if q.kind == "boolean" else (q.options[-1], 0.6)

Every vendor is one :class:`VendorSpec` row in :data:`VENDORS`, which holds its path,
its auth rule, its question parser, its success renderer, its error envelope and
its request-id headers. The request handler is shared by all vendors.

**Golden mode** (``serve_vendor(v, golden=True)``): a request whose path and body equal
the fixture's (``tests/fixtures/decisions/<v>.json``) gets the fixture's response and
headers verbatim. A fixture with ``"request": null`` matches any body on its path.

**Resource handling.** Handler threads are daemons. Sleeps, hangs and
``delay_for`` all wait on one ``stopping`` event, so leaving the context manager
releases them at once. A released hang closes its connection without a response.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import math
import random
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeAlias

from .server import LoopbackServer, serving

#: A JSON value as :func:`json.loads` returns it.
Json: TypeAlias = Any

#: The API key the fixtures use as a placeholder, and the servers' default key.
KEY = "KEY"

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "decisions"
FIXTURE_VENDORS = (
    "typesafe",
    "typesafe_gateway",
    "laya",
    "xor",
    "perplexity",
    "clef",
    "openai_decisions",
    "scaledown",
    "logprob",
)

Kind: TypeAlias = Literal["boolean", "choice", "score"]


def load_fixture(vendor: str) -> dict[str, Json]:
    """The golden fixture ``tests/fixtures/decisions/<vendor>.json``."""
    data: dict[str, Json] = json.loads((FIXTURES / f"{vendor}.json").read_text(encoding="utf-8"))
    return data


def fixture_headers(fixture: Mapping[str, Json], api_key: str = KEY) -> dict[str, str]:
    """The fixture's request headers with the ``KEY`` placeholder replaced by ``api_key``."""
    return {k: v.replace(KEY, api_key) for k, v in fixture["request_headers"].items()}


# --------------------------------------------------------------------------- questions


@dataclass(frozen=True)
class Asked:
    """One question as the server received it, in vendor-neutral form.

    ``options`` are the choice option names or the score level labels (index order);
    ``("true", "false")`` for a boolean. ``raw`` is the question exactly as sent.
    """

    id: str
    kind: Kind
    instructions: str
    options: tuple[str, ...]
    raw: Json


#: What ``server.answer(question_id, question)`` returns: for a boolean, P(true); for a
#: choice or score, a bare ``p`` (the first option / level 0 gets ``p``) or ``(option, p)``
#: where option is a choice name, or a level index or label; ``None`` refuses the question.
#: The other options share ``1 - p`` equally; ``confidence`` is ``p``.
AnswerValue: TypeAlias = float | tuple[str | int, float] | None
Answerer: TypeAlias = Callable[[str, Asked], AnswerValue]


def default_answer(_question_id: str, question: Asked) -> AnswerValue:
    """0.9 for a boolean; the first option (or level 0) with 0.7 otherwise."""
    return 0.9 if question.kind == "boolean" else 0.7


@dataclass(frozen=True)
class Decided:
    """One answer before a vendor renders it. Fields may hold corrupted values (faults)."""

    id: str
    kind: Kind
    probability: Json = None
    choice: str | None = None
    probabilities: Mapping[str, Json] = field(default_factory=dict)
    legend: Mapping[str, str] = field(default_factory=dict)
    score: Json = None
    confidence: Json = None
    refused: bool = False


def _spread(keys: Sequence[str], pick: str, p: float) -> dict[str, float]:
    rest = round((1.0 - p) / (len(keys) - 1), 6)
    return {k: (p if k == pick else rest) for k in keys}


def decide(question: Asked, value: AnswerValue) -> Decided:
    """Turn an answerer's value into a full answer (distribution, score, confidence)."""
    if value is None:
        return Decided(question.id, question.kind, refused=True)
    p = float(value[1] if isinstance(value, tuple) else value)
    if question.kind == "boolean":
        return Decided(question.id, "boolean", probability=p, confidence=abs(2 * p - 1))
    if question.kind == "choice":
        keys = question.options
    else:
        keys = tuple(str(i) for i in range(len(question.options)))
    pick = str(value[0]) if isinstance(value, tuple) else keys[0]
    if question.kind == "score" and pick in question.options:
        pick = str(question.options.index(pick))  # a level label names its index
    if pick not in keys:
        raise ValueError(f"answer {pick!r} to {question.id!r} is not one of {keys}")
    probs = _spread(keys, pick, p)
    if question.kind == "choice":
        return Decided(question.id, "choice", choice=pick, probabilities=probs, confidence=p)
    score = round(sum(int(k) * q for k, q in probs.items()), 6)
    legend = dict(zip(keys, question.options, strict=True))
    return Decided(
        question.id, "score", probabilities=probs, legend=legend, score=score, confidence=p
    )


# --------------------------------------------------------------------------- faults

FaultKind: TypeAlias = Literal[
    "error", "html", "garbage", "slow", "hang", "truncate", "close", "wrong_type", "drop", "rename"
]
Corruption: TypeAlias = Literal["string", "out_of_range", "nan"]

#: The HTTP status Cloudflare sends with each Workers AI error code.
CLEF_CODE_STATUS = {10000: 401, 3006: 413, 3040: 429, 3043: 500, 4006: 429, 5006: 400, 5021: 400}
_CLEF_MESSAGES = {
    10000: "Authentication error",
    3006: "Request is too large",
    3040: "Capacity temporarily exceeded, please try again.",
    3043: "Internal server error",
    4006: "you have used up your daily free allocation of 10,000 neurons, please upgrade to"
    " Cloudflare's Workers Paid plan if you would like to continue usage.",
    5006: "Invalid input",
}
_CLEF_DEFAULT_CODE = {400: 5006, 401: 10000, 403: 10000, 413: 3006, 429: 3040, 500: 3043}

HTML_504 = (
    "<html>\r\n<head><title>{status} Gateway Time-out</title></head>\r\n<body>\r\n"
    "<center><h1>{status} Gateway Time-out</h1></center>\r\n</body>\r\n</html>\r\n"
)


@dataclass(frozen=True, kw_only=True)
class Fault:
    """What goes wrong with one request (or every request); build with the classmethods.

    Assign ``server.fault = Fault...`` for every request, or a list of ``Fault | None``
    for the next requests in order, which are then followed by normal replies.
    """

    kind: FaultKind
    status: int = 200
    code: int | str | None = None
    message: str | None = None
    body: Json = None
    headers: tuple[tuple[str, str], ...] = ()
    retry_after: float | None = None
    retry_after_date: bool = False
    retry_after_ms: float | None = None
    seconds: float = 0.0
    corruption: Corruption = "string"
    ids: tuple[str, ...] = ()
    renames: tuple[tuple[str, str], ...] = ()

    @classmethod
    def error(
        cls,
        status: int,
        *,
        code: int | str | None = None,
        message: str | None = None,
        retry_after: float | None = None,
        retry_after_date: bool = False,
        retry_after_ms: float | None = None,
        body: Json = None,
        headers: Mapping[str, str] | None = None,
    ) -> Fault:
        """``status`` in the vendor's own error envelope, or exactly ``body`` when given.

        ``retry_after`` is sent as seconds, or as an HTTP-date that many seconds ahead
        when ``retry_after_date``. ``code`` is the vendor's error code or type.
        """
        return cls(
            kind="error",
            status=status,
            code=code,
            message=message,
            retry_after=retry_after,
            retry_after_date=retry_after_date,
            retry_after_ms=retry_after_ms,
            body=body,
            headers=tuple((headers or {}).items()),
        )

    @classmethod
    def clef(cls, code: int, *, retry_after: float | None = None) -> Fault:
        """A Workers AI error code (4006, 3040, 5021, …) with its usual status."""
        return cls.error(CLEF_CODE_STATUS.get(code, 400), code=code, retry_after=retry_after)

    @classmethod
    def replay(cls, entry: Mapping[str, Json]) -> Fault:
        """One entry of a fixture's ``errors`` list, sent verbatim."""
        return cls.error(entry["status"], body=entry["body"], headers=entry["headers"])

    @classmethod
    def html(cls, status: int = 504) -> Fault:
        """An nginx-style HTML error page, as a proxy in front of the vendor sends it."""
        return cls(kind="html", status=status)

    @classmethod
    def garbage(cls, body: bytes = b'{"answers": {"urgent": {"type": "no') -> Fault:
        """200 with ``application/json`` content that is not JSON."""
        return cls(kind="garbage", body=body)

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        """Wait ``seconds`` (real time), then answer normally."""
        return cls(kind="slow", seconds=seconds)

    @classmethod
    def hang(cls) -> Fault:
        """Never answer; the connection is closed when the server stops."""
        return cls(kind="hang")

    @classmethod
    def truncate(cls) -> Fault:
        """Send the headers and half the body, then close the connection."""
        return cls(kind="truncate")

    @classmethod
    def close(cls) -> Fault:
        """Read the request, then close the connection without a response."""
        return cls(kind="close")

    @classmethod
    def wrong_type(cls, corruption: Corruption = "string", *ids: str) -> Fault:
        """Corrupt the answers to ``ids`` (default: the first answer).

        The boolean probability, or the top option's probability of a choice or
        score, becomes ``"yes"`` (string), ``1.7`` (out_of_range) or ``NaN`` (nan).
        """
        return cls(kind="wrong_type", corruption=corruption, ids=ids)

    @classmethod
    def drop(cls, *ids: str) -> Fault:
        """Leave out the answers to ``ids`` (default: the last question's)."""
        return cls(kind="drop", ids=ids)

    @classmethod
    def rename(cls, mapping: Mapping[str, str] | None = None) -> Fault:
        """Answer under other ids: ``mapping`` old → new (default: every id + ``_renamed``)."""
        return cls(kind="rename", renames=tuple((mapping or {}).items()))


def retry_after_value(fault: Fault) -> str | None:
    """The ``Retry-After`` header for ``fault``: seconds, or an HTTP-date."""
    if fault.retry_after is None:
        return None
    if fault.retry_after_date:
        # HTTP-dates have 1 s resolution; round up so the wait is at least what was asked.
        return email.utils.formatdate(math.ceil(time.time() + fault.retry_after), usegmt=True)
    seconds = fault.retry_after
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)


_BAD_VALUES: dict[Corruption, Json] = {"string": "yes", "out_of_range": 1.7, "nan": math.nan}


def _corrupt(answer: Decided, bad: Json) -> Decided:
    if answer.kind == "boolean":
        return replace(answer, probability=bad)
    top = answer.choice if answer.kind == "choice" else "0"
    return replace(answer, probabilities={**answer.probabilities, str(top): bad})


def apply_answer_fault(answers: list[Decided], fault: Fault | None) -> list[Decided]:
    """The answers after a ``drop``, ``rename`` or ``wrong_type`` fault."""
    if fault is None or not answers:
        return answers
    if fault.kind == "drop":
        gone = set(fault.ids or (answers[-1].id,))
        return [a for a in answers if a.id not in gone]
    if fault.kind == "rename":
        names = dict(fault.renames) or {a.id: f"{a.id}_renamed" for a in answers}
        return [replace(a, id=names.get(a.id, a.id)) for a in answers]
    if fault.kind == "wrong_type":
        targets = set(fault.ids or (answers[0].id,))
        bad = _BAD_VALUES[fault.corruption]
        return [_corrupt(a, bad) if a.id in targets else a for a in answers]
    return answers


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Problem:
    """Why the server refuses a request body (rendered in the vendor's envelope)."""

    loc: tuple[str | int, ...]
    msg: str
    type: str = "value_error"
    input: Json = None


def dotted(loc: Sequence[str | int]) -> str:
    """``("questions", 1, "type")`` → ``questions[1].type``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


Parser: TypeAlias = Callable[[Json, Mapping[str, str]], list[Asked] | Problem]
Check: TypeAlias = Callable[[Json, Mapping[str, str]], Problem | None]


def _require(body: Json, *keys: str) -> Problem | None:
    if not isinstance(body, dict):
        return Problem((), "Input should be a valid dictionary", "dict_type", body)
    for key in keys:
        if key not in body:
            return Problem((key,), "Field required", "missing", body)
    return None


def _label(criterion: Json, index: int) -> str:
    if criterion is None:
        return str(index)
    return criterion if isinstance(criterion, str) else json.dumps(criterion)


def _options(kind: Kind, criteria: Json, loc: tuple[str | int, ...]) -> tuple[str, ...] | Problem:
    if kind == "boolean":
        return ("true", "false")
    if kind == "choice":
        if not isinstance(criteria, dict) or not 2 <= len(criteria) <= 255:
            return Problem(loc, "A choice needs 2 to 255 options", "value_error", criteria)
        return tuple(criteria)
    if not isinstance(criteria, list) or not 2 <= len(criteria) <= 10:
        return Problem(loc, "A score needs 2 to 10 levels", "value_error", criteria)
    return tuple(_label(c, i) for i, c in enumerate(criteria))


def _map_question(qid: str, raw: Json, boolean_type: str) -> Asked | Problem:
    loc: tuple[str | int, ...] = ("questions", qid)
    kinds: dict[str, Kind] = {boolean_type: "boolean", "choice": "choice", "score": "score"}
    if not isinstance(raw, dict):
        return Problem(loc, "Input should be a valid dictionary", "dict_type", raw)
    kind = kinds.get(str(raw.get("type")))
    if kind is None:
        allowed = ", ".join(repr(k) for k in kinds)
        return Problem(
            (*loc, "type"), f"Input should be {allowed}", "literal_error", raw.get("type")
        )
    if not isinstance(raw.get("instructions"), str):
        return Problem((*loc, "instructions"), "Field required", "missing", raw)
    options = _options(kind, raw.get("criteria"), (*loc, "criteria"))
    if isinstance(options, Problem):
        return options
    return Asked(qid, kind, raw["instructions"], options, raw)


def question_map_parser(boolean_type: str, *checks: Check) -> Parser:
    """Parser for ``{"state", "questions": {id: question}}`` bodies (all but OpenAI)."""

    def parse(body: Json, params: Mapping[str, str]) -> list[Asked] | Problem:
        problem = _require(body, "state", "questions")
        for check in checks:
            problem = problem or check(body, params)
        if problem:
            return problem
        if not isinstance(body["questions"], dict):
            return Problem(("questions",), "Input should be a valid dictionary", "dict_type")
        asked: list[Asked] = []
        for qid, raw in body["questions"].items():
            item = _map_question(qid, raw, boolean_type)
            if isinstance(item, Problem):
                return item
            asked.append(item)
        return asked

    return parse


def _perplexity_check(body: Json, _params: Mapping[str, str]) -> Problem | None:
    if "model" not in body:
        return Problem(("model",), "Field required", "missing")
    extra = sorted(set(body) - {"model", "state", "questions"})
    return (
        Problem((extra[0],), "Extra inputs are not permitted", "extra_forbidden") if extra else None
    )


_CLEF_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


def _clef_check(body: Json, params: Mapping[str, str]) -> Problem | None:
    if body.get("model") != params.get("model"):
        return Problem(("model",), f"Expected {params.get('model')!r}", "literal_error")
    bad = [q for q in body.get("questions") or {} if not _CLEF_ID.match(q)]
    return Problem(("questions", bad[0]), "Invalid question id", "string_pattern") if bad else None


def _entries(value: Json, key: str, low: int, high: int) -> bool:
    return (
        isinstance(value, list)
        and low <= len(value) <= high
        and all(isinstance(v, dict) and key in v for v in value)
    )


def _openai_question(index: int, raw: Json) -> Asked | Problem:
    loc: tuple[str | int, ...] = ("questions", index)
    if not isinstance(raw, dict) or not isinstance(raw.get("instructions"), str):
        return Problem((*loc, "instructions"), "Field required", "missing")
    qid = str(raw.get("name") or index)
    kind = raw.get("type")
    if kind == "predicate":
        return Asked(qid, "boolean", raw["instructions"], ("true", "false"), raw)
    if kind == "choice":
        choices: Json = raw.get("choices")
        if not _entries(choices, "value", 2, 255):
            return Problem((*loc, "choices"), "expected between 2 and 255 entries with a value")
        return Asked(
            qid, "choice", raw["instructions"], tuple(str(c["value"]) for c in choices), raw
        )
    if kind == "score":
        levels: Json = raw.get("levels")
        if not _entries(levels, "label", 2, 10):
            return Problem((*loc, "levels"), "expected between 2 and 10 entries with a label")
        return Asked(qid, "score", raw["instructions"], tuple(str(v["label"]) for v in levels), raw)
    return Problem((*loc, "type"), "expected one of 'predicate', 'choice', 'score'")


def _parse_openai(body: Json, _params: Mapping[str, str]) -> list[Asked] | Problem:
    problem = _require(body, "model", "input", "questions")
    if problem:
        return problem
    if not isinstance(body["questions"], list) or not body["questions"]:
        return Problem(("questions",), "expected a non-empty array")
    asked: list[Asked] = []
    for index, raw in enumerate(body["questions"]):
        item = _openai_question(index, raw)
        if isinstance(item, Problem):
            return item
        asked.append(item)
    return asked


def _parse_classify(body: Json, _params: Mapping[str, str]) -> list[Asked] | Problem:
    problem = _require(body, "text", "labels")
    if problem:
        return problem
    labels = body["labels"]
    if not isinstance(labels, list) or len(labels) < 2:
        return Problem(("labels",), "List should have at least 2 items", "too_short", labels)
    if not all(isinstance(label, dict) and "name" in label for label in labels):
        return Problem(("labels",), "Each label needs a name", "missing", labels)
    names = tuple(str(label["name"]) for label in labels)
    return [Asked("classify", "choice", str(body["text"]), names, body)]


def _message_text(messages: Json) -> str:
    parts = [m.get("content") for m in messages if isinstance(m, dict)]
    return "\n".join(p for p in parts if isinstance(p, str))


def _parse_chat(body: Json, _params: Mapping[str, str]) -> list[Asked] | Problem:
    problem = _require(body, "model", "messages")
    if problem:
        return problem
    if not body.get("logprobs"):
        return []
    top = body.get("top_logprobs", 0)
    if not isinstance(top, int) or not 0 <= top <= 20:
        return Problem(("top_logprobs",), "top_logprobs must be between 0 and 20")
    text = _message_text(body["messages"])
    return [Asked("chat", "boolean", text, ("true", "false"), body)]


def _parse_anthropic(body: Json, _params: Mapping[str, str]) -> list[Asked] | Problem:
    return _require(body, "model", "max_tokens", "messages") or []


# --------------------------------------------------------------------------- rendering


@dataclass(frozen=True)
class Turn:
    """Everything a success renderer needs about one request."""

    body: Json
    asked: Sequence[Asked]
    answers: Sequence[Decided]
    model: str | None
    input_tokens: int
    rid: uuid.UUID
    text: str


def _noul(answer: Decided, boolean: str = "noul") -> Json:
    if answer.kind == "boolean":
        field_name = "noul" if boolean == "noul" else "probability"
        return {"type": boolean, field_name: answer.probability}
    common: dict[str, Json] = {"type": answer.kind}
    if answer.kind == "choice":
        common["choice"] = answer.choice
    else:
        common |= {"score": answer.score, "legend": dict(answer.legend)}
    return common | {"probabilities": dict(answer.probabilities), "confidence": answer.confidence}


def _usage(turn: Turn) -> dict[str, int]:
    return {"input_tokens": turn.input_tokens, "output_tokens": 0}


def _render_system_one(turn: Turn) -> Json:
    answers = {a.id: _noul(a) for a in turn.answers if not a.refused}
    return {"model": turn.model, "answers": answers, "usage": _usage(turn)}


def _render_laya(turn: Turn) -> Json:
    top = {"model": turn.body.get("model", "auto")}
    return _render_system_one(turn) | top | {"routing": {"model": turn.model, "reason": "default"}}


def _render_clef(turn: Turn) -> Json:
    return {"result": _render_system_one(turn), "success": True, "errors": [], "messages": []}


def _render_gateway(turn: Turn) -> Json:
    kept = [a for a in turn.answers if not a.refused]
    answers = {
        a.id: {k: v for k, v in _noul(a, "boolean").items() if k != "confidence"} for a in kept
    }
    confidence = {a.id: a.confidence for a in kept}
    return {
        "answers": answers,
        "usage": {"inputTokens": turn.input_tokens, "outputTokens": 0},
        "providerMetadata": {"typesafe": {"confidence": confidence}},
    }


def _choice_values(asked: Asked) -> dict[str, Json]:
    return {str(c["value"]): c["value"] for c in asked.raw.get("choices", [])}


def _predicate(answer: Decided, asked: Asked) -> Json:
    named = {"name": answer.id} if "name" in asked.raw or answer.id != asked.id else {}
    if answer.refused:
        return named | {"type": "refusal"}
    if answer.kind == "boolean":
        return named | {"type": "predicate", "probability": answer.probability}
    if answer.kind == "choice":
        values = _choice_values(asked)
        choice = {"type": "choice", "choice": values.get(answer.choice or "", answer.choice)}
        probs = [
            {"value": values.get(k, k), "probability": p} for k, p in answer.probabilities.items()
        ]
    else:
        choice = {"type": "score", "score": answer.score}
        probs = [
            {"value": int(k), "label": answer.legend.get(k, k), "probability": p}
            for k, p in answer.probabilities.items()
        ]
    return named | choice | {"confidence": answer.confidence, "probabilities": probs}


def _render_openai(turn: Turn) -> Json:
    by_id = {q.id: q for q in turn.asked}
    # Positional: answers keep the questions' order (after drop/rename faults, what is left).
    pairs = zip(
        turn.answers,
        [by_id.get(a.id, turn.asked[i]) for i, a in enumerate(turn.answers)],
        strict=True,
    )
    n = turn.input_tokens
    return {
        "model": turn.model,
        "answers": [_predicate(answer, asked) for answer, asked in pairs],
        "usage": {
            "input_tokens": n,
            "output_tokens": 0,
            "total_tokens": n,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _render_classify(turn: Turn) -> Json:
    answer = next((a for a in turn.answers if a.kind == "choice" and not a.refused), None)
    if answer is None:
        return {"top_label": None, "scores": {}, "labels": [], "ocr_text": None}
    rubrics = {str(x.get("name")): x.get("rubric") for x in turn.body["labels"]}
    labels = [
        {"label": k, "score": p, "rubric": rubrics.get(k)} for k, p in answer.probabilities.items()
    ]
    return {
        "top_label": answer.choice,
        "scores": dict(answer.probabilities),
        "labels": labels,
        "ocr_text": None,
    }


def logprob_rows(probability: Json, limit: int = 20) -> list[dict[str, Json]]:
    """``top_logprobs`` rows ("Yes", " yes", "No", "Maybe") whose normalised P(yes) is ``probability``.

    A corrupted probability (not a number in [0, 1]) is sent as the first row's logprob.
    """
    bad = not isinstance(probability, float | int) or not 0.0 <= probability <= 1.0
    p = 0.9 if bad else float(probability)
    keep = 0.99  # 1% goes to "Maybe", which counts for neither label
    mass = [
        ("Yes", 0.8 * p * keep),
        (" yes", 0.2 * p * keep),
        ("No", (1 - p) * keep),
        ("Maybe", 0.01),
    ]
    ranked = sorted(((t, m) for t, m in mass if m > 0), key=lambda tm: -tm[1])
    rows: list[dict[str, Json]] = [
        {"token": t, "logprob": math.log(m), "bytes": list(t.encode())} for t, m in ranked
    ]
    if bad:
        rows[0]["logprob"] = probability
    return rows[:limit]


def _chat_id(rid: uuid.UUID) -> str:
    return f"chatcmpl-{rid.hex[:24]}"


def _render_chat(turn: Turn) -> Json:
    body = turn.body
    logprobs: Json = None
    content = turn.text
    if body.get("logprobs"):
        answer = turn.answers[0] if turn.answers and not turn.answers[0].refused else None
        rows = logprob_rows(answer.probability if answer else 0.0, 20)
        if answer is None:  # dropped or refused: neither label among the top tokens
            rows = [r for r in rows if r["token"].strip().lower() not in {"yes", "no"}]
        top = rows[0]  # "Maybe" always survives
        limit = int(body.get("top_logprobs", 0))
        logprobs = {"content": [top | {"top_logprobs": rows[:limit]}]}
        content = str(top["token"])
    output = 1 if logprobs else max(1, len(content) // 4)
    return {
        "id": _chat_id(turn.rid),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": logprobs,
                "finish_reason": "length" if logprobs else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": turn.input_tokens,
            "completion_tokens": output,
            "total_tokens": turn.input_tokens + output,
        },
    }


def _render_anthropic(turn: Turn) -> Json:
    return {
        "id": f"msg_{turn.rid.hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": turn.body.get("model"),
        "content": [{"type": "text", "text": turn.text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": turn.input_tokens, "output_tokens": max(1, len(turn.text) // 4)},
    }


# --------------------------------------------------------------------------- error envelopes

#: Default messages by status, used when a fault names no message.
MESSAGES = {
    400: "Bad request",
    401: "Invalid API key",
    402: "Payment required",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    413: "Request too large",
    422: "Unprocessable entity",
    429: "Rate limit exceeded",
    500: "Internal server error",
    502: "Bad gateway",
    503: "Service unavailable",
    504: "Gateway timeout",
    529: "Overloaded",
}

#: (status, message or None for the default, vendor code, request id) → error body.
Envelope: TypeAlias = Callable[[int, str | None, int | str | None, uuid.UUID], Json]


def _msg(status: int, message: str | None) -> str:
    return message if message is not None else MESSAGES.get(status, f"HTTP {status}")


_TYPESAFE_TYPES = {
    401: "invalid_api_key",
    403: "forbidden",
    429: "rate_limit_exceeded",
    529: "overloaded",
}


def _typesafe_error(
    status: int, message: str | None, code: int | str | None, _rid: uuid.UUID
) -> Json:
    if status == 413 or code == "max_tokens_exceeded":
        return {"detail": {"error_type": "max_tokens_exceeded"}}  # no message, by design
    error_type = code or _TYPESAFE_TYPES.get(
        status, "server_error" if status >= 500 else "bad_request"
    )
    return {"detail": {"error_type": error_type, "message": _msg(status, message)}}


_GATEWAY_TYPES = {
    401: "authentication_error",
    403: "customer_verification_required",
    429: "rate_limit_exceeded",
    500: "internal_server_error",
    503: "service_unavailable",
    529: "overloaded_error",
}


def _gateway_error(
    status: int, message: str | None, code: int | str | None, _rid: uuid.UUID
) -> Json:
    error_type = _GATEWAY_TYPES.get(status, "invalid_request_error")
    return {
        "error": {"message": _msg(status, message), "type": error_type, "code": code or error_type}
    }


def _litellm(status: int, message: str | None) -> Json:
    return {
        "error": {
            "message": _msg(status, message),
            "type": "None",
            "param": "None",
            "code": str(status),
        }
    }


def _laya_error(status: int, message: str | None, _code: int | str | None, _rid: uuid.UUID) -> Json:
    # The LiteLLM proxy answers auth and rate limits; the FastAPI app answers the rest.
    if status in {401, 429}:
        return _litellm(status, message)
    return {"detail": _msg(status, message)}


def _xor_error(status: int, message: str | None, _code: int | str | None, _rid: uuid.UUID) -> Json:
    if status in {401, 402, 403, 429}:
        return {"error": {"message": _msg(status, message)}}  # LiteLLM
    if status == 503:
        return {"detail": _msg(status, message)}  # FastAPI
    return {"error": _msg(status, message)}  # XOR's own


_OPENAI_TYPES = {
    401: "invalid_request_error",
    403: "permission_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
    529: "overloaded_error",
}


_PERPLEXITY_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


def _openai_style(types: Mapping[int, str]) -> Envelope:
    """``{"error": {"message", "type", "param", "code"}}`` with ``type`` by status."""

    def envelope(status: int, message: str | None, code: int | str | None, _rid: uuid.UUID) -> Json:
        error_type = types.get(status, "invalid_request_error")
        return {
            "error": {
                "message": _msg(status, message),
                "type": error_type,
                "param": None,
                "code": code,
            }
        }

    return envelope


_openai_error = _openai_style(_OPENAI_TYPES)
_perplexity_error = _openai_style(_PERPLEXITY_TYPES)


def _clef_error(status: int, message: str | None, code: int | str | None, rid: uuid.UUID) -> Json:
    code = (
        code
        if code is not None
        else _CLEF_DEFAULT_CODE.get(status, 3043 if status >= 500 else 5006)
    )
    if message is None and code == 5021:
        message = (
            "AiError: The estimated number of input tokens (17210) exceeds this model's"
            f" context window limit (16000). ({rid})"
        )
    text = message if message is not None else _CLEF_MESSAGES.get(int(code), _msg(status, None))
    return {
        "success": False,
        "errors": [{"code": code, "message": text}],
        "messages": [],
        "result": None,
    }


def _scaledown_error(
    status: int, message: str | None, _code: int | str | None, _rid: uuid.UUID
) -> Json:
    return {"detail": _msg(status, message)}


_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _anthropic_error(
    status: int, message: str | None, code: int | str | None, rid: uuid.UUID
) -> Json:
    error_type = code or _ANTHROPIC_TYPES.get(status, "api_error")
    return {
        "type": "error",
        "error": {"type": error_type, "message": _msg(status, message)},
        "request_id": f"req_{rid.hex[:24]}",
    }


# Rejections of a body that does not parse: (problem, request id) → (status, body).
Reject: TypeAlias = Callable[[Problem, uuid.UUID], tuple[int, Json]]


def _fastapi_reject(problem: Problem, _rid: uuid.UUID) -> tuple[int, Json]:
    entry = {
        "type": problem.type,
        "loc": ["body", *problem.loc],
        "msg": problem.msg,
        "input": problem.input,
    }
    return 422, {"detail": [entry]}


def _openai_reject(problem: Problem, _rid: uuid.UUID) -> tuple[int, Json]:
    param = dotted(problem.loc) or None
    message = f"Invalid value for '{param}': {problem.msg}" if param else problem.msg
    error = {
        "message": message,
        "type": "invalid_request_error",
        "param": param,
        "code": "invalid_value",
    }
    return 400, {"error": error}


def _gateway_reject(problem: Problem, rid: uuid.UUID) -> tuple[int, Json]:
    param = dotted(problem.loc)
    return 400, _gateway_error(400, f"{param}: {problem.msg}" if param else problem.msg, None, rid)


def _clef_reject(problem: Problem, rid: uuid.UUID) -> tuple[int, Json]:
    nested = {
        "error": {
            "message": "Invalid input",
            "details": {"fieldErrors": {dotted(problem.loc): [problem.msg]}},
        }
    }
    message = f"AiError: {json.dumps(nested, separators=(',', ':'))} ({rid})"
    return 400, _clef_error(400, message, 5006, rid)


def _anthropic_reject(problem: Problem, rid: uuid.UUID) -> tuple[int, Json]:
    return 400, _anthropic_error(400, f"{dotted(problem.loc)}: {problem.msg}", None, rid)


# --------------------------------------------------------------------------- auth and headers


def _litellm_auth_message(received: str) -> str:
    digest = hashlib.sha256(received.encode()).hexdigest()
    return (
        "Authentication Error, Invalid proxy server token passed."
        f" Received API Key = {received}, Key Hash (Token) ={digest}"
    )


def _openai_auth_message(received: str) -> str:
    if not received:
        return "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
    masked = received[:3] + "*" * max(0, len(received) - 7) + received[-4:]
    return f"Incorrect API key provided: {masked}. You can find your API key at https://platform.openai.com/account/api-keys."


@dataclass(frozen=True)
class Auth:
    """How a vendor reads the key, and what it answers when the key is missing or wrong."""

    header: str = "authorization"
    prefix: str = "Bearer "
    missing_status: int = 401
    #: Exact body for a missing key (TypeSafe: FastAPI HTTPBearer's 403).
    missing_body: Json = None
    #: The message of a 401, from the key received ("" when missing).
    message: Callable[[str], str] | None = None


def _typesafe_ids(rid: uuid.UUID, elapsed_ms: int) -> dict[str, str]:
    return {
        "x-typesafe-request-id": f"req_{rid.hex[:26].upper()}",
        "x-envoy-upstream-service-time": str(elapsed_ms),
    }


def _header_ids(
    name: str, fmt: Callable[[uuid.UUID], str] = str
) -> Callable[[uuid.UUID, int], dict[str, str]]:
    return lambda rid, _ms: {name: fmt(rid)}


def _clef_ids(rid: uuid.UUID, _ms: int) -> dict[str, str]:
    return {"cf-ai-req-id": str(rid), "cf-ray": f"{rid.hex[:16]}-AMS"}


def _gateway_headers(headers: Mapping[str, str]) -> Problem | None:
    if headers.get("ai-gateway-protocol-version") != "0.0.1":
        return Problem((), "Unsupported gateway protocol version")
    return None


def _anthropic_headers(headers: Mapping[str, str]) -> Problem | None:
    if "anthropic-version" not in headers:
        return Problem(("anthropic-version",), "header is required")
    return None


def _no_header_check(_headers: Mapping[str, str]) -> Problem | None:
    return None


def _model(
    table: Mapping[str, str], default: str | None
) -> Callable[[Json, Mapping[str, str]], str | None]:
    """Resolve the reported model: the table's entry for the requested model, else it echoed."""

    def resolve(body: Json, _params: Mapping[str, str]) -> str | None:
        requested = body.get("model") if isinstance(body, dict) else None
        return table.get(requested or "", requested or default)

    return resolve


def _laya_model(body: Json, _params: Mapping[str, str]) -> str:
    return f"{body.get('model') or 'typed-decisions'}-2026-09-30"


def _clef_model(_body: Json, params: Mapping[str, str]) -> str | None:
    return params.get("model")


# --------------------------------------------------------------------------- the vendor table


@dataclass(frozen=True)
class VendorSpec:
    """One vendor's wire behaviour: everything the shared handler varies on."""

    name: str
    path: re.Pattern[str]
    parse: Parser
    render: Callable[[Turn], Json]
    error: Envelope
    reject: Reject
    ids: Callable[[uuid.UUID, int], dict[str, str]]
    resolve_model: Callable[[Json, Mapping[str, str]], str | None]
    auth: Auth = Auth()
    check_headers: Callable[[Mapping[str, str]], Problem | None] = _no_header_check


_NOUL = question_map_parser("noul")
_LITELLM_AUTH = Auth(message=_litellm_auth_message)

VENDORS: dict[str, VendorSpec] = {
    spec.name: spec
    for spec in (
        VendorSpec(
            "typesafe",
            re.compile(r"/v1/systemone"),
            _NOUL,
            _render_system_one,
            _typesafe_error,
            _fastapi_reject,
            _typesafe_ids,
            _model({"jev-latest": "jev-1.13.0", "": "jev-1.13.0"}, "jev-1.13.0"),
            Auth(missing_status=403, missing_body={"detail": "Not authenticated"}),
        ),
        VendorSpec(
            "typesafe_gateway",
            re.compile(r"/v4/ai/evaluation-model"),
            question_map_parser("boolean"),
            _render_gateway,
            _gateway_error,
            _gateway_reject,
            _header_ids("x-vercel-id", lambda rid: f"fra1::{rid.hex[:20]}"),
            lambda _body, _params: None,
            check_headers=_gateway_headers,
        ),
        VendorSpec(
            "laya",
            re.compile(r"/predict"),
            _NOUL,
            _render_laya,
            _laya_error,
            _fastapi_reject,
            _header_ids("x-litellm-call-id"),
            _laya_model,
            _LITELLM_AUTH,
        ),
        VendorSpec(
            "xor",
            re.compile(r"/v1/systemone"),
            _NOUL,
            _render_system_one,
            _xor_error,
            _fastapi_reject,
            _header_ids("x-request-id"),
            _model({}, "xor-1.1"),
            _LITELLM_AUTH,
        ),
        VendorSpec(
            "perplexity",
            re.compile(r"/v1/decisions"),
            question_map_parser("noul", _perplexity_check),
            _render_system_one,
            _perplexity_error,
            _openai_reject,
            _header_ids("x-request-id"),
            _model({}, None),
        ),
        VendorSpec(
            "clef",
            re.compile(
                r"/accounts/(?P<account>[A-Za-z0-9_-]{1,64})/ai/run/@cf/cloudflare/(?P<model>clef|clef-flash)"
            ),
            question_map_parser("noul", _clef_check),
            _render_clef,
            _clef_error,
            _clef_reject,
            _clef_ids,
            _clef_model,
        ),
        VendorSpec(
            "openai_decisions",
            re.compile(r"/v1/decisions"),
            _parse_openai,
            _render_openai,
            _openai_error,
            _openai_reject,
            _header_ids("x-request-id", lambda rid: f"req_{rid.hex}"),
            _model({"gpt-6-luna": "gpt-6-luna-2026-09-15"}, None),
            Auth(message=_openai_auth_message),
        ),
        VendorSpec(
            "scaledown",
            re.compile(r"(?:/v1)?/classify"),
            _parse_classify,
            _render_classify,
            _scaledown_error,
            _fastapi_reject,
            lambda _rid, _ms: {},
            lambda _body, _params: None,
            Auth(header="x-api-key", prefix=""),
        ),
        VendorSpec(
            "logprob",
            re.compile(r"/v1/chat/completions"),
            _parse_chat,
            _render_chat,
            _openai_error,
            _openai_reject,
            _header_ids("x-request-id", _chat_id),
            _model({}, None),
            Auth(message=_openai_auth_message),
        ),
        VendorSpec(
            "anthropic",
            re.compile(r"/v1/messages"),
            _parse_anthropic,
            _render_anthropic,
            _anthropic_error,
            _anthropic_reject,
            _header_ids("request-id", lambda rid: f"req_{rid.hex[:24]}"),
            _model({}, None),
            Auth(header="x-api-key", prefix="", message=lambda _key: "invalid x-api-key"),
            _anthropic_headers,
        ),
    )
}

#: Routes every server answers besides its own vendor's (the vendor's path wins).
EXTRA_ROUTES = ("logprob", "anthropic", "scaledown")


# --------------------------------------------------------------------------- responses


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    headers: Mapping[str, str]
    #: Sent exactly as is (golden replies): no request-id headers are added.
    verbatim: bool = False


def _json_response(status: int, body: Json, headers: Mapping[str, str]) -> Response:
    # allow_nan: a NaN fault must reach the wire as the bare token NaN.
    data = json.dumps(body, allow_nan=True).encode()
    return Response(status, data, {"content-type": "application/json"} | dict(headers))


def _fault_response(
    spec: VendorSpec, fault: Fault, ids: Mapping[str, str], rid: uuid.UUID
) -> Response:
    headers = dict(ids)
    if (value := retry_after_value(fault)) is not None:
        headers["retry-after"] = value
    if fault.retry_after_ms is not None:
        headers["retry-after-ms"] = str(int(fault.retry_after_ms))
    headers |= dict(fault.headers)
    if fault.kind == "html":
        page = HTML_504.format(status=fault.status).encode()
        return Response(fault.status, page, {"content-type": "text/html"} | headers)
    if fault.kind == "garbage":
        return Response(200, bytes(fault.body), {"content-type": "application/json"} | headers)
    if isinstance(fault.body, str | bytes):
        raw = fault.body.encode() if isinstance(fault.body, str) else fault.body
        return Response(fault.status, raw, {"content-type": "text/html"} | headers)
    body = (
        fault.body
        if fault.body is not None
        else spec.error(fault.status, fault.message, fault.code, rid)
    )
    return _json_response(fault.status, body, headers)


def _auth_failure(
    spec: VendorSpec, headers: Mapping[str, str], key: str, rid: uuid.UUID
) -> Response | None:
    auth = spec.auth
    received = headers.get(auth.header)
    if received == auth.prefix + key:
        return None
    if received is None and auth.missing_body is not None:
        return _json_response(auth.missing_status, auth.missing_body, {})
    status = auth.missing_status if received is None else 401
    token = (received or "").removeprefix(auth.prefix)
    message = auth.message(token) if auth.message else None
    return _json_response(status, spec.error(status, message, None, rid), {})


class Received(NamedTuple):
    """One request as received: path, headers (lower-case names) and JSON body.

    A body that is not JSON is kept as its text.
    """

    path: str
    headers: dict[str, str]
    body: Json


_NOT_JSON = object()


def _decode(raw: bytes) -> Json:
    try:
        return json.loads(raw)
    except ValueError:
        return _NOT_JSON


def _estimate_tokens(body: Json) -> int:
    return max(1, len(json.dumps(body)) // 4)


# --------------------------------------------------------------------------- the server


def no_delay(_index: int) -> float:
    return 0.0


def cycle_delays(delays: Sequence[float]) -> Callable[[int], float]:
    """A ``delay_for`` hook that replays ``delays`` by request index, cyclically."""
    fixed = tuple(delays)
    return (lambda index: fixed[index % len(fixed)]) if fixed else no_delay


def heavy_tailed_schedule(
    seed: int, n: int, median: float = 0.4, tail_fraction: float = 0.05, tail: float = 2.0
) -> list[float]:
    """``n`` per-request delays in seconds, reproducible from ``seed``.

    The body is log-normal around ``median`` (σ = 0.25, so about ±30%). Exactly
    ``round(n * tail_fraction)`` requests, at seeded positions, take between
    ``tail`` and ``1.35 * tail`` seconds, like TypeSafe's 2.0–2.7 s cold starts.
    """
    if n < 0 or median <= 0 or tail <= 0 or not 0.0 <= tail_fraction <= 1.0:
        raise ValueError(
            f"bad schedule: n={n} median={median} tail_fraction={tail_fraction} tail={tail}"
        )
    rng = random.Random(seed)
    delays = [median * math.exp(rng.gauss(0.0, 0.25)) for _ in range(n)]
    for index in rng.sample(range(n), k=round(n * tail_fraction)):
        delays[index] = tail * rng.uniform(1.0, 1.35)
    return delays


class VendorServer(LoopbackServer):
    """A loopback server for one vendor; build it with :func:`serve_vendor`.

    Settable attributes (read by handler threads on each request):

    - ``answer``: ``(question_id, Asked) -> AnswerValue``; see :data:`AnswerValue`.
      Also gives P(yes) on ``/v1/chat/completions`` with ``logprobs`` (question id ``chat``).
    - ``completion_text``: the text of chat completions without logprobs and of
      ``/v1/messages``; a string, or a function of the request body.
    - ``model``: the model to report instead of the vendor's resolution.
    - ``delay_for``: ``request_index -> seconds`` to wait before each reply.
    - ``fault``: see :class:`Fault`.
    """

    # Benchmarks open many connections at once; the default backlog of 5 drops SYNs (1 s stalls).
    request_queue_size = 256

    def __init__(
        self, vendor: str, *, api_key: str = KEY, golden: bool = False, account_id: str = "acc123"
    ) -> None:
        if vendor not in VENDORS:
            raise ValueError(f"unknown vendor {vendor!r}; expected one of {sorted(VENDORS)}")
        super().__init__(_Handler)
        self.vendor = vendor
        self.spec = VENDORS[vendor]
        self.api_key = api_key
        self.account_id = account_id
        self.golden: dict[str, Json] | None = load_fixture(vendor) if golden else None
        self.answer: Answerer = default_answer
        self.completion_text: str | Callable[[Json], str] = "{}"
        self.model: str | None = None
        self.delay_for: Callable[[int], float] = no_delay
        self.requests: list[Received] = []
        #: Set on shutdown: every waiting handler wakes and sends nothing more.
        self.stopping = self.release
        self._lock = threading.Lock()
        self._fault_always: Fault | None = None
        self._fault_script: deque[Fault | None] = deque()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``, without a path; vendor paths go after it."""
        return self.root

    def url(self, path: str) -> str:
        return self.base_url + path

    @property
    def fault(self) -> Fault | Sequence[Fault | None] | None:
        with self._lock:
            return list(self._fault_script) if self._fault_script else self._fault_always

    @fault.setter
    def fault(self, value: Fault | Sequence[Fault | None] | None) -> None:
        with self._lock:
            if value is None or isinstance(value, Fault):
                self._fault_always, self._fault_script = value, deque()
            else:
                self._fault_always, self._fault_script = None, deque(value)

    def admit(self, received: Received) -> tuple[int, Fault | None]:
        """Record a request; its index and the fault that applies to it."""
        with self._lock:
            self.requests.append(received)
            fault = self._fault_script.popleft() if self._fault_script else self._fault_always
            return len(self.requests) - 1, fault

    def route(self, path: str) -> tuple[VendorSpec, dict[str, str]] | None:
        path = path.split("?", 1)[0]
        for name in (self.vendor, *EXTRA_ROUTES):
            spec = VENDORS[name]
            if match := spec.path.fullmatch(path):
                return spec, match.groupdict()
        return None

    def wait(self, seconds: float | None) -> bool:
        """Sleep up to ``seconds`` (``None``: until stopped); ``False`` if the server is stopping."""
        if seconds is not None and seconds <= 0:
            return not self.stopping.is_set()
        return not self.stopping.wait(seconds)

    def stop(self) -> None:
        """Release waiting handlers, stop serving and close the listening socket."""
        self.stopping.set()
        self.shutdown()
        self.server_close()

    # -- the pure part: request in, response out --------------------------------

    def respond(
        self,
        path: str,
        headers: Mapping[str, str],
        body: Json,
        fault: Fault | None,
        started: float | None = None,
    ) -> Response:
        """The response to one request; ``started`` (monotonic) dates the upstream time."""
        rid = uuid.uuid4()
        started = time.monotonic() if started is None else started
        routed = self.route(path)
        if routed is None:
            return _json_response(404, self.spec.error(404, None, None, rid), {})
        spec, params = routed
        ids = spec.ids(rid, 0)
        if fault is not None and fault.kind in {"error", "html", "garbage"}:
            return _fault_response(spec, fault, ids, rid)
        response = self._checked(spec, params, path, headers, body, rid)
        if response is None:
            response = self._answered(spec, params, body, fault, rid)
        if response.verbatim:
            return response
        elapsed_ms = round((time.monotonic() - started) * 1000)
        return replace(response, headers=dict(response.headers) | spec.ids(rid, elapsed_ms))

    def _checked(
        self,
        spec: VendorSpec,
        params: Mapping[str, str],
        path: str,
        headers: Mapping[str, str],
        body: Json,
        rid: uuid.UUID,
    ) -> Response | None:
        """The response to a request that fails auth or validation, or a golden reply."""
        if failed := _auth_failure(spec, headers, self.api_key, rid):
            return failed
        if params.get("account", self.account_id) != self.account_id:
            return _json_response(403, spec.error(403, None, None, rid), {})
        if problem := spec.check_headers(headers):
            return _json_response(*spec.reject(problem, rid), {})
        if body is _NOT_JSON:
            return _json_response(
                *spec.reject(Problem((), "JSON decode error", "json_invalid"), rid), {}
            )
        golden = self.golden
        if golden and path == golden["path"] and golden["request"] in (None, body):
            reply = _json_response(200, golden["response"], golden["response_headers"])
            return replace(reply, verbatim=True)
        return None

    def _answered(
        self,
        spec: VendorSpec,
        params: Mapping[str, str],
        body: Json,
        fault: Fault | None,
        rid: uuid.UUID,
    ) -> Response:
        asked = spec.parse(body, params)
        if isinstance(asked, Problem):
            return _json_response(*spec.reject(asked, rid), {})
        answers = apply_answer_fault([decide(q, self.answer(q.id, q)) for q in asked], fault)
        text = self.completion_text
        turn = Turn(
            body=body,
            asked=asked,
            answers=answers,
            model=self.model or spec.resolve_model(body, params),
            input_tokens=_estimate_tokens(body),
            rid=rid,
            text=text(body) if callable(text) else text,
        )
        return _json_response(200, spec.render(turn), {})


_REASONS = {529: "Site Overloaded"}


class _Handler(BaseHTTPRequestHandler):
    server: VendorServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, delayed ACKs add ~40 ms each.
    disable_nagle_algorithm = True
    # Idle keep-alive connections are dropped after this long, so no thread lingers.
    timeout = 10.0

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        error = self.server.spec.error(405, None, None, uuid.uuid4())
        self._send(_json_response(405, error, {}))

    def do_POST(self) -> None:
        started = time.monotonic()
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        body = _decode(raw)
        recorded = raw.decode("utf-8", "replace") if body is _NOT_JSON else body
        index, fault = self.server.admit(Received(self.path, headers, recorded))
        kind = fault.kind if fault else None
        delay: float | None = None if kind == "hang" else self.server.delay_for(index)
        if delay is not None and fault and kind == "slow":
            delay += fault.seconds
        if not self.server.wait(delay) or kind == "close":
            self.close_connection = True  # released by shutdown, or told to: no reply
            return
        response = self.server.respond(self.path, headers, body, fault, started)
        self._send(response, truncate=kind == "truncate")

    def _send(self, response: Response, *, truncate: bool = False) -> None:
        self.send_response(response.status, _REASONS.get(response.status))
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        if truncate or self.server.stopping.is_set():
            self.close_connection = True
        self.end_headers()
        self.wfile.write(response.body[: len(response.body) // 2] if truncate else response.body)


@contextmanager
def serve_vendor(
    vendor: str, *, api_key: str = KEY, golden: bool = False, account_id: str = "acc123"
) -> Iterator[VendorServer]:
    """Serve ``vendor`` on ``127.0.0.1:<free port>`` for the ``with`` block.

    Args:
        vendor: a key of :data:`VENDORS` (the fixture names, plus ``anthropic``).
        api_key: the only key accepted; ``KEY`` matches the fixtures' headers.
        golden: answer the fixture's request with the fixture's response.
        account_id: the Cloudflare account the Clef path must name.

    Resource handling:
        On exit, waiting handlers are released, the accept loop stops and the
        listening socket is closed; this takes well under a second.
    """
    server = VendorServer(vendor, api_key=api_key, golden=golden, account_id=account_id)
    with serving(server, name=f"loopback-{vendor}", join_s=2.0):
        yield server

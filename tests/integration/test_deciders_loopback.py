"""Every HTTP decider against the loopback vendor server, fed by the same golden fixtures.

One fixture (``tests/fixtures/decisions/<vendor>.json``) drives both sides: the
decider is asked the fixture's questions and the golden server answers the
fixture's request with the fixture's response. The encoder is right when the
server received exactly the fixture's ``request``; the decoder is right when the
result equals the fixture's ``expected``; the error mapping is right when each of
the fixture's ``errors`` comes back with its kind, retryability and message.

Faults (timeouts, retries, malformed answers, …) are in
``test_deciders_loopback_faults.py``; the helpers there are imported from here.
"""

from __future__ import annotations

import base64
import math
import secrets
import struct
import zlib
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeAlias

import attrs
import httpx
import pytest
from loopback.decision_vendors import (
    FIXTURE_VENDORS,
    AnswerValue,
    Asked,
    Fault,
    VendorServer,
    fixture_headers,
    load_fixture,
    serve_vendor,
)

from toolroute import DecisionError, Outcome, RoutingConfig, Server, route_servers, try_decide
from toolroute.decisions import (
    BooleanAnswer,
    BooleanQuestion,
    ChoiceAnswer,
    ChoiceQuestion,
    DecisionRequest,
    DecisionResult,
    ScoreAnswer,
    ScoreQuestion,
)
from toolroute.providers import (
    ClefDecider,
    HttpDecider,
    LayaDecider,
    LogprobDecider,
    OpenAIDecisionsDecider,
    PerplexityDecider,
    RetryPolicy,
    ScaleDownDecider,
    TypeSafeDecider,
    XorDecider,
)

#: The key every decider sends and every server accepts; generated, so a leak is unmistakable.
# No generic credential shape (not sk-..., no long hex run): only configured-key
# redaction can hide it, so a leak shows up in these tests.
API_KEY = "tr." + secrets.token_urlsafe(24)
#: The System One family: a question map in, an answer map out.
MAP_VENDORS = ("typesafe", "typesafe_gateway", "laya", "xor", "perplexity", "clef")
#: No retries: a retryable fault is seen exactly once.
NO_RETRY = RetryPolicy(retries=0)
#: One quick retry, without jitter.
FAST_RETRY = RetryPolicy(retries=1, backoff_s=0.05, max_backoff_s=0.05, jitter=0.0)

Question: TypeAlias = BooleanQuestion | ChoiceQuestion | ScoreQuestion
Answer: TypeAlias = BooleanAnswer | ChoiceAnswer | ScoreAnswer


# --------------------------------------------------------------------------- helpers


def build(vendor: str, server: VendorServer, **kwargs: Any) -> HttpDecider:
    """The decider for ``vendor``, pointed at ``server`` with the server's key."""
    key = kwargs.pop("api_key", server.api_key)
    # httpx's own network transport, as the decider would build it, but without loading the
    # CA bundle (~30 ms a decider): every server here is plain http on 127.0.0.1.
    kwargs.setdefault("transport", httpx.AsyncHTTPTransport(verify=False))
    base = server.base_url
    if vendor == "typesafe":
        return TypeSafeDecider(api_key=key, base_url=base, **kwargs)
    if vendor == "typesafe_gateway":
        path = load_fixture(vendor)["path"]
        return TypeSafeDecider(
            gateway_api_key=key, route="gateway", base_url=server.url(path), **kwargs
        )
    if vendor == "laya":
        return LayaDecider(api_key=key, base_url=base, **kwargs)
    if vendor == "xor":
        return XorDecider(api_key=key, base_url=base, **kwargs)
    if vendor == "perplexity":
        return PerplexityDecider(api_key=key, base_url=base, **kwargs)
    if vendor == "clef":
        # The loopback path has no /client/v4 prefix.
        return ClefDecider(account_id=server.account_id, api_key=key, base_url=base, **kwargs)
    if vendor == "openai_decisions":
        return OpenAIDecisionsDecider(api_key=key, base_url=base, **kwargs)
    if vendor == "scaledown":
        return ScaleDownDecider(api_key=key, base_url=base, **kwargs)
    if vendor == "logprob":
        model = load_fixture(vendor)["response"]["model"]
        return LogprobDecider(model=model, api_key=key, base_url=server.url("/v1"), **kwargs)
    raise AssertionError(f"no decider for {vendor!r}")


@asynccontextmanager
async def opened(vendor: str, server: VendorServer, **kwargs: Any) -> AsyncIterator[HttpDecider]:
    decider = build(vendor, server, **kwargs)
    try:
        yield decider
    finally:
        await decider.aclose()


async def failure(decider: HttpDecider, request: DecisionRequest) -> DecisionError:
    """The :class:`DecisionError` that ``decide`` raises (and nothing else)."""
    with pytest.raises(DecisionError) as info:
        await decider.decide(request)
    return info.value


def map_question(raw: Mapping[str, Any]) -> Question:
    """A System One wire question (``noul``/``boolean``, ``choice``, ``score``) as a question."""
    criteria = raw.get("criteria")
    if raw["type"] in ("noul", "boolean"):
        criteria = criteria or {}
        return BooleanQuestion(
            raw["instructions"], true=criteria.get("true"), false=criteria.get("false")
        )
    if raw["type"] == "choice":
        return ChoiceQuestion(raw["instructions"], criteria)
    assert raw["type"] == "score", raw
    return ScoreQuestion(raw["instructions"], criteria)


def openai_question(raw: Mapping[str, Any]) -> Question:
    """An OpenAI Decisions wire question as a question (criteria unfolded from the text)."""
    if raw["type"] == "predicate":
        first, *lines = raw["instructions"].split("\n")
        criteria = dict(line.split(" means: ", 1) for line in lines)
        return BooleanQuestion(first, true=criteria.get("True"), false=criteria.get("False"))
    if raw["type"] == "choice":
        return ChoiceQuestion(
            raw["instructions"], {c["value"]: c.get("description") for c in raw["choices"]}
        )
    assert raw["type"] == "score", raw
    return ScoreQuestion(raw["instructions"], [level["label"] for level in raw["levels"]])


def fixture_request(vendor: str, **kwargs: Any) -> DecisionRequest:
    """The request whose encoding is the fixture's ``request``."""
    fixture = load_fixture(vendor)
    body = fixture["request"]
    if vendor in MAP_VENDORS:
        questions = {k: map_question(q) for k, q in body["questions"].items()}
        return DecisionRequest(state=body["state"], questions=questions, **kwargs)
    if vendor == "openai_decisions":
        questions = {q["name"]: openai_question(q) for q in body["questions"]}
        return DecisionRequest(state=body["input"], questions=questions, **kwargs)
    reference = load_fixture("typesafe")["request"]
    (key,) = fixture["expected"]["answers"]
    if vendor == "scaledown":
        # The fixture holds the labels only; the instructions are the reference question's.
        options = {
            label["name"]: None if label["rubric"] == label["name"] else label["rubric"]
            for label in body["labels"]
        }
        question = ChoiceQuestion(reference["questions"][key]["instructions"], options)
        return DecisionRequest(state=body["text"], questions={key: question}, **kwargs)
    assert vendor == "logprob"  # no request on record: the reference ticket's boolean
    question = map_question(reference["questions"][key])
    return DecisionRequest(state=reference["state"], questions={key: question}, **kwargs)


def answer_json(answer: Answer) -> dict[str, Any]:
    """An answer in the fixtures' ``expected`` vocabulary."""
    if isinstance(answer, BooleanAnswer):
        return {"type": "boolean", "probability": answer.probability}
    if isinstance(answer, ChoiceAnswer):
        return {
            "type": "choice",
            "choice": answer.choice,
            "probabilities": dict(answer.probabilities),
            "confidence": answer.confidence,
        }
    return {
        "type": "score",
        "score": answer.score,
        "legend": dict(answer.legend),
        "probabilities": dict(answer.probabilities),
        "confidence": answer.confidence,
    }


def assert_close(actual: Any, expected: Any, where: str = "") -> None:
    """Equal JSON, numbers within 1e-9."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), where
        assert actual.keys() == expected.keys(), where
        for key, value in expected.items():
            assert_close(actual[key], value, f"{where}.{key}")
    elif isinstance(expected, float | int) and not isinstance(expected, bool):
        assert isinstance(actual, float | int), where
        assert math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-12), (where, actual)
    else:
        assert actual == expected, where


def assert_expected(result: DecisionResult, expected: Mapping[str, Any]) -> None:
    answers = {k: answer_json(a) for k, a in result.answers.items()}
    assert_close(answers, expected["answers"], "answers")
    assert list(result.answers) == list(expected["answers"])  # question order kept
    for key in expected.get("refused", []):
        assert key not in result.answers
    assert result.model == expected["model"]
    assert_close(attrs.asdict(result.usage), expected["usage"], "usage")
    assert result.request_id == expected["request_id"]
    assert result.upstream_ms == expected["upstream_ms"]


def tiny_png(width: int = 2, height: int = 2) -> bytes:
    """A valid RGB PNG of ``width``×``height`` red pixels."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(tag + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def png_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


# --------------------------------------------------------------------------- golden round trips


GOLDEN_VENDORS = [v for v in FIXTURE_VENDORS if v != "scaledown"]


@pytest.mark.parametrize("vendor", GOLDEN_VENDORS)
async def test_golden_fixture_round_trip(vendor: str) -> None:
    fixture = load_fixture(vendor)
    with serve_vendor(vendor, api_key=API_KEY, golden=True) as server:
        async with opened(vendor, server) as decider:
            result = await decider.decide(fixture_request(vendor))
    (received,) = server.requests
    assert received.path == fixture["path"]
    for name, value in fixture_headers(fixture, API_KEY).items():
        assert received.headers[name.lower()] == value, name
    if fixture["request"] is not None:
        assert received.body == fixture["request"]  # the encoder
    assert_expected(result, fixture["expected"])  # the decoder
    assert result.provider == decider.name
    assert result.latency_ms > 0
    assert result.media_bytes == 0


async def test_golden_logprob_request_follows_the_recipe() -> None:
    # The fixture has no request on record (the prompt wording is the client's); its
    # note fixes everything else.
    fixture = load_fixture("logprob")
    with serve_vendor("logprob", api_key=API_KEY, golden=True) as server:
        async with opened("logprob", server) as decider:
            await decider.decide(fixture_request("logprob"))
    body = server.requests[0].body
    assert body["model"] == fixture["response"]["model"]
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "Does the customer need a reply today?" in body["messages"][1]["content"]
    assert (body["max_tokens"], body["temperature"]) == (1, 0)
    assert (body["logprobs"], body["top_logprobs"]) == (True, 20)


async def test_scaledown_fixture_labels_and_reply() -> None:
    # ScaleDown's rubrics differ from the fixture's by design: the decider opens each
    # rubric with the question's instructions ("<instructions>\nAnswer: <option> —
    # <criterion>"; the unit tests pin that wording) where the fixture has the bare
    # criterion. So the encoder is checked label by label, and the decoder on the
    # fixture's reply served verbatim.
    fixture = load_fixture("scaledown")
    request = fixture_request("scaledown")
    (question,) = request.questions.values()
    with serve_vendor("scaledown", api_key=API_KEY) as server:
        server.fault = Fault.error(
            200, body=fixture["response"], headers=fixture["response_headers"]
        )
        async with opened("scaledown", server) as decider:
            result = await decider.decide(request)
    (received,) = server.requests
    assert received.path == fixture["path"]
    assert received.headers["x-api-key"] == API_KEY
    assert "authorization" not in received.headers
    body = received.body
    assert body["text"] == fixture["request"]["text"]
    assert [label["name"] for label in body["labels"]] == [
        label["name"] for label in fixture["request"]["labels"]
    ]
    for sent, golden in zip(body["labels"], fixture["request"]["labels"], strict=True):
        assert sent["rubric"].startswith(question.instructions + "\nAnswer: " + sent["name"])
        assert sent["rubric"].endswith(golden["rubric"])
    assert_expected(result, fixture["expected"])


# --------------------------------------------------------------------------- fixture errors


ERROR_CASES = [
    pytest.param(vendor, index, id=f"{vendor}-{index}-{entry['status']}")
    for vendor in FIXTURE_VENDORS
    for index, entry in enumerate(load_fixture(vendor)["errors"])
]


@pytest.mark.parametrize(("vendor", "index"), ERROR_CASES)
async def test_fixture_error_is_mapped(vendor: str, index: int) -> None:
    entry = load_fixture(vendor)["errors"][index]
    # Retryable errors are served once with no retries (their Retry-After of 1 s is not
    # waited out); the others with the default retry policy, which must not retry them.
    kwargs = {"retry": NO_RETRY} if entry["retryable"] else {}
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = Fault.replay(entry)
        async with opened(vendor, server, **kwargs) as decider:
            error = await failure(decider, fixture_request(vendor))
    assert len(server.requests) == 1
    assert error.kind == entry["kind"]
    assert error.retryable is entry["retryable"]
    assert error.status == entry["status"]
    assert entry["message_contains"] in str(error)
    if "message_excludes" in entry:
        assert entry["message_excludes"] not in str(error)
    if "request_id" in entry:
        assert error.request_id == entry["request_id"]
    assert API_KEY not in str(error)


@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
async def test_retryable_fixture_errors_are_retried_then_succeed(vendor: str) -> None:
    # Each retryable entry without a Retry-After, served once, then a normal reply.
    entries = [
        e
        for e in load_fixture(vendor)["errors"]
        if e["retryable"] and "retry-after" not in e["headers"]
    ]
    if not entries:
        pytest.skip("every retryable error of this fixture carries a 1 s Retry-After")
    with serve_vendor(vendor, api_key=API_KEY) as server:
        async with opened(vendor, server, retry=FAST_RETRY) as decider:
            for count, entry in enumerate(entries, 1):
                server.fault = [Fault.replay(entry)]
                result = await decider.decide(fixture_request(vendor))
                assert result.answers
                assert len(server.requests) == 2 * count


# --------------------------------------------------------------------------- media


async def test_xor_sends_images_as_data_urls() -> None:
    png = tiny_png()
    request = fixture_request("xor", images=[png])
    with serve_vendor("xor", api_key=API_KEY) as server:
        async with opened("xor", server) as decider:
            result = await decider.decide(request)
    body = server.requests[0].body
    assert body["images"] == [png_url(png)]
    assert body["state"] == request.state
    assert result.media_bytes > 0
    assert set(result.answers) == set(request.questions)


async def test_perplexity_puts_images_inside_the_state() -> None:
    png = tiny_png(3, 1)
    request = fixture_request("perplexity", images=[png])
    with serve_vendor("perplexity", api_key=API_KEY) as server:
        async with opened("perplexity", server) as decider:
            result = await decider.decide(request)
    body = server.requests[0].body
    assert "images" not in body  # the API has no such field (400 extra_forbidden)
    assert body["state"] == [
        request.state,
        {"type": "image_url", "image_url": {"url": png_url(png)}},
    ]
    assert set(result.answers) == set(request.questions)


async def test_clef_refuses_five_images_before_any_request() -> None:
    request = fixture_request("clef", images=[tiny_png()] * 5)
    with serve_vendor("clef", api_key=API_KEY) as server:
        async with opened("clef", server) as decider:
            error = await failure(decider, request)
    assert error.kind == "invalid_request"
    assert not error.retryable
    assert server.requests == []


async def test_laya_refuses_an_image_before_any_request() -> None:
    request = fixture_request("laya", images=[tiny_png()])
    with serve_vendor("laya", api_key=API_KEY) as server:
        async with opened("laya", server) as decider:
            error = await failure(decider, request)
    assert error.kind == "invalid_request"
    assert server.requests == []


# --------------------------------------------------------------------------- batching


def many_questions(n: int) -> dict[str, BooleanQuestion]:
    return {f"q{i:03d}": BooleanQuestion(f"Is statement {i} true?") for i in range(n)}


async def test_try_decide_splits_130_questions_into_two_perplexity_batches() -> None:
    questions = many_questions(130)
    with serve_vendor("perplexity", api_key=API_KEY) as server:
        server.answer = lambda qid, _q: 0.1 + int(qid[1:]) / 200
        async with opened("perplexity", server) as decider:
            result = await try_decide(
                DecisionRequest(state="a ticket", questions=questions), provider=decider
            )
    assert result is not None
    sizes = sorted(len(r.body["questions"]) for r in server.requests)
    assert sizes == [2, 128]
    assert all(r.body["state"] == "a ticket" for r in server.requests)
    assert list(result.answers) == list(questions)  # merged in question order
    for key, answer in result.answers.items():
        assert isinstance(answer, BooleanAnswer)
        assert answer.probability == pytest.approx(0.1 + int(key[1:]) / 200)
    assert result.request_id is not None
    ids = result.request_id.split(",")
    assert len(ids) == 2
    assert len(set(ids)) == 2
    assert all(ids)
    assert result.usage.input_tokens > 0


async def test_try_decide_loses_only_the_failed_batch() -> None:
    questions = many_questions(130)
    with serve_vendor("perplexity", api_key=API_KEY) as server:
        # The first request to arrive (either batch) is refused, not retried.
        server.fault = [Fault.error(400, message="Bad batch")]
        async with opened("perplexity", server) as decider:
            result = await try_decide(
                DecisionRequest(state="a ticket", questions=questions), provider=decider
            )
    assert len(server.requests) == 2
    failed = set(server.requests[0].body["questions"])
    kept = set(server.requests[1].body["questions"])
    assert result is not None
    assert set(result.answers) == kept
    assert failed.isdisjoint(result.answers)
    assert failed | kept == set(questions)
    assert result.request_id is not None
    assert "," not in result.request_id


# --------------------------------------------------------------------------- routing end to end


async def test_route_servers_against_a_loopback_typesafe() -> None:
    servers = [
        Server("github", "Issues, pull requests and code search.", ("github_search",)),
        Server("slack", "Send and read team chat messages.", ("slack_post",)),
        Server("calendar", "Create and move calendar events.", ("calendar_add",)),
        Server("weather", "Forecasts and current conditions.", ("weather_now",)),
        Server("billing", "Refunds, invoices and payment history.", ("billing_refund",)),
    ]
    unneeded = {"weather", "calendar"}

    def answer(_qid: str, question: Asked) -> AnswerValue:
        named = next(s.id for s in servers if f'"{s.id}" server' in question.instructions)
        return 0.05 if named in unneeded else 0.95

    with serve_vendor("typesafe", api_key=API_KEY) as server:
        server.answer = answer
        async with opened("typesafe", server) as decider:
            routing = await route_servers(
                "Refund the duplicate charge and tell the customer on Slack.",
                servers,
                decider=decider,
                config=RoutingConfig(decision_deadline_s=3.0, deadline_s=5.0),
            )
    (received,) = server.requests
    assert list(received.body["questions"]) == [f"server__{i}" for i in range(5)]
    assert routing.outcome is Outcome.APPLIED
    assert routing.strategy == "decision"
    assert set(routing.excluded) == unneeded
    assert routing.selected == ("github", "slack", "billing")
    assert set(routing.excluded_tools) == {"weather_now", "calendar_add"}
    assert routing.answered == 5
    assert routing.model == "jev-1.13.0"

"""The loopback vendor server (``tests/loopback/decision_vendors.py``) and its golden fixtures."""

from __future__ import annotations

import email.utils
import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from loopback.decision_vendors import (
    FIXTURE_VENDORS,
    KEY,
    VENDORS,
    AnswerValue,
    Asked,
    Fault,
    VendorServer,
    cycle_delays,
    fixture_headers,
    heavy_tailed_schedule,
    load_fixture,
    serve_vendor,
)

KINDS = {
    "authentication",
    "invalid_request",
    "max_tokens_exceeded",
    "rate_limit",
    "overloaded",
    "server",
}
RETRYABLE_KINDS = {"rate_limit", "overloaded", "server"}
CHAT_BODY = {
    "model": "qwen2.5-7b-instruct",
    "messages": [
        {"role": "system", "content": "Answer yes or no."},
        {"role": "user", "content": "Is this urgent? …answer yes or no"},
    ],
    "max_tokens": 1,
    "temperature": 0,
    "logprobs": True,
    "top_logprobs": 20,
}
IMF_FIXDATE = re.compile(r"^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$")


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    # Plain http to 127.0.0.1 only; verify=False skips loading the CA bundle (~0.1 s a client).
    with httpx.Client(timeout=5.0, verify=False) as c:
        yield c


def golden_body(fixture: dict[str, Any]) -> Any:
    return CHAT_BODY if fixture["request"] is None else fixture["request"]


def post_golden(
    client: httpx.Client, server: VendorServer, fixture: dict[str, Any], **headers: str
) -> httpx.Response:
    sent = fixture_headers(fixture) | headers
    return client.post(server.url(fixture["path"]), json=golden_body(fixture), headers=sent)


def post(client: httpx.Client, server: VendorServer, vendor: str) -> httpx.Response:
    """The vendor's golden request, answered by the synthetic (non-golden) server."""
    return post_golden(client, server, load_fixture(vendor))


# --------------------------------------------------------------------------- fixtures


def decode(vendor: str, fixture: dict[str, Any]) -> dict[str, Any]:
    """A reference reading of the fixture's response (wire-formats.md; seed-semantics §2.4)."""
    response = fixture["response"]
    if vendor == "logprob":
        rows = response["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        mass = {
            label: sum(math.exp(r["logprob"]) for r in rows if r["token"].strip().lower() == label)
            for label in ("yes", "no")
        }
        return {"urgent": {"type": "boolean", "probability": mass["yes"] / sum(mass.values())}}
    if vendor == "scaledown":
        scores = response["scores"]
        top = {
            "choice": response["top_label"],
            "probabilities": scores,
            "confidence": max(scores.values()),
        }
        return {"team": {"type": "choice"} | top}
    if vendor == "openai_decisions":
        return decode_positional(fixture)
    payload = response["result"] if vendor == "clef" else response
    reported = payload.get("providerMetadata", {}).get("typesafe", {}).get("confidence", {})
    out = {}
    for qid, raw in payload["answers"].items():
        if raw["type"] in {"noul", "boolean"}:
            out[qid] = {"type": "boolean", "probability": raw.get("noul", raw.get("probability"))}
            continue
        answer = {k: v for k, v in raw.items() if k != "confidence"}
        out[qid] = answer | {"confidence": raw.get("confidence", reported.get(qid))}
    return out


def decode_positional(fixture: dict[str, Any]) -> dict[str, Any]:
    questions = fixture["request"]["questions"]
    out: dict[str, Any] = {}
    for question, raw in zip(questions, fixture["response"]["answers"], strict=True):
        assert raw.get("name", question["name"]) == question["name"]
        if raw["type"] == "predicate":
            out[question["name"]] = {"type": "boolean", "probability": raw["probability"]}
        elif raw["type"] == "choice":
            probs = {p["value"]: p["probability"] for p in raw["probabilities"]}
            out[question["name"]] = {"type": "choice", "choice": raw["choice"]} | {
                "probabilities": probs,
                "confidence": raw["confidence"],
            }
        elif raw["type"] == "score":
            rows = raw["probabilities"]
            out[question["name"]] = {
                "type": "score",
                "score": raw["score"],
                "legend": {str(p["value"]): p["label"] for p in rows},
                "probabilities": {str(p["value"]): p["probability"] for p in rows},
                "confidence": raw["confidence"],
            }
    return out


def close(got: Any, want: Any) -> bool:
    """Equal, with floats compared to 1e-9 at any depth (logprob sums are not exact)."""
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and got.keys() == want.keys()
            and all(close(got[k], want[k]) for k in want)
        )
    if isinstance(want, float) and isinstance(got, float | int):
        return math.isclose(got, want, rel_tol=1e-9)
    return bool(got == want)


@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
def test_fixture_is_self_consistent(vendor: str) -> None:
    fixture = load_fixture(vendor)
    assert fixture["vendor"] == vendor
    assert fixture["method"] == "POST"
    assert fixture["path"].startswith("/")
    assert VENDORS[vendor].path.fullmatch(fixture["path"])
    assert KEY in "".join(fixture["request_headers"].values())
    expected = fixture["expected"]
    assert set(expected) >= {"answers", "model", "usage", "request_id"}
    assert close(decode(vendor, fixture), expected["answers"])
    for answer in expected["answers"].values():
        if answer["type"] == "score":
            weighted = sum(int(k) * p for k, p in answer["probabilities"].items())
            assert answer["score"] == pytest.approx(weighted)
    if expected["request_id"] is not None:
        assert expected["request_id"] in fixture["response_headers"].values()


@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
def test_fixture_errors_use_documented_kinds(vendor: str) -> None:
    errors = load_fixture(vendor)["errors"]
    assert errors
    for error in errors:
        assert error["kind"] in KINDS
        not_retried = vendor == "clef" and error["body"]["errors"][0]["code"] == 4006
        assert error["retryable"] == (error["kind"] in RETRYABLE_KINDS and not not_retried)
        assert error["message_contains"]
        assert "content-type" in error["headers"]


def test_openai_decisions_fixture_folds_criteria_into_instructions() -> None:
    fixture = load_fixture("openai_decisions")
    urgent = load_fixture("typesafe")["request"]["questions"]["urgent"]
    criteria = urgent["criteria"]
    folded = f"{urgent['instructions']}\nTrue means: {criteria['true']}\nFalse means: {criteria['false']}"
    assert fixture["request"]["questions"][0]["instructions"] == folded
    assert fixture["response"]["answers"][3] == {"name": "legal", "type": "refusal"}
    assert fixture["expected"]["refused"] == ["legal"]
    assert "True means:" in fixture["note"]


# --------------------------------------------------------------------------- golden mode


@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
def test_golden_request_gets_golden_response(vendor: str, client: httpx.Client) -> None:
    fixture = load_fixture(vendor)
    with serve_vendor(vendor, golden=True) as server:
        response = post_golden(client, server, fixture)
    assert response.status_code == 200
    assert response.json() == fixture["response"]
    for name, value in fixture["response_headers"].items():
        assert response.headers[name] == value
    [(path, headers, body)] = server.requests
    assert path == fixture["path"]
    assert body == golden_body(fixture)
    for name, value in fixture["request_headers"].items():
        assert headers[name.lower()] == value


def test_golden_mode_answers_other_bodies_normally(client: httpx.Client) -> None:
    fixture = load_fixture("typesafe")
    body = fixture["request"] | {"questions": {"only": fixture["request"]["questions"]["urgent"]}}
    with serve_vendor("typesafe", golden=True) as server:
        response = client.post(
            server.url("/v1/systemone"), json=body, headers=fixture_headers(fixture)
        )
    assert response.json()["answers"] == {"only": {"type": "noul", "noul": 0.9}}
    assert (
        response.headers["x-typesafe-request-id"]
        != fixture["response_headers"]["x-typesafe-request-id"]
    )


# --------------------------------------------------------------------------- auth


def test_typesafe_missing_key_is_403_and_wrong_key_is_401(client: httpx.Client) -> None:
    fixture = load_fixture("typesafe")
    with serve_vendor("typesafe") as server:
        url = server.url(fixture["path"])
        missing = client.post(url, json=fixture["request"])
        wrong = client.post(url, json=fixture["request"], headers={"Authorization": "Bearer nope"})
    assert (missing.status_code, missing.json()) == (403, {"detail": "Not authenticated"})
    assert wrong.status_code == 401
    assert wrong.json() == {
        "detail": {"error_type": "invalid_api_key", "message": "Invalid API key"}
    }


WRONG_KEY_SHAPES: dict[str, Callable[[Any], bool]] = {
    "typesafe": lambda b: b["detail"]["error_type"] == "invalid_api_key",
    "typesafe_gateway": lambda b: b["error"]["type"] == "authentication_error",
    "laya": lambda b: b["error"]["message"].startswith("Authentication Error"),
    "xor": lambda b: "Received API Key = nope" in b["error"]["message"],
    "perplexity": lambda b: b["error"]["type"] == "authentication_error",
    "clef": lambda b: b["success"] is False and b["errors"][0]["code"] == 10000,
    "openai_decisions": lambda b: b["error"]["message"].startswith("Incorrect API key"),
    "scaledown": lambda b: b == {"detail": "Invalid API key"},
    "logprob": lambda b: b["error"]["message"].startswith("Incorrect API key"),
}


@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
def test_wrong_key_gets_the_vendors_401(vendor: str, client: httpx.Client) -> None:
    fixture = load_fixture(vendor)
    with serve_vendor(vendor) as server:
        assert post_golden(client, server, fixture).status_code == 200
        bad = {k: v.replace(KEY, "nope") for k, v in fixture["request_headers"].items()}
        refused = client.post(server.url(fixture["path"]), json=golden_body(fixture), headers=bad)
    assert refused.status_code == 401
    assert WRONG_KEY_SHAPES[vendor](refused.json())


def test_scaledown_reads_only_x_api_key(client: httpx.Client) -> None:
    fixture = load_fixture("scaledown")
    with serve_vendor("scaledown") as server:
        bearer = client.post(
            server.url("/classify"),
            json=fixture["request"],
            headers={"Authorization": "Bearer KEY"},
        )
    assert bearer.status_code == 401


def test_gateway_refuses_other_protocol_versions(client: httpx.Client) -> None:
    fixture = load_fixture("typesafe_gateway")
    with serve_vendor("typesafe_gateway") as server:
        response = post_golden(client, server, fixture, **{"ai-gateway-protocol-version": "0.0.2"})
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": "Unsupported gateway protocol version",
        "type": "invalid_request_error",
        "code": "invalid_request_error",
    }


def test_clef_checks_account_and_model(client: httpx.Client) -> None:
    fixture = load_fixture("clef")
    headers = fixture_headers(fixture)
    with serve_vendor("clef") as server:
        other = server.url("/accounts/other/ai/run/@cf/cloudflare/clef")
        wrong_account = client.post(other, json=fixture["request"], headers=headers)
        flash = server.url("/accounts/acc123/ai/run/@cf/cloudflare/clef-flash")
        wrong_model = client.post(flash, json=fixture["request"], headers=headers)
    assert wrong_account.status_code == 403
    assert wrong_account.json()["errors"][0]["code"] == 10000
    assert wrong_model.status_code == 400
    [error] = wrong_model.json()["errors"]
    match = re.fullmatch(r"AiError: (\{.*\}) \(([0-9a-f-]{36})\)", error["message"])
    assert match is not None
    assert json.loads(match[1])["error"]["details"]["fieldErrors"] == {
        "model": ["Expected 'clef-flash'"]
    }
    assert match[2] == wrong_model.headers["cf-ai-req-id"]


def test_anthropic_messages_needs_key_and_version(client: httpx.Client) -> None:
    body = {"model": "claude-x", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    with serve_vendor("typesafe") as server:
        server.completion_text = '{"servers": ["github"]}'
        url = server.url("/v1/messages")
        ok = client.post(
            url, json=body, headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"}
        )
        no_version = client.post(url, json=body, headers={"x-api-key": KEY})
        wrong_key = client.post(
            url, json=body, headers={"x-api-key": "no", "anthropic-version": "1"}
        )
    assert ok.status_code == 200
    message = ok.json()
    assert message["type"] == "message"
    assert message["role"] == "assistant"
    assert message["content"] == [{"type": "text", "text": '{"servers": ["github"]}'}]
    assert set(message["usage"]) == {"input_tokens", "output_tokens"}
    assert ok.headers["request-id"].startswith("req_")
    assert no_version.status_code == 400
    assert no_version.json()["error"]["type"] == "invalid_request_error"
    assert wrong_key.status_code == 401
    assert wrong_key.json()["error"] == {
        "type": "authentication_error",
        "message": "invalid x-api-key",
    }


# --------------------------------------------------------------------------- answers


@pytest.mark.parametrize(
    "vendor", ["typesafe", "typesafe_gateway", "laya", "xor", "perplexity", "clef"]
)
def test_every_question_id_is_answered_in_the_vendors_vocabulary(
    vendor: str, client: httpx.Client
) -> None:
    with serve_vendor(vendor) as server:
        response = post(client, server, vendor)
    payload = response.json()
    if vendor == "clef":
        assert payload["success"] is True
        payload = payload["result"]
    answers = payload["answers"]
    assert list(answers) == ["urgent", "team", "frustration"]
    boolean = "boolean" if vendor == "typesafe_gateway" else "noul"
    field = "probability" if vendor == "typesafe_gateway" else "noul"
    assert answers["urgent"] == {"type": boolean, field: 0.9}
    assert answers["team"]["choice"] == "billing"
    assert answers["team"]["probabilities"]["billing"] == 0.7
    assert answers["frustration"]["legend"] == {"0": "Calm", "1": "Annoyed", "2": "Furious"}
    if vendor == "typesafe_gateway":
        assert "confidence" not in answers["team"]
        assert payload["providerMetadata"]["typesafe"]["confidence"]["team"] == 0.7
        assert payload["usage"] == {
            "inputTokens": payload["usage"]["inputTokens"],
            "outputTokens": 0,
        }
    else:
        assert answers["team"]["confidence"] == 0.7
    if vendor == "laya":
        assert payload["routing"]["model"] == "typed-decisions-2026-09-30"


def test_answer_callable_sets_probabilities(client: httpx.Client) -> None:
    seen: list[tuple[str, Asked]] = []

    picks: dict[str, AnswerValue] = {
        "urgent": 0.2,
        "team": ("sales", 0.6),
        "frustration": ("Furious", 0.5),
    }

    def answer(qid: str, question: Asked) -> AnswerValue:
        seen.append((qid, question))
        return picks[qid]

    with serve_vendor("typesafe") as server:
        server.answer = answer
        answers = post(client, server, "typesafe").json()["answers"]
    assert [(qid, q.kind) for qid, q in seen] == [
        ("urgent", "boolean"),
        ("team", "choice"),
        ("frustration", "score"),
    ]
    assert seen[1][1].options == ("billing", "technical", "sales")
    assert answers["urgent"]["noul"] == 0.2
    assert answers["team"]["choice"] == "sales"
    assert answers["team"]["probabilities"] == {"billing": 0.2, "technical": 0.2, "sales": 0.6}
    assert answers["frustration"]["probabilities"] == {"0": 0.25, "1": 0.25, "2": 0.5}
    assert answers["frustration"]["score"] == pytest.approx(1.25)


def test_openai_decisions_answers_positionally(client: httpx.Client) -> None:
    questions = [
        {
            "name": "zeta",
            "type": "score",
            "instructions": "How bad?",
            "levels": [{"label": "ok"}, {"label": "bad"}],
        },
        {"type": "predicate", "instructions": "Unnamed?"},
        {
            "name": "alpha",
            "type": "choice",
            "instructions": "Which?",
            "choices": [{"value": True}, {"value": False}],
        },
        {"name": "refused", "type": "predicate", "instructions": "Refuse me"},
    ]
    body = {"model": "gpt-6-luna", "input": "state", "questions": questions}
    with serve_vendor("openai_decisions") as server:
        server.answer = lambda qid, q: None if qid == "refused" else default(q)
        response = client.post(
            server.url("/v1/decisions"), json=body, headers={"Authorization": "Bearer KEY"}
        )
    answers = response.json()["answers"]
    assert [a.get("name") for a in answers] == ["zeta", None, "alpha", "refused"]
    assert [a["type"] for a in answers] == ["score", "predicate", "choice", "refusal"]
    assert answers[0]["probabilities"][0] == {"value": 0, "label": "ok", "probability": 0.7}
    assert answers[2]["choice"] is True
    assert answers[3] == {"name": "refused", "type": "refusal"}
    assert response.json()["model"] == "gpt-6-luna-2026-09-15"


def default(question: Asked) -> float:
    return 0.9 if question.kind == "boolean" else 0.7


def test_scaledown_classify_scores_every_label(client: httpx.Client) -> None:
    with serve_vendor("scaledown") as server:
        server.answer = lambda _qid, _q: ("technical", 0.8)
        result = post(client, server, "scaledown").json()
    assert result["top_label"] == "technical"
    assert result["scores"] == pytest.approx({"billing": 0.1, "technical": 0.8, "sales": 0.1})
    assert [label["label"] for label in result["labels"]] == ["billing", "technical", "sales"]


def p_yes(payload: dict[str, Any]) -> float:
    rows = payload["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    yes = sum(math.exp(r["logprob"]) for r in rows if r["token"].strip().lower() == "yes")
    no = sum(math.exp(r["logprob"]) for r in rows if r["token"].strip().lower() == "no")
    return yes / (yes + no)


@pytest.mark.parametrize("probability", [0.0, 0.3, 0.9, 1.0])
def test_logprob_mode_gives_the_configured_p_yes(probability: float, client: httpx.Client) -> None:
    with serve_vendor("logprob") as server:
        server.answer = lambda _qid, _q: probability
        response = client.post(
            server.url("/v1/chat/completions"),
            json=CHAT_BODY,
            headers={"Authorization": "Bearer KEY"},
        )
    payload = response.json()
    assert p_yes(payload) == pytest.approx(probability)
    tokens = {r["token"] for r in payload["choices"][0]["logprobs"]["content"][0]["top_logprobs"]}
    assert tokens <= {"Yes", " yes", "No", "Maybe"}
    assert response.headers["x-request-id"] == payload["id"]


def test_logprob_mode_honours_top_logprobs_limit(client: httpx.Client) -> None:
    with serve_vendor("logprob") as server:
        url, auth = server.url("/v1/chat/completions"), {"Authorization": "Bearer KEY"}
        two = client.post(url, json=CHAT_BODY | {"top_logprobs": 2}, headers=auth).json()
        too_many = client.post(url, json=CHAT_BODY | {"top_logprobs": 21}, headers=auth)
    assert len(two["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 2
    assert too_many.status_code == 400
    assert too_many.json()["error"]["param"] == "top_logprobs"


def test_chat_generation_returns_completion_text(client: httpx.Client) -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "pick"}],
        "response_format": {"type": "json_object"},
    }
    with serve_vendor("typesafe") as server:
        server.completion_text = lambda request: json.dumps({"echo": request["model"]})
        payload = client.post(
            server.url("/v1/chat/completions"), json=body, headers={"Authorization": "Bearer KEY"}
        ).json()
    assert payload["choices"][0]["message"]["content"] == '{"echo": "m"}'
    assert payload["choices"][0]["logprobs"] is None
    assert payload["object"] == "chat.completion"


# --------------------------------------------------------------------------- validation


def test_typesafe_refuses_the_gateway_vocabulary_with_envelope_b(client: httpx.Client) -> None:
    fixture = load_fixture("typesafe")
    body = fixture["request"] | {
        "questions": load_fixture("typesafe_gateway")["request"]["questions"]
    }
    with serve_vendor("typesafe") as server:
        response = client.post(
            server.url("/v1/systemone"), json=body, headers=fixture_headers(fixture)
        )
        garbled = client.post(
            server.url("/v1/systemone"), content=b"{nope", headers=fixture_headers(fixture)
        )
    assert response.status_code == 422
    [entry] = response.json()["detail"]
    assert entry["loc"] == ["body", "questions", "urgent", "type"]
    assert entry["type"] == "literal_error"
    assert entry["input"] == "boolean"
    assert garbled.status_code == 422
    assert garbled.json()["detail"][0]["type"] == "json_invalid"


@pytest.mark.parametrize(
    ("change", "param"),
    [({"model": None}, "model"), ({"images": ["data:image/png;base64,AA=="]}, "images")],
)
def test_perplexity_needs_model_and_refuses_unknown_fields(
    change: dict[str, Any], param: str, client: httpx.Client
) -> None:
    fixture = load_fixture("perplexity")
    body = {k: v for k, v in (fixture["request"] | change).items() if v is not None}
    with serve_vendor("perplexity") as server:
        response = client.post(
            server.url("/v1/decisions"), json=body, headers=fixture_headers(fixture)
        )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


# --------------------------------------------------------------------------- faults

ENVELOPES: dict[str, Callable[[int, Any], bool]] = {
    "typesafe": lambda s, b: (
        b == {"detail": {"error_type": "max_tokens_exceeded"}}
        if s == 413
        else isinstance(b["detail"]["message"], str)
    ),
    "typesafe_gateway": lambda _s, b: set(b["error"]) == {"message", "type", "code"},
    "laya": lambda s, b: (
        isinstance(b["error"]["message"], str) if s in {401, 429} else isinstance(b["detail"], str)
    ),
    "xor": lambda s, b: (
        isinstance(b["error"]["message"], str)
        if s in {401, 403, 429}
        else isinstance(b["detail"], str)
        if s == 503
        else isinstance(b["error"], str)
    ),
    "perplexity": lambda _s, b: set(b["error"]) == {"message", "type", "code", "param"},
    "clef": lambda _s, b: b["success"] is False and {"code", "message"} == set(b["errors"][0]),
    "openai_decisions": lambda _s, b: set(b["error"]) == {"message", "type", "param", "code"},
    "scaledown": lambda _s, b: isinstance(b["detail"], str),
    "logprob": lambda _s, b: set(b["error"]) == {"message", "type", "param", "code"},
}


@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
def test_status_faults_use_the_vendors_envelope(vendor: str, client: httpx.Client) -> None:
    statuses = [401, 403, 413, 429, 500, 503, 529]
    with serve_vendor(vendor) as server:
        server.fault = [Fault.error(status) for status in statuses]
        responses = [post(client, server, vendor) for _ in statuses]
        after = post(client, server, vendor)
    assert [r.status_code for r in responses] == statuses
    for response in responses:
        assert response.headers["content-type"] == "application/json"
        assert ENVELOPES[vendor](response.status_code, response.json()), response.json()
    assert after.status_code == 200


def test_retry_after_as_seconds_and_as_http_date(client: httpx.Client) -> None:
    with serve_vendor("perplexity") as server:
        server.fault = [
            Fault.error(429, retry_after=2),
            Fault.error(503, retry_after=1.5),
            Fault.error(429, retry_after=3, retry_after_date=True),
            Fault.error(429, retry_after_ms=250, retry_after=1),
        ]
        seconds, fractional, dated, ms = (post(client, server, "perplexity") for _ in range(4))
    assert seconds.headers["retry-after"] == "2"
    assert fractional.headers["retry-after"] == "1.5"
    value = dated.headers["retry-after"]
    assert IMF_FIXDATE.match(value), value
    when = email.utils.parsedate_to_datetime(value)
    assert when.tzinfo is not None
    ahead = (when - datetime.now(UTC)).total_seconds()
    assert 2.0 <= ahead <= 4.5
    assert (ms.headers["retry-after-ms"], ms.headers["retry-after"]) == ("250", "1")


@pytest.mark.parametrize(
    ("code", "status", "text"),
    [
        (4006, 429, "daily free allocation"),
        (3040, 429, "Capacity temporarily exceeded"),
        (5021, 400, "context window"),
    ],
)
def test_clef_error_codes(code: int, status: int, text: str, client: httpx.Client) -> None:
    with serve_vendor("clef") as server:
        server.fault = Fault.clef(code)
        response = post(client, server, "clef")
    assert response.status_code == status
    [error] = response.json()["errors"]
    assert error["code"] == code
    assert text in error["message"]
    if code == 5021:
        assert error["message"].endswith(f"({response.headers['cf-ai-req-id']})")


@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
def test_fixture_errors_replay_verbatim(vendor: str, client: httpx.Client) -> None:
    errors = load_fixture(vendor)["errors"]
    with serve_vendor(vendor) as server:
        server.fault = [Fault.replay(error) for error in errors]
        responses = [post(client, server, vendor) for _ in errors]
    for error, response in zip(errors, responses, strict=True):
        assert response.status_code == error["status"]
        for name, value in error["headers"].items():
            assert response.headers[name] == value
        body = response.text if isinstance(error["body"], str) else response.json()
        assert body == error["body"]


def test_html_504(client: httpx.Client) -> None:
    with serve_vendor("perplexity") as server:
        server.fault = Fault.html(504)
        response = post(client, server, "perplexity")
    assert response.status_code == 504
    assert response.headers["content-type"] == "text/html"
    assert "504 Gateway Time-out" in response.text


def test_garbage_json_with_200(client: httpx.Client) -> None:
    with serve_vendor("xor") as server:
        server.fault = Fault.garbage()
        response = post(client, server, "xor")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    with pytest.raises(json.JSONDecodeError):
        response.json()


@pytest.mark.parametrize(
    ("corruption", "check"),
    [
        ("string", lambda v: v == "yes"),
        ("out_of_range", lambda v: v == 1.7),
        ("nan", lambda v: isinstance(v, float) and math.isnan(v)),
    ],
)
def test_wrong_types(corruption: Any, check: Callable[[Any], bool], client: httpx.Client) -> None:
    with serve_vendor("typesafe") as server:
        server.fault = [Fault.wrong_type(corruption), Fault.wrong_type(corruption, "team")]
        first, second = post(client, server, "typesafe"), post(client, server, "typesafe")
    answers = first.json()["answers"]
    assert check(answers["urgent"]["noul"])
    assert answers["team"]["probabilities"]["billing"] == 0.7
    assert check(second.json()["answers"]["team"]["probabilities"]["billing"])
    if corruption == "nan":
        assert '"noul": NaN' in first.text


def test_wrong_type_reaches_logprobs(client: httpx.Client) -> None:
    with serve_vendor("logprob") as server:
        server.fault = Fault.wrong_type("nan")
        response = client.post(
            server.url("/v1/chat/completions"),
            json=CHAT_BODY,
            headers={"Authorization": "Bearer KEY"},
        )
    assert "NaN" in response.text


def test_missing_and_renamed_answers(client: httpx.Client) -> None:
    with serve_vendor("clef") as server:
        server.fault = [
            Fault.drop(),
            Fault.drop("urgent", "team"),
            Fault.rename({"urgent": "urgent2"}),
            Fault.rename(),
        ]
        last, two, one, every = (
            post(client, server, "clef").json()["result"]["answers"] for _ in range(4)
        )
    assert list(last) == ["urgent", "team"]
    assert list(two) == ["frustration"]
    assert list(one) == ["urgent2", "team", "frustration"]
    assert list(every) == ["urgent_renamed", "team_renamed", "frustration_renamed"]


def test_openai_decisions_drop_shifts_positions(client: httpx.Client) -> None:
    with serve_vendor("openai_decisions") as server:
        server.fault = Fault.drop("team")
        answers = post(client, server, "openai_decisions").json()["answers"]
    assert [a["name"] for a in answers] == ["urgent", "frustration", "legal"]


@pytest.mark.parametrize("kind", ["truncate", "close"])
def test_broken_connections(kind: str, client: httpx.Client) -> None:
    with serve_vendor("typesafe") as server:
        server.fault = [Fault.truncate() if kind == "truncate" else Fault.close()]
        with pytest.raises(httpx.RemoteProtocolError):
            post(client, server, "typesafe")
        assert post(client, server, "typesafe").status_code == 200


def test_slow_waits_real_time(client: httpx.Client) -> None:
    with serve_vendor("laya") as server:
        server.fault = [Fault.slow(1.0)]
        started = time.monotonic()
        assert post(client, server, "laya").status_code == 200
        slow = time.monotonic() - started
        started = time.monotonic()
        post(client, server, "laya")
        fast = time.monotonic() - started
    assert slow >= 1.0
    assert fast < 1.0  # only the first request was slowed (a margin a loaded machine keeps)


def test_persistent_fault_until_cleared(client: httpx.Client) -> None:
    with serve_vendor("typesafe") as server:
        server.fault = Fault.error(529)
        statuses = [post(client, server, "typesafe").status_code for _ in range(3)]
        server.fault = None
        statuses.append(post(client, server, "typesafe").status_code)
    assert statuses == [529, 529, 529, 200]


def test_hang_is_released_on_shutdown() -> None:
    fixture = load_fixture("typesafe")
    outcome: list[object] = []
    finished: list[float] = []

    def call(url: str) -> None:
        try:
            with httpx.Client(timeout=10.0, verify=False) as client:
                outcome.append(
                    client.post(url, json=fixture["request"], headers=fixture_headers(fixture))
                )
        except httpx.HTTPError as exc:
            outcome.append(exc)
        finished.append(time.monotonic())

    with serve_vendor("typesafe") as server:
        server.fault = Fault.hang()
        thread = threading.Thread(target=call, args=(server.url(fixture["path"]),))
        thread.start()
        deadline = time.monotonic() + 10.0
        while not server.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        assert not finished, "a hung request must not be answered"
        leaving = time.monotonic()
    left = time.monotonic()
    thread.join(timeout=10.0)
    assert not thread.is_alive()
    # Released at once, not at the client's 10 s timeout (bounds generous for a loaded machine).
    assert left - leaving < 5.0
    assert finished[0] - leaving < 5.0
    assert isinstance(outcome[0], httpx.RemoteProtocolError)


def test_delay_for_and_heavy_tailed_schedule(client: httpx.Client) -> None:
    schedule = heavy_tailed_schedule(7, 200)
    assert schedule == heavy_tailed_schedule(7, 200)
    assert schedule != heavy_tailed_schedule(8, 200)
    tail = [d for d in schedule if d >= 2.0]
    assert len(tail) == 10
    assert all(d <= 2.7 for d in tail)
    body = sorted(d for d in schedule if d < 2.0)
    assert body[len(body) // 2] == pytest.approx(0.4, rel=0.15)
    with serve_vendor("typesafe") as server:
        server.delay_for = cycle_delays([1.0, 0.0])
        times, upstream = [], []
        for _ in range(2):
            started = time.monotonic()
            response = post(client, server, "typesafe")
            times.append(time.monotonic() - started)
            upstream.append(int(response.headers["x-envoy-upstream-service-time"]))
    assert times[0] >= 1.0
    assert upstream[0] >= 1000
    assert times[1] < 1.0  # the second delay is 0 (a margin a loaded machine keeps)


def test_requests_are_recorded_with_lowercase_headers(client: httpx.Client) -> None:
    with serve_vendor("typesafe_gateway") as server:
        server.fault = Fault.error(500)
        post(client, server, "typesafe_gateway")
        client.post(
            server.url("/v4/ai/evaluation-model"),
            content=b"not json",
            headers={"Authorization": "Bearer KEY"},
        )
    first, second = server.requests
    assert first.headers["ai-model-id"] == "typesafe-ai/jev"
    assert first.body == load_fixture("typesafe_gateway")["request"]
    assert second.body == "not json"


def test_unknown_vendor_and_path(client: httpx.Client) -> None:
    with pytest.raises(ValueError, match="unknown vendor"), serve_vendor("nope"):
        pass
    with serve_vendor("xor") as server:
        response = client.post(
            server.url("/v2/elsewhere"), json={}, headers={"Authorization": "Bearer KEY"}
        )
    assert response.status_code == 404

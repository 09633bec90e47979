"""Every HTTP decider against the loopback vendor server when things go wrong.

Status codes and their per-vendor meaning, retries and ``Retry-After``, deadlines in
real time, malformed and missing answers, broken connections, and the API key
never reaching an error message or a log record. The requests are the golden
fixtures' (see ``test_deciders_loopback.py``, whose helpers are used here).
"""

from __future__ import annotations

import json
import logging
import math
import secrets
from typing import Any

import attrs
import pytest
import trio
from loopback.decision_vendors import FIXTURE_VENDORS, Fault, load_fixture, serve_vendor
from test_deciders_loopback import (
    API_KEY,
    FAST_RETRY,
    MAP_VENDORS,
    NO_RETRY,
    build,
    failure,
    fixture_request,
    opened,
)

from toolroute import ConfigError, DecisionError

#: The vendors whose questions and answers are all addressed by id or position in one call.
TYPED_VENDORS = (*MAP_VENDORS, "openai_decisions")


def elapsed_since(started: float) -> float:
    return trio.current_time() - started


# --------------------------------------------------------------------------- statuses


@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
async def test_401_latches_without_another_request(vendor: str) -> None:
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = Fault.error(401)
        async with opened(vendor, server) as decider:
            first = await failure(decider, fixture_request(vendor))
            second = await failure(decider, fixture_request(vendor))
    assert (first.kind, first.retryable, first.status) == ("authentication", False, 401)
    assert second.kind == "authentication"
    assert "rejected this API key earlier" in str(second)
    assert len(server.requests) == 1


@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
@pytest.mark.parametrize(
    "key",
    [API_KEY + "\n" + API_KEY, "tr. " + API_KEY[3:], API_KEY + "\u00e9"],
    ids=["two-lines", "space", "non-ascii"],
)
def test_a_key_with_whitespace_inside_is_refused_at_construction(vendor: str, key: str) -> None:
    # Two keys pasted together or a line break from an env file: a clear error now,
    # not a vendor 401 later, and the message never quotes the key.
    with serve_vendor(vendor, api_key=API_KEY) as server:
        with pytest.raises(ConfigError, match="without whitespace") as info:
            build(vendor, server, api_key=key)
        assert API_KEY[3:] not in str(info.value)
        assert server.requests == []


@pytest.mark.parametrize(
    ("vendor", "kind", "latches"),
    [
        ("typesafe", "authentication", True),
        ("typesafe_gateway", "authentication", True),
        ("laya", "authentication", True),
        ("xor", "invalid_request", False),  # a LiteLLM team or budget refusal
        ("perplexity", "invalid_request", False),
        ("clef", "invalid_request", False),
        ("openai_decisions", "invalid_request", False),  # region or model, not the key
        ("scaledown", "authentication", True),
        ("logprob", "invalid_request", False),
    ],
)
async def test_403_means_what_the_vendor_means(vendor: str, kind: str, latches: bool) -> None:
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = Fault.error(403)
        async with opened(vendor, server) as decider:
            first = await failure(decider, fixture_request(vendor))
            second = await failure(decider, fixture_request(vendor))
    assert (first.kind, first.retryable, first.status) == (kind, False, 403)
    assert second.kind == kind
    assert len(server.requests) == (1 if latches else 2)


@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
async def test_413_is_max_tokens_exceeded(vendor: str) -> None:
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = Fault.error(413)
        async with opened(vendor, server) as decider:
            error = await failure(decider, fixture_request(vendor))
    assert (error.kind, error.retryable, error.status) == ("max_tokens_exceeded", False, 413)
    assert len(server.requests) == 1


@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
async def test_429_retry_after_seconds_is_waited_out_then_succeeds(vendor: str) -> None:
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = [Fault.error(429, retry_after=0.2)]
        async with opened(vendor, server) as decider:
            started = trio.current_time()
            result = await decider.decide(fixture_request(vendor))
            waited = elapsed_since(started)
    assert len(server.requests) == 2
    assert result.answers
    # Honoured (waiting it exactly, without the default back-off, is test_http_rules' pure
    # test); the upper bound only catches a runaway wait, generous for a loaded machine.
    assert 0.2 <= waited < 5.0


@pytest.mark.parametrize("vendor", ["typesafe", "xor", "perplexity", "clef", "openai_decisions"])
async def test_429_retry_after_date_beyond_the_budget_fails_at_once(vendor: str) -> None:
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = Fault.error(429, retry_after=30, retry_after_date=True)
        async with opened(vendor, server, timeout_s=20.0) as decider:
            started = trio.current_time()
            error = await failure(decider, fixture_request(vendor))
            waited = elapsed_since(started)
    assert (error.kind, error.retryable) == ("rate_limit", True)
    assert "Retry-After" in str(error)
    assert len(server.requests) == 1
    assert waited < 10.0  # well below the 20 s budget: no pointless wait


@pytest.mark.parametrize("status", [503, 529])
@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
async def test_overloaded_is_retried_then_succeeds(vendor: str, status: int) -> None:
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = [Fault.error(status)]
        async with opened(vendor, server, retry=FAST_RETRY) as decider:
            result = await decider.decide(fixture_request(vendor))
    assert len(server.requests) == 2
    assert set(result.answers) == set(fixture_request(vendor).questions)


@pytest.mark.parametrize(
    ("vendor", "kind"),
    [
        # wire-formats.md maps 529 to overloaded for TypeSafe (§1; the gateway falls back to it).
        ("typesafe", "overloaded"),
        ("laya", "server"),
        ("xor", "server"),
        ("perplexity", "server"),
        ("clef", "server"),
        ("openai_decisions", "server"),
        ("scaledown", "server"),
    ],
)
async def test_529_is_overloaded_only_where_the_vendor_says_so(vendor: str, kind: str) -> None:
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = Fault.error(529)
        async with opened(vendor, server, retry=NO_RETRY) as decider:
            error = await failure(decider, fixture_request(vendor))
    assert (error.kind, error.retryable, error.status) == (kind, True, 529)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
async def test_a_non_finite_number_in_the_state_is_refused_before_any_request(
    vendor: str, bad: float
) -> None:
    request = attrs.evolve(fixture_request(vendor), state={"amount": bad, "text": "refund"})
    with serve_vendor(vendor, api_key=API_KEY) as server:
        async with opened(vendor, server) as decider:
            error = await failure(decider, request)
    assert (error.kind, error.retryable) == ("invalid_request", False)
    assert "NaN or an infinite number" in str(error)
    assert server.requests == []


@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
async def test_500_twice_is_a_server_error_after_two_attempts(vendor: str) -> None:
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = [Fault.error(500), Fault.error(500)]
        async with opened(vendor, server, retry=FAST_RETRY) as decider:
            error = await failure(decider, fixture_request(vendor))
    assert (error.kind, error.retryable, error.status) == ("server", True, 500)
    assert "gave up after 2 attempts" in str(error)
    assert len(server.requests) == 2


@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
async def test_html_504_is_a_retryable_server_error(vendor: str) -> None:
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = Fault.html(504)
        async with opened(vendor, server, retry=NO_RETRY) as decider:
            error = await failure(decider, fixture_request(vendor))
    assert (error.kind, error.retryable, error.status) == ("server", True, 504)
    assert "504" in str(error)
    assert len(server.requests) == 1


# --------------------------------------------------------------------------- Clef codes


async def test_clef_4006_daily_allocation_is_not_retried() -> None:
    with serve_vendor("clef", api_key=API_KEY) as server:
        server.fault = Fault.clef(4006)
        async with opened("clef", server) as decider:
            error = await failure(decider, fixture_request("clef"))
    assert (error.kind, error.retryable, error.status) == ("rate_limit", False, 429)
    assert "daily free allocation" in str(error)
    assert "(code 4006)" in str(error)
    assert len(server.requests) == 1


async def test_clef_3040_capacity_is_retried_then_succeeds() -> None:
    with serve_vendor("clef", api_key=API_KEY) as server:
        server.fault = [Fault.clef(3040)]
        async with opened("clef", server, retry=FAST_RETRY) as decider:
            result = await decider.decide(fixture_request("clef"))
    assert len(server.requests) == 2
    assert result.answers


async def test_clef_5021_is_max_tokens_exceeded_with_the_request_id() -> None:
    with serve_vendor("clef", api_key=API_KEY) as server:
        server.fault = Fault.clef(5021)
        async with opened("clef", server) as decider:
            error = await failure(decider, fixture_request("clef"))
    assert (error.kind, error.retryable, error.status) == ("max_tokens_exceeded", False, 400)
    assert "context window" in str(error)
    assert error.request_id is not None
    assert f"({error.request_id})" in str(error)  # the uuid the AiError names
    assert len(server.requests) == 1


# --------------------------------------------------------------------------- deadlines


@pytest.mark.parametrize("vendor", ["typesafe", "clef", "openai_decisions", "logprob"])
async def test_slow_within_the_budget_succeeds(vendor: str) -> None:
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = Fault.slow(0.2)
        async with opened(vendor, server, timeout_s=2.0) as decider:
            result = await decider.decide(fixture_request(vendor))
    assert result.answers
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("vendor", "fault"),
    [
        ("typesafe", Fault.slow(30.0)),
        ("clef", Fault.slow(30.0)),
        ("scaledown", Fault.slow(30.0)),
        ("perplexity", Fault.hang()),
        ("openai_decisions", Fault.hang()),
        ("logprob", Fault.hang()),
    ],
    ids=lambda value: value if isinstance(value, str) else value.kind,
)
async def test_no_answer_within_the_budget_is_a_timeout(vendor: str, fault: Fault) -> None:
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = fault
        async with opened(vendor, server) as decider:
            started = trio.current_time()
            error = await failure(decider, fixture_request(vendor, timeout_s=0.5))
            waited = elapsed_since(started)
    assert (error.kind, error.retryable) == ("timeout", True)
    assert 0.5 <= waited < 5.0  # by the 0.5 s deadline, not the reply (generous: real I/O)
    assert len(server.requests) == 1  # no retry can start after the deadline


# --------------------------------------------------------------------------- malformed replies


@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
async def test_garbage_json_is_a_server_error(vendor: str) -> None:
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = Fault.garbage()
        async with opened(vendor, server) as decider:
            error = await failure(decider, fixture_request(vendor))
    assert (error.kind, error.status) == ("server", 200)
    assert "not JSON" in str(error)
    assert len(server.requests) == 1


@pytest.mark.parametrize("vendor", MAP_VENDORS)
async def test_a_body_in_a_declared_charset_is_read(vendor: str) -> None:
    # RFC 8259 asks for UTF-8, but a proxy or an older server may re-encode the body and
    # say so in Content-Type; a byte that is not UTF-8 must not lose the whole answer.
    reply = load_fixture(vendor)["response"]
    assert isinstance(reply, dict)
    reply = {**reply, "note": "caf\u00e9"}
    text = json.dumps(reply, ensure_ascii=False)
    latin = (("content-type", "application/json; charset=ISO-8859-1"),)
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = Fault(kind="garbage", body=text.encode("latin-1"), headers=latin)
        async with opened(vendor, server) as decider:
            read = await decider.decide(fixture_request(vendor))
        server.fault = Fault(kind="garbage", body=text.encode())
        async with opened(vendor, server) as decider:
            plain = await decider.decide(fixture_request(vendor))
    assert read.answers == plain.answers
    assert read.answers


async def test_a_body_that_is_not_in_its_declared_charset_is_a_server_error() -> None:
    bad = (("content-type", "application/json; charset=no-such-charset"),)
    with serve_vendor("typesafe", api_key=API_KEY) as server:
        server.fault = Fault(kind="garbage", body=b'{"answers": "\xff"}', headers=bad)
        async with opened("typesafe", server) as decider:
            error = await failure(decider, fixture_request("typesafe"))
    assert (error.kind, error.status) == ("server", 200)
    assert "not JSON" in str(error)


WRONG_TYPES = [
    ("string", "urgent"),  # a boolean's probability "yes"
    ("out_of_range", "team"),  # a choice's top probability 1.7
    ("nan", "frustration"),  # a score's level-0 probability NaN
]


@pytest.mark.parametrize(("corruption", "target"), WRONG_TYPES)
@pytest.mark.parametrize("vendor", TYPED_VENDORS)
async def test_a_wrongly_typed_answer_is_dropped_and_the_others_kept(
    vendor: str, corruption: Any, target: str
) -> None:
    request = fixture_request(vendor)
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = Fault.wrong_type(corruption, target)
        async with opened(vendor, server) as decider:
            result = await decider.decide(request)
    assert set(result.answers) == set(request.questions) - {target}


@pytest.mark.parametrize("vendor", TYPED_VENDORS)
async def test_a_missing_answer_is_missing(vendor: str) -> None:
    request = fixture_request(vendor)
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = Fault.drop("team")
        async with opened(vendor, server) as decider:
            if vendor == "openai_decisions":
                # Positional answers, one short: which one is missing cannot be known.
                error = await failure(decider, request)
                assert error.kind == "server"
                assert "cannot be matched" in str(error)
                return
            result = await decider.decide(request)
    assert set(result.answers) == set(request.questions) - {"team"}


@pytest.mark.parametrize("vendor", MAP_VENDORS)
async def test_answers_under_other_ids_are_no_reply(vendor: str) -> None:
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = Fault.rename()
        async with opened(vendor, server, retry=NO_RETRY) as decider:
            error = await failure(decider, fixture_request(vendor))
    assert error.kind == "server"
    assert "cannot be matched" in str(error)
    assert "urgent_renamed" in str(error)


@pytest.mark.parametrize("vendor", MAP_VENDORS)
async def test_one_answer_under_an_unasked_id_voids_the_reply(vendor: str) -> None:
    # Every other id is right, but one answer went astray: none can be trusted.
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = Fault.rename({"team": "team2"})
        async with opened(vendor, server, retry=NO_RETRY) as decider:
            error = await failure(decider, fixture_request(vendor))
    assert error.kind == "server"
    assert "'team2'" in str(error)


@pytest.mark.parametrize(
    "mapping", [{"urgent": "legal", "legal": "urgent"}, {}], ids=["swapped", "renamed"]
)
async def test_openai_decisions_names_that_differ_by_position_are_no_reply(
    mapping: dict[str, str],
) -> None:
    request = fixture_request("openai_decisions")
    with serve_vendor("openai_decisions", api_key=API_KEY) as server:
        server.fault = Fault.rename(mapping)
        async with opened("openai_decisions", server, retry=NO_RETRY) as decider:
            error = await failure(decider, request)
    sent = server.requests[0].body["questions"]
    assert [q["name"] for q in sent] == list(request.questions)
    assert error.kind == "server"
    assert "cannot be matched" in str(error)
    assert len(server.requests) == 1  # a misaligned reply is not retried


# --------------------------------------------------------------------------- broken connections


@pytest.mark.parametrize("fault", [Fault.truncate(), Fault.close()], ids=["truncate", "close"])
@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
async def test_a_broken_connection_is_a_network_error(vendor: str, fault: Fault) -> None:
    with serve_vendor(vendor, api_key=API_KEY) as server:
        server.fault = fault
        async with opened(vendor, server, retry=NO_RETRY) as decider:
            error = await failure(decider, fixture_request(vendor))
    assert (error.kind, error.retryable) == ("network", True)
    assert len(server.requests) == 1


# --------------------------------------------------------------------------- the key


def echoing_reply(vendor: str) -> dict[str, Any]:
    """A 200 reply whose first answer holds the API key where a number belongs."""
    boolean = {"type": "noul", "noul": API_KEY}
    if vendor == "clef":
        return {"result": {"answers": {"urgent": boolean}}, "success": True}
    if vendor in MAP_VENDORS:
        return {"model": "m", "answers": {"urgent": boolean}}
    if vendor == "openai_decisions":
        return {"answers": [{"type": "predicate", "probability": API_KEY}]}
    if vendor == "scaledown":
        return {"scores": {"billing": API_KEY, "technical": 0.1, "sales": 0.1}}
    assert vendor == "logprob"
    token = {"token": API_KEY, "logprob": API_KEY}
    content = [{"token": "Yes", "logprob": -0.1, "top_logprobs": [token]}]
    return {"choices": [{"index": 0, "logprobs": {"content": content}}]}


KEY_FAULTS = [
    Fault.error(400, message=f"bad request from {API_KEY}"),
    Fault.error(401, message=f"Invalid API key {API_KEY}"),
    Fault.error(429, message=f"slow down, {API_KEY}", retry_after=3, retry_after_date=True),
    Fault.error(500, body=f"<html>upstream said Bearer {API_KEY}</html>"),
    Fault.html(504),
    Fault.garbage(f'{{"answers": "{API_KEY}'.encode()),
    Fault.truncate(),
    Fault.close(),
    Fault.wrong_type(),
]


@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
async def test_the_api_key_never_reaches_a_message_or_a_log(
    vendor: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="toolroute")
    messages: list[str] = []
    with serve_vendor(vendor, api_key=API_KEY) as server:
        for fault in [*KEY_FAULTS, Fault.error(200, body=echoing_reply(vendor))]:
            server.fault = fault
            # A fresh decider for each fault: a 401 latches.
            async with opened(vendor, server, retry=NO_RETRY, timeout_s=1.0) as decider:
                try:
                    await decider.decide(fixture_request(vendor))
                except DecisionError as exc:
                    messages.append(str(exc))
        sent = server.requests[0].headers
    assert API_KEY in (sent.get("authorization", "") + sent.get("x-api-key", ""))
    # The proxies' own 401s echo the key they received (LiteLLM) or a masked form (OpenAI).
    with serve_vendor(vendor, api_key="tr." + secrets.token_urlsafe(24)) as server:
        async with opened(vendor, server, api_key=API_KEY) as decider:
            wrong_key = await failure(decider, fixture_request(vendor))
    assert wrong_key.kind == "authentication"
    messages.append(str(wrong_key))
    assert len(messages) >= len(KEY_FAULTS)
    for message in messages:
        assert API_KEY not in message
        assert API_KEY[3:] not in message
        assert "Received API Key" not in message
    records = [r for r in caplog.records if r.name.startswith("toolroute")]
    assert records  # the malformed answers were logged
    for record in records:
        assert API_KEY[3:] not in record.getMessage()


@pytest.mark.parametrize("vendor", FIXTURE_VENDORS)
async def test_a_one_letter_key_is_hidden_without_cutting_words_apart(vendor: str) -> None:
    # TYPESAFE_API_KEY=x once turned "expected" into "e[redacted]pected".
    with serve_vendor(vendor, api_key="x") as server:
        server.fault = Fault.error(500, message="expected a token, but x is not one")
        async with opened(vendor, server, api_key="x", retry=NO_RETRY) as decider:
            error = await failure(decider, fixture_request(vendor))
    assert "expected a token, but [redacted] is not one" in str(error)


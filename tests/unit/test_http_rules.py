"""The pure rules of the HTTP layer, plus JsonClient over httpx.MockTransport (no sockets)."""

from __future__ import annotations

import email.utils
import json
import re
from collections.abc import Callable

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute import ConfigError, ProviderError
from toolroute.providers._http.rules import (
    REDACTED,
    GiveUp,
    Retry,
    RetryPolicy,
    check_base_url,
    parse_retry_after,
    plan_retry,
    redact,
)
from toolroute.providers._http.transport import JsonClient

NOW = 1_700_000_000.0


# --- check_base_url -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.openai.com/v1", "https://api.openai.com/v1"),
        ("https://api.openai.com/v1/", "https://api.openai.com/v1"),
        ("HTTPS://Example.com:8443/openai", "HTTPS://Example.com:8443/openai"),
        ("http://localhost:11434/v1", "http://localhost:11434/v1"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://127.3.4.5/v1", "http://127.3.4.5/v1"),
        ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
    ],
)
def test_check_base_url_accepts(url: str, expected: str) -> None:
    assert check_base_url(url) == expected


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://api.example.com/v1", "loopback"),
        ("http://10.0.0.1/v1", "loopback"),
        ("http://localhost.evil.com/v1", "loopback"),
        ("ftp://api.example.com", "http"),
        ("api.example.com/v1", "http"),
        ("https:///v1", "host"),
        ("", "host"),
        ("https://user:sk-secret-value@api.example.com/v1", "password"),
        ("https://sk-secret-value@api.example.com/v1", "password"),
        ("https://api.example.com/v1?api_key=sk-secret-value", "query"),
        ("https://api.example.com/v1?", "query"),
        ("https://api.example.com/v1#sk-secret-value", "fragment"),
        ("https://api.example.com/v1 sk-secret-value", "whitespace"),
        ("https://api.example.com:99999/v1", "valid"),
        ("https://[::1/v1", "valid"),
    ],
)
def test_check_base_url_rejects_without_echoing(url: str, rule: str) -> None:
    with pytest.raises(ConfigError, match=rule) as info:
        check_base_url(url)
    assert "sk-secret-value" not in str(info.value)
    assert "example" not in str(info.value)


# --- redact ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("key sk-proj-AbCdEf0123456789xyzXYZ was rejected", "sk-proj-AbCdEf0123456789xyzXYZ"),
        ("Incorrect API key provided: sk-abc*********************wxyz.", "sk-abc****"),
        ("token pplx-0123456789abcdefABCDEFghij ok", "pplx-0123456789abcdefABCDEFghij"),
        ("id 0123456789abcdef0123456789ABCDEF99 end", "0123456789abcdef0123456789ABCDEF99"),
        ("Authorization: Bearer eyJhbGciOi.J9.abc_def-ghi= rest", "eyJhbGciOi"),
        ("authorization: bearer tok123", "tok123"),
        ('{"image": "data:image/png;base64,iVBORw0KGgo+/AAAA=="}', "iVBORw0KGgo"),
        ("see data:text/plain;charset=utf-8;base64,SGVsbG8= here", "SGVsbG8"),
    ],
)
def test_redact_hides_known_credential_shapes(text: str, hidden: str) -> None:
    out = redact(text)
    assert hidden not in out
    assert REDACTED in out


@pytest.mark.parametrize(
    "text",
    [
        "task-queue and risk-free sk-short",
        "HTTP 429 after 3 attempts; deadline 2.5 s",
        "the metadata:image is not a URL",
        "deadbeef is only 8 hex digits",
    ],
)
def test_redact_leaves_ordinary_text_alone(text: str) -> None:
    assert redact(text) == text


def test_redact_configured_secrets_longest_first() -> None:
    out = redact("a=hunter2hunter2 b=hunter2", ["hunter2", "hunter2hunter2", ""])
    assert out == f"a={REDACTED} b={REDACTED}"


_KEYS = st.text(
    alphabet=st.characters(codec="ascii", categories=["L", "N"], include_characters="-_."),
    min_size=8,
    max_size=64,
)


def _outside_markers(text: str) -> str:
    # What a reader sees besides the markers; a key may not reappear across them.
    return text.replace(REDACTED, "\0")


@given(key=_KEYS, before=st.text(), after=st.text())
def test_redact_never_leaves_a_configured_key(key: str, before: str, after: str) -> None:
    out = redact(before + key + after + key, [key])
    assert key not in _outside_markers(out)


@pytest.mark.parametrize(
    ("key", "text", "expected"),
    [
        ("x", "expected x here", f"expected {REDACTED} here"),
        ("x", "Received API Key = x, Key Hash", f"Received API Key = {REDACTED}, Key Hash"),
        ("KEY", "set API_KEY; KEY was rejected", f"set API_KEY; {REDACTED} was rejected"),
        ("ab-1", "key=ab-1;", f"key={REDACTED};"),
        ("a-", "a-a-", f"{REDACTED}{REDACTED}"),
    ],
)
def test_a_short_key_is_hidden_as_a_whole_token_and_words_stay_whole(
    key: str, text: str, expected: str
) -> None:
    assert redact(text, [key]) == expected


_SHORT_KEYS = st.text(
    alphabet=st.characters(codec="ascii", categories=["L", "N"], include_characters="-_."),
    min_size=1,
    max_size=7,
)
_WORD = st.text(
    alphabet=st.characters(codec="ascii", categories=["L", "N"], include_characters="_"),
    min_size=1,
    max_size=8,
)


@given(key=_SHORT_KEYS, before=_WORD, after=_WORD)
def test_a_short_key_inside_a_word_leaves_the_word_alone(key: str, before: str, after: str) -> None:
    word = before + key + after
    assert redact(word, [key]) == redact(word)  # only the generic patterns apply


@given(key=_SHORT_KEYS, before=st.text(), after=st.text())
def test_a_short_key_standing_alone_never_survives(key: str, before: str, after: str) -> None:
    out = redact(f"{before} {key} {after}", [key])
    alone = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(key)}(?![A-Za-z0-9_])")
    assert not alone.search(_outside_markers(out))


# --- parse_retry_after ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("1", 1.0),
        (" 120 ", 120.0),
        ("1.5", 1.5),
        (".25", 0.25),
        ("0", 0.0),
        ("-3", 0.0),
        (email.utils.formatdate(NOW + 30, usegmt=True), 30.0),
        (email.utils.formatdate(NOW - 30, usegmt=True), 0.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
    ],
)
def test_parse_retry_after_reads_seconds_and_dates(value: str, seconds: float) -> None:
    assert parse_retry_after(value, NOW) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value", [None, "", "soon", "1e3", "nan", "inf", "1,5", "Wed, 99 Foo 2015 07:28:00 GMT"]
)
def test_parse_retry_after_garbage_is_none(value: str | None) -> None:
    assert parse_retry_after(value, NOW) is None


@given(st.text())
def test_parse_retry_after_never_raises(value: str) -> None:
    result = parse_retry_after(value, NOW)
    assert result is None or result >= 0


# --- RetryPolicy and plan_retry -------------------------------------------------------------


def test_backoff_doubles_caps_and_jitters() -> None:
    policy = RetryPolicy(retries=5, backoff_s=0.5, max_backoff_s=3.0, jitter=0.5)
    assert [policy.backoff(n, draw=0.0) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
    assert policy.backoff(2, draw=0.999) == pytest.approx(0.5, abs=1e-3)


@pytest.mark.parametrize(
    "kwargs", [{"retries": -1}, {"retries": 1.5}, {"backoff_s": -0.1}, {"jitter": 1.5}]
)
def test_retry_policy_rejects_bad_values(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_plan_retry_gives_up_after_retries() -> None:
    decision = plan_retry(
        RetryPolicy(retries=1), failures=2, retry_after_s=None, remaining_s=60, draw=0
    )
    assert decision == GiveUp("gave up after 2 attempts")


def test_plan_retry_honours_retry_after_exactly_when_it_fits() -> None:
    decision = plan_retry(RetryPolicy(), failures=1, retry_after_s=1.0, remaining_s=5, draw=0.7)
    assert decision == Retry(1.0)


def test_plan_retry_refuses_retry_after_beyond_budget() -> None:
    decision = plan_retry(RetryPolicy(), failures=1, retry_after_s=30, remaining_s=5, draw=0)
    assert isinstance(decision, GiveUp)
    assert "Retry-After asks for 30 s" in decision.reason


def test_plan_retry_refuses_backoff_beyond_budget() -> None:
    decision = plan_retry(
        RetryPolicy(backoff_s=2), failures=1, retry_after_s=None, remaining_s=1, draw=0
    )
    assert isinstance(decision, GiveUp)
    assert "overrun the deadline" in decision.reason


# --- JsonClient over a mock transport -------------------------------------------------------

Handler = Callable[[httpx.Request], httpx.Response]


class FakeTime:
    """A clock that only moves when the client sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def client(
    handler: Handler, fake: FakeTime, *, key: str = "sk-" + "q" * 40, retries: int = 1
) -> JsonClient:
    return JsonClient(
        "https://api.example.com/v1",
        headers={"Authorization": f"Bearer {key}"},
        retry=RetryPolicy(retries=retries, backoff_s=0.5, jitter=0.0),
        transport=httpx.MockTransport(handler),
        sleep=fake.sleep,
        clock=fake.clock,
        rng=lambda: 0.0,
    )


def test_client_posts_json_and_returns_decoded_body() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"ok": True})

    with client(handler, FakeTime()) as c:
        assert c.post_json("/embeddings", {"input": ["a"]}, deadline_s=5) == {"ok": True}
    [request] = seen
    assert str(request.url) == "https://api.example.com/v1/embeddings"
    assert json.loads(request.content) == {"input": ["a"]}
    assert request.headers["content-type"] == "application/json"


def test_client_retries_503_with_http_date_retry_after() -> None:
    replies = [
        httpx.Response(503, headers={"Retry-After": email.utils.formatdate(usegmt=True)}),
        httpx.Response(200, json=[1]),
    ]
    fake = FakeTime()
    with client(lambda request: replies.pop(0), fake) as c:
        assert c.post_json("embeddings", {}, deadline_s=5) == [1]
    assert len(fake.sleeps) == 1
    assert fake.sleeps[0] <= 1.0


def test_client_backs_off_on_timeouts_then_gives_up() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        raise httpx.ReadTimeout("slow", request=request)

    fake = FakeTime()
    with client(handler, fake, retries=2) as c, pytest.raises(ProviderError) as info:
        c.post_json("embeddings", {}, deadline_s=10)
    assert calls == 3
    assert fake.sleeps == [0.5, 1.0]
    assert info.value.retryable
    assert isinstance(info.value.__cause__, httpx.ReadTimeout)


def test_client_does_not_follow_redirects() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(307, headers={"Location": "https://elsewhere.example/"})

    with client(handler, FakeTime()) as c, pytest.raises(ProviderError, match="HTTP 307") as info:
        c.post_json("embeddings", {}, deadline_s=5)
    assert not info.value.retryable


def test_client_rejects_oversized_body() -> None:
    c = JsonClient(
        "https://api.example.com",
        max_response_bytes=10,
        transport=httpx.MockTransport(lambda request: httpx.Response(200, content=b"[" * 50)),
    )
    with c, pytest.raises(ProviderError, match="at most 10 response bytes"):
        c.post_json("x", {}, deadline_s=5)


def test_client_refuses_absolute_paths() -> None:
    with client(lambda request: httpx.Response(200), FakeTime()) as c, pytest.raises(ConfigError):
        c.post_json("https://elsewhere.example/x", {}, deadline_s=5)


_STATUSES = st.sampled_from([200, 400, 401, 404, 429, 500, 503])


@settings(max_examples=50, deadline=None)
@given(key=_KEYS, status=_STATUSES, wrap=st.booleans(), junk=st.text(max_size=30))
def test_configured_key_never_in_error_messages(
    key: str, status: int, wrap: bool, junk: str
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        # A hostile or careless server quoting the credential back.
        echoed = f"{junk} {request.headers['authorization']} {key}"
        if wrap and status != 200:
            body = json.dumps({"error": {"message": echoed, "type": key, "code": key}})
        else:
            body = f"<html>{echoed}</html>"  # not JSON, so HTTP 200 fails too
        return httpx.Response(status, content=body.encode())

    fake = FakeTime()
    with client(handler, fake, key=key) as c:
        messages = []
        for _ in range(2):  # the second call may hit the auth latch
            try:
                c.post_json("embeddings", {}, deadline_s=5)
            except ProviderError as exc:
                messages.append(str(exc))
    assert messages
    for message in messages:
        assert key not in _outside_markers(message)

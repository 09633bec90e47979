"""``toolroute serve`` over real HTTP on 127.0.0.1: the routes, their errors, size limits,
the token, readiness, and events read by a real client as server-sent events."""

from __future__ import annotations

import json
from contextlib import aclosing
from pathlib import Path

import httpx
import pytest
import trio
from serving import served

from toolroute.events import SelectionFinished, SubscriptionStarted, from_json

QUERY = "what is the weather in Oslo tomorrow"


async def test_select_over_http_is_the_engines_selection(tmp_path: Path) -> None:
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        reply = await client.post("/v1/select", json={"query": QUERY, "max_tools": 3})
        direct = await service.engine.select(QUERY, max_tools=3)
    assert reply.status_code == 200
    body = reply.json()
    assert body["tool_ids"] == list(direct.tool_ids)
    assert body["outcome"] == str(direct.outcome)
    assert len(body["scores"]) == len(body["tool_ids"]) <= 3


async def test_prepare_step_pages_after_a_step_without_a_tool_call(tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "send an email to Ana about the launch"}]
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        first = (
            await client.post("/v1/prepare-step", json={"messages": messages, "session": "s"})
        ).json()
        messages.append({"role": "assistant", "content": "Which address?"})
        second = (
            await client.post("/v1/prepare-step", json={"messages": messages, "session": "s"})
        ).json()
    assert first["page"] == 0
    assert "send_email" in first["tool_ids"]
    assert second["page"] == 1


async def test_route_without_a_router_keeps_every_server(tmp_path: Path) -> None:
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        body = (await client.post("/v1/route", json={"query": "list the open issues"})).json()
        servers = [server.id for server in service.engine.catalog.servers]
    assert body["outcome"] == "failed_open"
    assert body["selected"] == servers
    assert body["excluded"] == []


async def test_decide_without_a_provider_answers_null(tmp_path: Path) -> None:
    question = {"type": "boolean", "instructions": "Is this about weather?"}
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        reply = await client.post("/v1/decide", json={"state": QUERY, "questions": {"w": question}})
    assert reply.status_code == 200
    assert reply.json() == {"result": None}


async def test_search_tools_shows_what_it_found_on_the_sessions_next_step(tmp_path: Path) -> None:
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        found = await client.post(
            "/v1/search-tools",
            json={
                "arguments": {"query": "run a SQL query on the database"},
                "session": "s",
                "k": 2,
            },
        )
        names = [tool["name"] for tool in found.json()["tools"]]
        step = await client.post(
            "/v1/prepare-step", json={"messages": "hello there", "session": "s"}
        )
    assert found.status_code == 200
    assert "run_query" in names
    assert set(names) <= set(step.json()["tool_ids"])


async def test_update_adds_a_tool_that_select_finds_next(tmp_path: Path) -> None:
    tool = {"name": "convert_currency", "description": "Convert money between currencies"}
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        updated = await client.post("/v1/update", json={"add": [tool]})
        picked = await client.post("/v1/select", json={"query": "convert 20 euros to currencies"})
        clash = await client.post("/v1/update", json={"add": [tool]})
    assert updated.json() == {"tools": 51, "served": 51}
    assert "convert_currency" in picked.json()["tool_ids"]
    assert clash.status_code == 422
    assert clash.json()["error"]["type"] == "invalid_catalog"


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"query": QUERY, "max_tool": 3}, "max_tool", "unknown field"),
        ({"query": 7}, "query", "expected a string, got 7"),
        ({}, "query", "required"),
        ({"query": QUERY, "allow": ["get_forecast", 3]}, "allow.1", "expected a string"),
        ({"query": QUERY, "max_tools": 0}, "max_tools", "at least 1"),
        ({"query": QUERY, "strategy": "fuzzy"}, "strategy", "expected one of"),
        ({"query": QUERY, "threshold": True}, "threshold", "got true"),
    ],
)
async def test_a_body_that_misses_its_schema_is_400_naming_the_field(
    tmp_path: Path, body: dict[str, object], field: str, words: str
) -> None:
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        reply = await client.post("/v1/select", json=body)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["type"], error["field"]) == ("invalid_body", field)
    assert words in error["message"]


async def test_a_session_id_past_its_bound_is_400_naming_the_field(tmp_path: Path) -> None:
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        long = await client.post(
            "/v1/prepare-step", json={"messages": QUERY, "session": "s" * 1025}
        )
        bound = await client.post(
            "/v1/prepare-step", json={"messages": QUERY, "session": "s" * 1024}
        )
    assert long.status_code == 400
    error = long.json()["error"]
    assert (error["type"], error["field"]) == ("invalid_body", "session")
    assert "at most 1024 characters, got a string of 1025" in error["message"]
    assert bound.status_code == 200


async def test_a_value_the_engine_refuses_is_422_with_its_message_and_field(tmp_path: Path) -> None:
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        unknown = await client.post(
            "/v1/select", json={"query": QUERY, "always_active": ["no_such_tool"]}
        )
        removed = await client.post("/v1/update", json={"remove": ["no_such_tool"]})
        question = await client.post(
            "/v1/decide",
            json={"state": 1, "questions": {"q": {"type": "choice", "instructions": "Which?"}}},
        )
    assert unknown.status_code == 422
    assert unknown.json()["error"]["field"] == "always_active"
    assert "no_such_tool" in unknown.json()["error"]["message"]
    assert removed.status_code == 422
    assert removed.json()["error"]["field"] == "remove"
    assert question.status_code == 400
    assert question.json()["error"]["field"] == "questions.q.options"


async def test_what_is_not_a_json_object_is_refused_before_the_engine(tmp_path: Path) -> None:
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        broken = await client.post(
            "/v1/select", content=b"{nope", headers={"content-type": "application/json"}
        )
        array = await client.post("/v1/select", json=[QUERY])
        form = await client.post("/v1/select", data={"query": QUERY})
        missing = await client.post("/v1/nothing", json={})
        method = await client.get("/v1/select")
    assert (broken.status_code, broken.json()["error"]["type"]) == (400, "invalid_json")
    assert (array.status_code, array.json()["error"]["type"]) == (400, "invalid_body")
    assert (form.status_code, form.json()["error"]["type"]) == (415, "unsupported_media_type")
    assert (missing.status_code, missing.json()["error"]["type"]) == (404, "not_found")
    assert (method.status_code, method.headers["allow"]) == (405, "POST")


async def test_bodies_past_the_limit_are_413_declared_or_streamed(tmp_path: Path) -> None:
    big = json.dumps({"query": "x" * 3000}).encode()

    # Chunked, with no length: the server can only count while it reads. (A raw client:
    # httpx leaves its body generator unfinished when the server answers before the end.)
    pieces = [big[start : start + 500] for start in range(0, len(big), 500)]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces) + b"0\r\n\r\n"
    head = (
        b"POST /v1/select HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )

    async with (
        served(tmp_path, max_body_bytes=2048) as service,
        httpx.AsyncClient(base_url=service.url) as client,
    ):
        declared = await client.post(
            "/v1/select", content=big, headers={"content-type": "application/json"}
        )
        raw = await trio.open_tcp_stream("127.0.0.1", int(service.url.rsplit(":", 1)[1]))
        await raw.send_all(head + chunked)
        answer = b""
        while b"}}" not in answer:
            answer += await raw.receive_some(65536)
        await raw.aclose()
        fits = await client.post("/v1/select", json={"query": "x" * 1500})
        # The connection that was refused mid-body closed; a new one still serves.
        after = await client.post("/v1/select", json={"query": QUERY})
    assert declared.status_code == 413
    assert "at most 2048 bytes" in declared.json()["error"]["message"]
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"at most 2048 bytes" in answer
    assert fits.status_code == 200
    assert after.status_code == 200


async def test_an_oversized_request_head_is_refused(tmp_path: Path) -> None:
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        reply = await client.get("/health", headers={"x-padding": "p" * 40_000})
        after = await client.get("/health")
    assert reply.status_code == 431
    assert reply.json()["error"]["type"] == "too_large"
    assert after.status_code == 200


async def test_with_a_token_every_route_but_the_probes_needs_it(tmp_path: Path) -> None:
    async with (
        served(tmp_path, token="s3cret") as service,
        httpx.AsyncClient(base_url=service.url) as client,
    ):
        none = await client.post("/v1/select", json={"query": QUERY})
        wrong = await client.post(
            "/v1/select", json={"query": QUERY}, headers={"authorization": "Bearer nope"}
        )
        basic = await client.get("/openapi.json", headers={"authorization": "Basic s3cret"})
        right = await client.post(
            "/v1/select", json={"query": QUERY}, headers={"authorization": "Bearer s3cret"}
        )
        probes = [await client.get("/health"), await client.get("/ready")]
    for reply in (none, wrong, basic):
        assert reply.status_code == 401
        assert reply.headers["www-authenticate"] == "Bearer"
        assert reply.json()["error"]["field"] == "Authorization"
    assert right.status_code == 200
    assert [p.status_code for p in probes] == [200, 200]


async def test_ready_is_503_while_warming_up_and_once_draining(tmp_path: Path) -> None:
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        service.app.warmed = False
        warming = await client.get("/ready")
        service.app.mark_ready()
        ready = await client.get("/ready")
        service.app.drain()
        draining = await client.get("/ready")
        health = await client.get("/health")
    assert (warming.status_code, warming.json()["reason"]) == (503, "warming up")
    assert (ready.status_code, ready.json()["ready"]) == (200, True)
    assert (draining.status_code, draining.json()["reason"]) == (503, "shutting down")
    assert health.status_code == 200


async def _sse_frames(lines: object, wanted: int) -> list[dict[str, str]]:
    """Frames of an event stream (comments skipped) until ``wanted`` have come."""
    frames: list[dict[str, str]] = []
    frame: dict[str, str] = {}
    async for line in lines:  # type: ignore[attr-defined]
        if line == "":
            if frame:
                frames.append(frame)
                frame = {}
                if len(frames) == wanted:
                    return frames
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(": ")
        frame[key] = value
    return frames


async def test_events_arrive_as_server_sent_events_and_end_when_draining(tmp_path: Path) -> None:
    async with (
        served(tmp_path) as service,
        httpx.AsyncClient(base_url=service.url) as client,
        client.stream("GET", "/v1/events") as stream,
    ):
        assert stream.headers["content-type"] == "text/event-stream"
        async with aclosing(stream.aiter_lines()) as lines:
            assert await lines.__anext__() == ": subscribed"  # subscribed from here on
            await client.post("/v1/select", json={"query": QUERY})
            with trio.fail_after(30):
                snapshot, frame = await _sse_frames(lines, 2)
            # The stream begins with the engine's state, then every event from there.
            assert snapshot["event"] == "subscription.started"
            assert snapshot["id"] == "1"
            assert isinstance(from_json(snapshot["data"]), SubscriptionStarted)
            event = from_json(frame["data"])
            assert frame["event"] == "selection.finished"
            assert frame["id"] == "2"
            assert isinstance(event, SelectionFinished)
            assert event.tool_ids
            service.app.drain()
            with trio.fail_after(30):
                rest = [line async for line in lines]  # the stream ends: no hang
    assert all(not line.startswith("event:") for line in rest)


async def test_draining_sends_the_events_already_buffered_before_the_stream_ends(
    tmp_path: Path,
) -> None:
    # A client slower than the engine: events wait in its buffer when the drain begins.
    # They were published before the stop, so the stream sends them, then ends.
    async with served(tmp_path) as service:
        bodies: list[bytes] = []
        behind = trio.Event()
        reading = trio.Event()
        ended = trio.Event()

        async def send(message: dict[str, object]) -> None:
            if message["type"] != "http.response.body":
                return
            body = message.get("body", b"")
            assert isinstance(body, bytes)
            bodies.append(body)
            if not message.get("more_body", False):
                ended.set()
            if b"subscription.started" in body:
                behind.set()
                await reading.wait()

        async def receive() -> dict[str, object]:
            await trio.sleep_forever()
            raise AssertionError("unreachable")

        scope = {"type": "http", "method": "GET", "path": "/v1/events", "query_string": b""}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.app, {**scope, "headers": []}, receive, send)
            with trio.fail_after(30):
                await behind.wait()
            for n in range(5):
                await service.engine.select(f"{QUERY} {n}")
            service.app.drain()
            reading.set()
            with trio.fail_after(30):
                await ended.wait()
    assert b"".join(bodies).count(b"event: selection.finished") == 5


async def _open_events(url: str) -> tuple[trio.SocketStream, bytes]:
    """A raw client of ``/v1/events``, left open: it can walk away mid-stream (as a browser
    tab does), which httpx's streaming iterators do not do cleanly."""
    port = int(url.rsplit(":", 1)[1])
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(b"GET /v1/events HTTP/1.1\r\nHost: test\r\n\r\n")
    seen = b""
    while b": subscribed" not in seen:
        seen += await stream.receive_some(65536)
    return stream, seen


async def test_a_client_that_leaves_the_stream_is_unsubscribed(tmp_path: Path) -> None:
    async with served(tmp_path) as service:
        stream, head = await _open_events(service.url)
        assert head.startswith(b"HTTP/1.1 200 ")
        assert service.engine.statistics().events.subscribers == 1
        await stream.aclose()
        with trio.fail_after(30):
            while service.engine.statistics().events.subscribers:  # noqa: ASYNC110
                await trio.sleep(0.01)


async def test_an_idle_event_stream_sends_keep_alive_comments(tmp_path: Path) -> None:
    async with served(tmp_path, heartbeat_s=0.05) as service:
        stream, seen = await _open_events(service.url)
        with trio.fail_after(30):
            while b": keep-alive" not in seen:
                seen += await stream.receive_some(65536)
        await stream.aclose()


async def test_a_bad_event_buffer_is_400(tmp_path: Path) -> None:
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        word = await client.get("/v1/events?buffer=lots")
        zero = await client.get("/v1/events?buffer=0")
        superscript = await client.get("/v1/events?buffer=%C2%B2")  # "²": a digit to isdigit
    assert (word.status_code, word.json()["error"]["field"]) == (400, "buffer")
    assert (zero.status_code, zero.json()["error"]["field"]) == (400, "buffer")
    assert (superscript.status_code, superscript.json()["error"]["field"]) == (400, "buffer")


def _select_head(body: bytes, *extra: bytes) -> bytes:
    return (
        b"POST /v1/select HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        + b"".join(line + b"\r\n" for line in extra)
        + b"Content-Length: %d\r\n\r\n" % len(body)
    )


async def test_a_client_that_expects_100_continue_gets_it(tmp_path: Path) -> None:
    body = json.dumps({"query": QUERY}).encode()
    async with served(tmp_path) as service:
        port = int(service.url.rsplit(":", 1)[1])
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(_select_head(body, b"Expect: 100-continue"))
        with trio.fail_after(30):
            first = await stream.receive_some(65536)
            await stream.send_all(body)
            answer = b""
            while b"tool_ids" not in answer:
                answer += await stream.receive_some(65536)
        await stream.aclose()
    assert first.startswith(b"HTTP/1.1 100 ")
    assert b"HTTP/1.1 200 " in first + answer


async def test_a_client_gone_mid_body_is_no_error_of_ours(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    body = json.dumps({"query": QUERY}).encode()
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        port = int(service.url.rsplit(":", 1)[1])
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(_select_head(body) + body[:5])
        await trio.sleep(0.1)
        await stream.aclose()
        after = await client.post("/v1/select", json={"query": QUERY})
    assert after.status_code == 200
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


async def test_a_body_that_stalls_is_given_up_on(tmp_path: Path) -> None:
    body = json.dumps({"query": QUERY}).encode()
    async with served(tmp_path, request_timeout_s=0.2) as service:
        stream = await trio.open_tcp_stream("127.0.0.1", int(service.url.rsplit(":", 1)[1]))
        await stream.send_all(_select_head(body) + body[:5])  # and then nothing
        answer = b""
        with trio.fail_after(30):
            while chunk := await stream.receive_some(65536):
                answer += chunk
        await stream.aclose()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"request_timeout" in answer


async def _exchange_raw(service_url: str, request: bytes) -> bytes:
    """Send ``request`` on a fresh connection and read until the server closes it."""
    stream = await trio.open_tcp_stream("127.0.0.1", int(service_url.rsplit(":", 1)[1]))
    answer = b""
    with trio.fail_after(30):
        await stream.send_all(request)
        while chunk := await stream.receive_some(65536):
            answer += chunk
    await stream.aclose()
    return answer


@pytest.mark.parametrize(
    "request_bytes",
    [
        pytest.param(b"GET /health HTTP/1.1\r\n\r\n", id="no-host"),
        pytest.param(
            b"POST /v1/select HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n", id="bad-length"
        ),
        pytest.param(b"\x16\x03\x01\x00\xa5\x01\x00 TLS hello\r\n\r\n", id="tls-on-plain-http"),
        pytest.param("GET /hé HTTP/1.1\r\nHost: t\r\n\r\n".encode(), id="non-ascii-target"),
    ],
)
async def test_a_malformed_request_head_is_answered_400_then_closed(
    tmp_path: Path, request_bytes: bytes
) -> None:
    async with served(tmp_path) as service:
        answer = await _exchange_raw(service.url, request_bytes)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), answer
    assert b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert error["type"] == "bad_request"
    assert error["message"].startswith("expected an HTTP/1.1 request, got one that does not")


async def test_a_broken_chunked_body_is_answered_400_then_closed(tmp_path: Path) -> None:
    head = (
        b"POST /v1/select HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    async with served(tmp_path) as service:
        answer = await _exchange_raw(service.url, head + b"zz\r\n{}\r\n")
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert b"incomplete_body" in answer


async def test_head_on_a_probe_gets_its_answer_without_a_body_and_elsewhere_405(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        head = await client.head("/health")  # how many uptime monitors probe
        after = await client.get("/health")
        not_here = await client.head("/v1/select")
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == after.headers["content-length"]
    assert after.status_code == 200
    assert after.json()["status"] == "ok"
    assert not_here.status_code == 405
    assert not_here.headers["allow"] == "POST"
    assert not_here.content == b""
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


async def test_json_nested_past_what_the_parser_takes_is_400_not_500(tmp_path: Path) -> None:
    deep = b'{"query": "x", "allow": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        reply = await client.post(
            "/v1/select", content=deep, headers={"content-type": "application/json"}
        )
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_json"
    assert "nested" in error["message"]


async def test_what_is_not_an_object_is_named_in_json_terms(tmp_path: Path) -> None:
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        empty = await client.post("/v1/select", headers={"content-type": "application/json"})
        array = await client.post("/v1/select", json=[QUERY])
        null = await client.post(
            "/v1/select", content=b"null", headers={"content-type": "application/json"}
        )
    assert empty.json()["error"]["message"] == "expected a JSON object, got an empty body"
    assert array.json()["error"]["message"] == "expected a JSON object, got an array"
    assert null.json()["error"]["message"] == "expected a JSON object, got null"


async def test_lone_surrogates_in_a_request_or_the_catalogue_are_answered_not_500(
    tmp_path: Path,
) -> None:
    # JSON may spell a lone UTF-16 surrogate (a JavaScript string cut mid-emoji does); it has
    # no UTF-8 form, so the answer spells it as the same escape instead of failing.
    step = b'{"messages": "book a flight \\ud83c", "session": "s\\udfff"}'
    tool = b'{"add": [{"name": "odd\\ud800", "description": "an odd forecast tool"}]}'
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        json_type = {"content-type": "application/json"}
        prepared = await client.post("/v1/prepare-step", content=step, headers=json_type)
        added = await client.post("/v1/update", content=tool, headers=json_type)
        selected = await client.post(
            "/v1/select",
            content=b'{"query": "odd forecast", "allow": ["odd\\ud800"]}',
            headers=json_type,
        )
    assert prepared.status_code == 200
    assert json.loads(prepared.content)["query"] == "book a flight \ud83c"
    assert added.status_code == 200
    assert selected.status_code == 200
    assert json.loads(selected.content)["tool_ids"] == ["odd\ud800"]

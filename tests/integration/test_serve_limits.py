"""``toolroute serve`` against clients that hold connections: a cap on connections (past it a
request is answered ``503`` at once, the probes still answer) and a total time for a request
to arrive (a head or body trickling in is ``408``). Real sockets on 127.0.0.1; the timeouts
under test are short and the clients clearly slower (they never finish), so a loaded machine
only makes them slower still; ``fail_after`` bounds are loose, for a hang only."""

from __future__ import annotations

import json
from pathlib import Path

import trio
from serving import served

#: Loose: only a hang (the defect) should ever reach it.
HANG_S = 30.0
CLOSE = b"Connection: close\r\n\r\n"


async def _connect(url: str) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", int(url.rsplit(":", 1)[1]))


async def _read_until_closed(stream: trio.SocketStream) -> bytes:
    answer = b""
    with trio.fail_after(HANG_S):
        while chunk := await stream.receive_some(65536):
            answer += chunk
    return answer


async def _read_one(stream: trio.SocketStream) -> bytes:
    """One answer with a Content-Length body, on a connection that stays open."""
    data = b""
    with trio.fail_after(HANG_S):
        while True:
            head, found, body = data.partition(b"\r\n\r\n")
            if found:
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.lower().split(b"\r\n")
                    if line.startswith(b"content-length:")
                )
                if len(body) >= length:
                    return data
            chunk = await stream.receive_some(65536)
            assert chunk, f"closed mid-answer: {data!r}"
            data += chunk


async def _trickle_then_read(stream: trio.SocketStream, first: bytes, drip: bytes) -> bytes:
    """Send ``first``, then ``drip`` a byte at a time every 0.05 s, never finishing; read
    what the server answers until it closes."""

    async def trickle() -> None:
        await stream.send_all(first)
        for i in range(len(drip)):
            await trio.sleep(0.05)
            try:
                await stream.send_all(drip[i : i + 1])
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trickle)
        answer = await _read_until_closed(stream)
        nursery.cancel_scope.cancel()
    await stream.aclose()
    return answer


def _error_of(answer: bytes) -> tuple[bytes, dict[str, object]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.lower(), json.loads(body)["error"]


async def test_a_request_head_that_trickles_in_is_answered_408_then_closed(
    tmp_path: Path,
) -> None:
    # Each byte comes well within the idle timeout; the head as a whole never ends.
    async with served(tmp_path, request_timeout_s=0.5) as service:
        stream = await _connect(service.url)
        answer = await _trickle_then_read(stream, b"GET /health HTTP/1.1\r\n", b"X-Slow: y" * 2000)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    head, error = _error_of(answer)
    assert b"connection: close" in head
    assert error["type"] == "request_timeout"
    assert "0.5 s" in str(error["message"])


async def test_a_request_body_that_trickles_in_is_answered_408_then_closed(
    tmp_path: Path,
) -> None:
    head = (
        b"POST /v1/select HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Content-Length: 5000\r\n\r\n"
    )
    async with served(tmp_path, request_timeout_s=0.5) as service:
        stream = await _connect(service.url)
        answer = await _trickle_then_read(stream, head + b'{"query": "', b"w" * 4000)
        # The service goes on serving others.
        after = await _connect(service.url)
        await after.send_all(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        health = await _read_one(after)
        await after.aclose()
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    head_out, error = _error_of(answer)
    assert b"connection: close" in head_out
    assert error["type"] == "request_timeout"
    assert health.startswith(b"HTTP/1.1 200 ")


async def test_a_connection_that_sends_nothing_is_closed_without_an_answer(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, request_timeout_s=0.3) as service:
        stream = await _connect(service.url)
        answer = await _read_until_closed(stream)
        await stream.aclose()
    assert answer == b""


async def test_an_idle_keep_alive_connection_is_bounded_by_idle_not_the_request_time(
    tmp_path: Path,
) -> None:
    request = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
    async with served(tmp_path, request_timeout_s=0.5, idle_s=60.0) as service:
        stream = await _connect(service.url)
        await stream.send_all(request)
        first = await _read_one(stream)
        await trio.sleep(1.5)  # longer than a request may take to arrive, far within idle
        await stream.send_all(request)
        second = await _read_one(stream)
        await stream.aclose()
    assert first.startswith(b"HTTP/1.1 200 ")
    assert second.startswith(b"HTTP/1.1 200 ")


async def test_past_the_connection_cap_requests_are_503_and_the_probes_still_answer(
    tmp_path: Path,
) -> None:
    health = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
    async with served(tmp_path, max_connections=3) as service:
        held = [await _connect(service.url) for _ in range(3)]
        for stream in held:  # each is being served (answered, kept alive)
            await stream.send_all(health)
            assert (await _read_one(stream)).startswith(b"HTTP/1.1 200 ")

        async def one(request: bytes) -> bytes:
            stream = await _connect(service.url)
            await stream.send_all(request)
            answer = await _read_until_closed(stream)
            await stream.aclose()
            return answer

        body = b'{"query": "weather"}'
        over = await one(
            b"POST /v1/select HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n%s%s" % (len(body), CLOSE, body)
        )
        # (``Connection: close``: read to the end whether or not past the cap.)
        alive = await one(b"GET /health HTTP/1.1\r\nHost: t\r\n" + CLOSE)
        ready = await one(b"GET /ready HTTP/1.1\r\nHost: t\r\n" + CLOSE)
        # The connections being served are served on.
        await held[0].send_all(health)
        still = await _read_one(held[0])
        # One closes: a new connection is served again.
        await held.pop().aclose()
        with trio.fail_after(HANG_S):
            while True:  # the server sees the close a moment later
                again = await one(b"GET /openapi.json HTTP/1.1\r\nHost: t\r\n" + CLOSE)
                if not again.startswith(b"HTTP/1.1 503 "):
                    break
                await trio.sleep(0.05)
        for stream in held:
            await stream.aclose()

    assert over.startswith(b"HTTP/1.1 503 "), over
    head, error = _error_of(over)
    assert b"retry-after: 1" in head
    assert b"connection: close" in head
    assert error["type"] == "overloaded"
    assert "at most 3 connections" in str(error["message"])
    assert alive.startswith(b"HTTP/1.1 200 "), alive
    assert b"connection: close" in alive.partition(b"\r\n\r\n")[0].lower()
    assert ready.startswith(b"HTTP/1.1 503 "), ready
    assert json.loads(ready.partition(b"\r\n\r\n")[2])["reason"] == "at the connection limit"
    assert still.startswith(b"HTTP/1.1 200 ")
    assert again.startswith(b"HTTP/1.1 200 ")


async def test_silent_connections_past_the_cap_cannot_keep_the_probes_waiting(
    tmp_path: Path,
) -> None:
    # The cap is full and as many silent connections past it as are answered at once: the
    # next connection (a probe) waits for one of them to close. They get the short head
    # timeout, not the whole request's (which would outlast ``HANG_S``).
    health = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
    async with served(
        tmp_path, max_connections=1, overflow=2, request_timeout_s=120.0, head_timeout_s=0.3
    ) as service:
        held = await _connect(service.url)
        await held.send_all(health)  # served, then kept alive (idle): the cap is full
        assert (await _read_one(held)).startswith(b"HTTP/1.1 200 ")
        silent = [await _connect(service.url) for _ in range(2)]
        probe = await _connect(service.url)
        await probe.send_all(b"GET /health HTTP/1.1\r\nHost: t\r\n" + CLOSE)
        assert (await _read_until_closed(probe)).startswith(b"HTTP/1.1 200 ")
        for stream in silent:  # closed without an answer (no request began)
            assert await _read_until_closed(stream) == b""
            await stream.aclose()
        await probe.aclose()
        await held.aclose()


async def test_a_request_head_slower_than_the_head_timeout_is_answered_408(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, request_timeout_s=120.0, head_timeout_s=0.3) as service:
        stream = await _connect(service.url)
        answer = await _trickle_then_read(stream, b"GET /health HTTP/1.1\r\n", b"Host: t" * 100)
    head, error = _error_of(answer)
    assert head.startswith(b"http/1.1 408 ")
    assert error["type"] == "request_timeout"
    assert "expected the request line and headers within 0.3 s" in str(error["message"])

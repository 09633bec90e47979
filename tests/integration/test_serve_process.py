"""``toolroute serve`` as a process: the token from the environment, the loopback rule, and a
graceful stop on SIGTERM and SIGINT that finishes the request in flight. Time bounds are loose
(a loaded machine starts Python slowly); what is asserted is order and outcome."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from serving import ServeProcess, demo_catalog_file, start_serve

from toolroute._cli.main import main
from toolroute._serve.run import check_token_rule, is_loopback

EXIT_S = 60.0


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServeProcess]:
    catalog = demo_catalog_file(tmp_path)
    args = ["--catalog", str(catalog), "--embedder", "none", "--port", "0", "--grace", "30"]
    args += ["--cache-dir", str(tmp_path / "cache"), "--token-env", "SERVE_TEST_TOKEN"]
    # With the newline a secret file often ends in: a header can never carry it.
    running = start_serve(args, env={"SERVE_TEST_TOKEN": "tok3n\n"})
    yield running
    running.close()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _read_response(sock: socket.socket) -> bytes:
    sock.settimeout(EXIT_S)
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_the_token_is_required_and_sigterm_lets_the_request_in_flight_finish(
    service: ServeProcess,
) -> None:
    # One process for both (each start costs seconds): the token from its environment first.
    with httpx.Client(base_url=service.url) as client:
        refused = client.post("/v1/select", json={"query": "weather"})
        served = client.post(
            "/v1/select", json={"query": "weather"}, headers={"authorization": "Bearer tok3n"}
        )
        health = client.get("/health")
    assert refused.status_code == 401
    assert served.status_code == 200
    assert served.json()["strategy"] == "keyword"  # --embedder none
    assert health.status_code == 200

    body = json.dumps({"query": "what is the weather in Oslo"}).encode()
    head = (
        f"POST /v1/select HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer tok3n\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", _port(service.url))) as sock:
        sock.sendall(head + body[:10])  # in flight: the head is read, the body is not done
        time.sleep(0.5)
        service.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + EXIT_S
        while time.monotonic() < deadline:  # the listener closes: new connections are refused
            try:
                socket.create_connection(("127.0.0.1", _port(service.url)), timeout=1).close()
            except OSError:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the listener stayed open after SIGTERM")
        assert service.process.poll() is None  # still finishing the request in flight
        sock.sendall(body[10:])
        answer = _read_response(sock)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert b"connection: close" in answer.lower()
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["tool_ids"]
    assert service.process.wait(EXIT_S) == 0


def test_sigint_ends_the_event_streams_and_exits(service: ServeProcess) -> None:
    with socket.create_connection(("127.0.0.1", _port(service.url))) as sock:
        sock.sendall(
            b"GET /v1/events HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer tok3n\r\n\r\n"
        )
        sock.settimeout(EXIT_S)
        seen = b""
        while b": subscribed" not in seen:
            seen += sock.recv(65536)
        service.process.send_signal(signal.SIGINT)
        while chunk := sock.recv(65536):  # the stream ends (chunked: a last empty chunk)
            seen += chunk
    assert seen.endswith(b"0\r\n\r\n")
    assert service.process.wait(EXIT_S) == 0


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "example.org"])
def test_the_command_refuses_to_listen_beyond_loopback_without_a_token(
    tmp_path: Path, host: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLROUTE_TOKEN", raising=False)
    catalog = demo_catalog_file(tmp_path)
    assert main(["serve", "--catalog", str(catalog), "--host", host, "--embedder", "none"]) == 2
    error = capsys.readouterr().err
    assert "$TOOLROUTE_TOKEN" in error
    assert repr(host) in error


def test_a_blank_token_is_no_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLROUTE_TOKEN", " \n")
    catalog = demo_catalog_file(tmp_path)
    args = ["serve", "--catalog", str(catalog), "--host", "0.0.0.0", "--embedder", "none"]
    assert main(args) == 2
    assert "$TOOLROUTE_TOKEN" in capsys.readouterr().err


def test_a_token_allows_any_host_and_loopback_needs_none() -> None:
    check_token_rule("0.0.0.0", "tok3n", "T")
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.8.9.10"):
        check_token_rule(host, None, "T")


@given(st.ip_addresses())
def test_loopback_is_exactly_the_loopback_addresses(address: object) -> None:
    host = str(address)
    assert is_loopback(host) == address.is_loopback  # type: ignore[attr-defined]


def test_a_start_that_fails_says_why_before_listening(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    result = subprocess.run(
        ["toolroute", "serve", "--catalog", str(missing), "--embedder", "none"],
        capture_output=True,
        text=True,
        timeout=EXIT_S,
    )
    assert result.returncode == 2
    assert "nope.json" in result.stderr


def test_a_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                "toolroute",
                "serve",
                "--catalog",
                str(demo_catalog_file(tmp_path)),
                "--embedder",
                "none",
                "--port",
                str(port),
                "--cache-dir",
                str(tmp_path / "c"),
            ],
            capture_output=True,
            text=True,
            timeout=EXIT_S,
        )
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_connection_cap_and_the_request_timeout_come_from_the_command_line(
    tmp_path: Path,
) -> None:
    catalog = demo_catalog_file(tmp_path)
    args = ["--catalog", str(catalog), "--embedder", "none", "--port", "0"]
    args += ["--cache-dir", str(tmp_path / "cache")]
    running = start_serve([*args, "--max-connections", "1", "--request-timeout", "1"])
    try:
        address = ("127.0.0.1", _port(running.url))
        with socket.create_connection(address) as held, socket.create_connection(address) as over:
            held.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
            assert _read_response(held).startswith(b"HTTP/1.1 200 ")
            over.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: t\r\n\r\n")
            refused = _read_response(over)
            # The one connection served sends half a head, and then nothing.
            held.sendall(b"GET /health HTTP/1.1\r\n")
            late = _read_response(held)
    finally:
        running.close()
    assert refused.startswith(b"HTTP/1.1 503 "), refused
    assert b"at most 1 connection at once" in refused
    assert late.startswith(b"HTTP/1.1 408 "), late
    assert b"within 1 s" in late


def test_the_head_timeout_comes_from_the_command_line(tmp_path: Path) -> None:
    catalog = demo_catalog_file(tmp_path)
    args = ["--catalog", str(catalog), "--embedder", "none", "--port", "0"]
    args += ["--cache-dir", str(tmp_path / "cache"), "--head-timeout", "0.5"]
    running = start_serve(args)
    try:
        address = ("127.0.0.1", _port(running.url))
        with socket.create_connection(address) as client:
            client.sendall(b"GET /health HTTP/1.1\r\n")  # half a head, and then nothing
            late = _read_response(client)
    finally:
        running.close()
    assert late.startswith(b"HTTP/1.1 408 "), late
    assert b"line and headers within 0.5 s" in late


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--max-connections", "0", "expected an integer of at least 1, got '0'"),
        ("--request-timeout", "-1", "expected a number above 0, got '-1'"),
        ("--head-timeout", "0", "expected a number above 0, got '0'"),
    ],
)
def test_a_cap_or_timeout_that_is_not_positive_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, words: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--catalog", str(tmp_path / "tools.json"), flag, value])
    assert exit_.value.code == 2
    assert words in capsys.readouterr().err

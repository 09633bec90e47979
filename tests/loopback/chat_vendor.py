"""A scripted chat model on 127.0.0.1: OpenAI ``/v1/chat/completions`` and Anthropic
``/v1/messages``, one scripted reply per request (re-ranking and enrichment tests)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from .server import LoopbackServer, serving


@dataclass
class Answer:
    """One scripted reply: the model's text (or a function of the prompt), or a raw body."""

    content: str | Callable[[str], str] = '{"tools": []}'
    status: int = 200
    raw: bytes | None = None
    hang_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


class Vendor(LoopbackServer):
    """OpenAI ``/v1/chat/completions`` and Anthropic ``/v1/messages`` on 127.0.0.1."""

    def __init__(self) -> None:
        super().__init__(_VendorHandler)
        self.script: deque[Answer] = deque()
        #: The reply once the script is used up.
        self.default = Answer()
        self.prompts: list[str] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()

    def then(self, *answers: Answer) -> None:
        with self.lock:
            self.script.extend(answers)


class _VendorHandler(BaseHTTPRequestHandler):
    server: Vendor

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        prompt = payload["messages"][-1]["content"]
        with self.server.lock:
            self.server.prompts.append(prompt)
            self.server.paths.append(self.path)
            answer = self.server.script.popleft() if self.server.script else self.server.default
        if answer.hang_s:
            self.server.release.wait(answer.hang_s)
        text = answer.content(prompt) if callable(answer.content) else answer.content
        if answer.raw is not None:
            data = answer.raw
        elif answer.status != 200:
            data = json.dumps({"error": {"type": "rate_limit_error", "message": "slow"}}).encode()
        elif self.path == "/v1/chat/completions":
            message = {"role": "assistant", "content": text}
            data = json.dumps({"choices": [{"index": 0, "message": message}]}).encode()
        elif self.path == "/v1/messages":
            data = json.dumps({"content": [{"type": "text", "text": text}]}).encode()
        else:
            self.send_error(404)
            return
        self.send_response(answer.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def serve_chat() -> Iterator[Vendor]:
    """Serve a scripted chat model for the ``with`` block; hanging replies are released."""
    with serving(Vendor()) as server:
        yield server

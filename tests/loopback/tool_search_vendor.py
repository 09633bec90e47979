"""A vendor that plays the client-executed tool-search turn on 127.0.0.1: Anthropic
``/v1/messages`` and OpenAI ``/v1/responses``, in the shapes recorded in
``tests/fixtures/tool_search/``.

Turn 1 (the user's request, deferred tools and the host's search tool): the model asks for a
search with the user's words. Turn 2 (the host's answer appended): the vendor checks the answer
as the real API would (the id answers the search call; every reference or loaded definition is
a deferred tool of the request) and the model calls the first tool found. Anything else is a
400 with the vendor's error envelope, naming what was wrong.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from .server import LoopbackServer, serving

SEARCH_TOOL = "search_tools"


class Refused(Exception):
    """The request is one the vendor would reject (400)."""


@dataclass
class Seen:
    """What the vendor saw: every request's tools block and the tools each search loaded."""

    tool_blocks: list[list[dict[str, Any]]] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    loaded: list[list[str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class ToolSearchVendor(LoopbackServer):
    def __init__(self) -> None:
        super().__init__(_Handler)
        self.seen = Seen()
        self.lock = threading.Lock()

    def url(self, path: str) -> str:
        return self.root + path


class _Handler(BaseHTTPRequestHandler):
    server: ToolSearchVendor

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        try:
            with self.server.lock:
                self.server.seen.tool_blocks.append(payload.get("tools", []))
                if self.path == "/v1/messages":
                    body = _anthropic_turn(payload, self.server.seen)
                elif self.path == "/v1/responses":
                    body = _openai_turn(payload, self.server.seen)
                else:
                    self.send_error(404)
                    return
            status = 200
        except Refused as exc:
            with self.server.lock:
                self.server.seen.errors.append(str(exc))
            status = 400
            body = {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": str(exc)},
            }
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


# -- Anthropic ------------------------------------------------------------------------------


def _anthropic_turn(payload: Mapping[str, Any], seen: Seen) -> dict[str, Any]:
    tools = payload.get("tools", [])
    deferred = {t["name"] for t in tools if t.get("defer_loading") is True}
    if not any(t.get("defer_loading") is not True for t in tools):
        raise Refused("all tools have defer_loading set; at least one tool must be loaded")
    messages = payload["messages"]
    last = messages[-1]
    if last["role"] != "user":
        raise Refused("the last message must be the user's")
    if isinstance(last["content"], str):  # turn 1: search with the user's words
        seen.queries.append(last["content"])
        return _anthropic_reply(
            [
                {
                    "type": "tool_use",
                    "id": "toolu_search_1",
                    "name": SEARCH_TOOL,
                    "input": {"query": last["content"]},
                }
            ]
        )
    results = [b for b in last["content"] if b.get("type") == "tool_result"]
    asked = {
        b["id"]
        for message in messages
        if message["role"] == "assistant"
        for b in message["content"]
        if b.get("type") == "tool_use"
    }
    found: list[str] = []
    for result in results:
        if result.get("tool_use_id") not in asked:
            raise Refused(f"tool_result {result.get('tool_use_id')!r} answers no tool_use")
        for block in result.get("content", []):
            if block.get("type") != "tool_reference":
                continue
            if set(block) - {"type", "tool_name", "cache_control"}:
                raise Refused(f"tool_reference has unknown fields {sorted(block)}")
            if block.get("tool_name") not in deferred:
                raise Refused(
                    f"tool_reference names {block.get('tool_name')!r}, not a deferred tool"
                )
            found.append(block["tool_name"])
    seen.loaded.append(found)
    if not found:
        return _anthropic_reply([{"type": "text", "text": "I found no tool for that."}], "end_turn")
    return _anthropic_reply(
        [{"type": "tool_use", "id": "toolu_call_1", "name": found[0], "input": {}}]
    )


def _anthropic_reply(content: list[dict[str, Any]], stop: str = "tool_use") -> dict[str, Any]:
    return {
        "id": "msg_loopback",
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": stop,
    }


# -- OpenAI Responses -----------------------------------------------------------------------


def _openai_turn(payload: Mapping[str, Any], seen: Seen) -> dict[str, Any]:
    tools = payload.get("tools", [])
    searches = [t for t in tools if t.get("type") == "tool_search"]
    if len(searches) != 1 or searches[0].get("execution") != "client":
        raise Refused("expected exactly one tool_search tool with execution 'client'")
    # Deferred functions by (namespace, name): top-level ones under None.
    deferred = {
        (None, t["name"]): t
        for t in tools
        if t.get("type") == "function" and t.get("defer_loading")
    }
    for namespace in (t for t in tools if t.get("type") == "namespace"):
        for member in namespace.get("tools", []):
            if member.get("defer_loading"):
                deferred[(namespace["name"], member["name"])] = member
    items = payload["input"]
    last = items[-1]
    if last.get("role") == "user":  # turn 1
        text = last["content"]
        seen.queries.append(text)
        return _openai_reply(
            [
                {
                    "type": "tool_search_call",
                    "id": "tsc_1",
                    "call_id": "call_search_1",
                    "execution": "client",
                    "status": "completed",
                    "arguments": {"query": text},
                }
            ]
        )
    calls = {i["call_id"] for i in items if i.get("type") == "tool_search_call"}
    found: list[str] = []
    for item in items:
        if item.get("type") != "tool_search_output":
            continue
        if item.get("call_id") not in calls:
            raise Refused(f"tool_search_output {item.get('call_id')!r} answers no tool_search_call")
        if item.get("execution") != "client":
            raise Refused("a client search's output must keep execution 'client'")
        for tool in item["tools"]:
            if tool.get("type") == "namespace":
                loaded = [(tool.get("name"), member) for member in tool.get("tools", [])]
            else:
                loaded = [(None, tool)]
            for namespace, member in loaded:
                key = (namespace, member.get("name"))
                if member.get("type") != "function" or key not in deferred:
                    raise Refused(f"tool_search_output loads {key}, not a deferred function")
                if member != deferred[key]:
                    raise Refused(f"tool_search_output changes the definition of {key}")
                found.append(member["name"])
    seen.loaded.append(found)
    if not found:
        return _openai_reply(
            [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "No tool found."}],
                }
            ]
        )
    return _openai_reply(
        [
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": found[0],
                "arguments": "{}",
                "status": "completed",
            }
        ]
    )


def _openai_reply(output: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": "resp_loopback", "object": "response", "status": "completed", "output": output}


@contextlib.contextmanager
def serve_tool_search() -> Iterator[ToolSearchVendor]:
    """Serve the tool-search vendor for the ``with`` block."""
    with serving(ToolSearchVendor()) as server:
        yield server

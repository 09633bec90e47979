"""``/openapi.json``: the OpenAPI 3.1 document, printed from the route table."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import __version__
from .routes import Route

_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "type": {"type": "string", "description": "what kind of mistake or failure"},
                "message": {"type": "string", "description": "what was expected, what came"},
                "field": {
                    "type": ["string", "null"],
                    "description": "the body field (dotted path) or header at fault",
                },
            },
            "required": ["type", "message", "field"],
        }
    },
    "required": ["error"],
}

_ERRORS = {
    "400": "the body is not JSON or does not fit the schema (the field is named)",
    "401": "the bearer token is missing or wrong",
    "413": "the body is larger than the service accepts",
    "415": "the body is not application/json",
    "422": "the engine refused a value (an unknown tool id, an out-of-range option)",
}
_TIMEOUT = "the request did not arrive whole within the request timeout; the connection closes"
_OVERLOADED = "past the connection limit; retry after Retry-After seconds (the connection closes)"


def _transport() -> dict[str, Any]:
    """What any request but a probe may be answered by the server itself, whatever its route."""
    overloaded = _error(_OVERLOADED)
    overloaded["headers"] = {
        "Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}
    }
    return {"408": _error(_TIMEOUT), "503": overloaded}


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _operation(route: Route) -> dict[str, Any]:
    return {
        "operationId": route.operation,
        "summary": route.summary,
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": route.request, "example": route.example}},
        },
        "responses": {
            "200": _json(route.response, "the engine's answer"),
            **{status: _error(text) for status, text in _ERRORS.items()},
            **_transport(),
        },
    }


def _probe(operation: str, summary: str, status: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "get": {
            "operationId": operation,
            "summary": summary,
            "security": [],
            "responses": {status: _json(schema, summary)},
        }
    }


_READY = {
    "type": "object",
    "properties": {
        "ready": {"type": "boolean"},
        "reason": {"type": "string"},
        "tools": {"type": "integer"},
        "embeddings": {"type": "boolean", "description": "false: served keyword-only"},
        "degraded_reason": {"type": "string"},
    },
    "required": ["ready", "reason", "tools"],
}


def openapi_document(routes: Iterable[Route]) -> dict[str, Any]:
    """The service's OpenAPI 3.1 document: every JSON route, the probes and the events."""
    paths: dict[str, Any] = {route.path: {"post": _operation(route)} for route in routes}
    health = {
        "type": "object",
        "properties": {"status": {"type": "string"}, "version": {"type": "string"}},
        "required": ["status"],
    }
    paths["/health"] = _probe("health", "The process is up", "200", health)
    paths["/ready"] = _probe(
        "ready", "Warm-up has finished and the service takes traffic", "200", _READY
    )
    paths["/ready"]["get"]["responses"]["503"] = _json(
        _READY, "warming up, shutting down, or at the connection limit"
    )
    # Past the connection limit the probes are still answered, by the app.
    for probe in ("/health", "/ready"):
        paths[probe]["get"]["responses"]["408"] = _error(_TIMEOUT)
    paths["/v1/events"] = {
        "get": {
            "operationId": "events",
            "summary": "The engine's events as server-sent events (event: the type, data: JSON)",
            "parameters": [
                {
                    "name": "buffer",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "integer", "minimum": 1},
                    "description": "events this stream may fall behind by before losing them",
                }
            ],
            "responses": {
                "200": {
                    "description": "an endless stream; 'event: dropped' counts events lost",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                "400": _error("buffer is not an integer of at least 1"),
                "401": _error(_ERRORS["401"]),
                **_transport(),
            },
        }
    }
    paths["/openapi.json"] = {
        "get": {
            "operationId": "openapi",
            "summary": "This document",
            "responses": {
                "200": _json({"type": "object"}, "the OpenAPI document"),
                "401": _error(_ERRORS["401"]),
                **_transport(),
            },
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "toolroute",
            "version": __version__,
            "description": "Which tools and MCP servers an LLM agent should see, per step.",
        },
        "paths": paths,
        "components": {
            "schemas": {"Error": _ERROR},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }

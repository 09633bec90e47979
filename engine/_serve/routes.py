"""The service's route table: each route's path, schemas, example and handler in one place.

``/openapi.json`` is printed from this table and every request is checked against the
same schemas, so the document is what the service does. A handler gets a body that its
schema has accepted and returns the JSON to send.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

from .._core.select.arguments import MAX_SESSION_CHARS
from .._runtime.engine import Engine
from .._runtime.selector import FROM_CONFIG
from . import wire
from .schema import Schema, array, check, ids, known_keywords, obj, typed


def out(properties: Mapping[str, Schema], required: list[str]) -> Schema:
    """A response object: open, so fields can be added."""
    return obj(properties, required=required, closed=False)


Handler = Callable[[Engine, dict[str, Any]], Awaitable[dict[str, Any]]]


@attrs.frozen
class Route:
    """One JSON operation: ``POST path`` with a body that ``request`` describes."""

    path: str
    operation: str
    summary: str
    request: Schema
    response: Schema
    example: dict[str, Any]
    handle: Handler = attrs.field(eq=False, repr=False)


_session = typed(
    "string",
    "the conversation's id: paging, sticky sets and activations need one",
    maxLength=MAX_SESSION_CHARS,
)
_explain = typed(
    ["boolean", "array"],
    "true to explain every shown tool; or an array of tool ids, explained even when hidden",
)
_access = {
    "allow": ids("the only tools this request may be shown"),
    "deny": ids("tools this request is never shown, whatever fails open"),
}
_messages = {
    "anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "object"}},
    ],
    "description": "the conversation: a string, or OpenAI, Anthropic or Gemini messages",
}
_outcome = typed("string", enum=["applied", "degraded", "failed_open", "skipped"])
_number_or_null = typed(["number", "null"])
_explanations = array(typed("object"), "one record per explained tool (empty unless asked)")

SELECTION = out(
    {
        "tool_ids": ids("the tools to show, in order"),
        "scores": array(_number_or_null, "per tool; null for tools a rule added"),
        "sources": array(typed("string"), "per tool: ranked, always_active, related, tool_set"),
        "strategy": typed("string"),
        "outcome": _outcome,
        "reason": typed("string"),
        "latency_ms": typed("number"),
        "active_sets": array(typed("string")),
        "explanations": _explanations,
    },
    ["tool_ids", "scores", "strategy", "outcome", "reason", "latency_ms"],
)
ROUTING = out(
    {
        "selected": ids("server ids kept"),
        "excluded": ids("server ids dropped"),
        "excluded_tools": ids("tool ids of the dropped servers"),
        "strategy": typed("string"),
        "outcome": _outcome,
        "reason": typed("string"),
        "latency_ms": typed("number"),
        "answered": typed("integer"),
        "cache_hit": typed("boolean"),
        "model": typed(["string", "null"]),
    },
    ["selected", "excluded", "outcome", "reason", "latency_ms"],
)
STEP = out(
    {
        "tool_ids": {
            "anyOf": [ids(""), {"type": "null"}],
            "description": "the tools to show; null means every tool",
        },
        "query": typed("string"),
        "page": typed("integer", minimum=0),
        "outcome": _outcome,
        "reason": typed("string"),
        "latency_ms": typed("number"),
        "active_sets": array(typed("string")),
        "system_prompts": array(typed("string")),
        "routing": {"anyOf": [ROUTING, {"type": "null"}]},
        "explanations": _explanations,
    },
    ["tool_ids", "query", "page", "outcome", "reason", "latency_ms"],
)
_answer = out(
    {
        "type": typed("string", enum=["boolean", "choice", "score"]),
        "probability": typed("number"),
        "choice": typed("string"),
        "score": typed("number"),
        "legend": typed("object"),
        "probabilities": typed("object"),
        "confidence": typed("number"),
    },
    ["type"],
)
DECISION = out(
    {
        "result": {
            "anyOf": [
                out(
                    {
                        "model": typed("string"),
                        "provider": typed("string"),
                        "answers": {"type": "object", "additionalProperties": _answer},
                        "usage": typed("object"),
                        "latency_ms": typed("number"),
                    },
                    ["model", "provider", "answers"],
                ),
                {"type": "null"},
            ],
            "description": "null: no judgement could be made (no provider, failure, deadline)",
        }
    },
    ["result"],
)
SEARCH = out(
    {
        "tools": array(
            out(
                {
                    "name": typed("string"),
                    "description": typed("string"),
                    "relevance": typed("number"),
                },
                ["name"],
            )
        ),
        "hint": typed("string"),
    },
    ["tools"],
)
UPDATED = out(
    {
        "tools": typed("integer", "tools in the catalogue now"),
        "served": typed("integer", "tools served (after dedup)"),
    },
    ["tools", "served"],
)
_question = {
    "type": "object",
    "properties": {
        "type": typed("string", enum=["boolean", "choice", "score"]),
        "instructions": typed("string", minLength=1),
    },
    "required": ["type", "instructions"],
    "description": "boolean: optional true/false; choice: options (object); score: levels",
}
_tool_definitions = array(
    typed("object"), "tool definitions in any format the catalogue reads (OpenAI, MCP …)"
)


async def _select(engine: Engine, body: dict[str, Any]) -> dict[str, Any]:
    options = {key: body[key] for key in _SELECT_OPTIONS if key in body}
    selection = await engine.select(
        body["query"],
        threshold=body.get("threshold", FROM_CONFIG),
        explain=body.get("explain", False),
        **options,
    )
    return wire.selection_json(selection)


_SELECT_OPTIONS = ("strategy", "max_tools", "adaptive", "always_active", "allow", "deny")


async def _prepare_step(engine: Engine, body: dict[str, Any]) -> dict[str, Any]:
    step = await engine.prepare_step(
        body["messages"],
        session=body.get("session"),
        force_sets=body.get("force_sets", ()),
        release_sets=body.get("release_sets", ()),
        explain=body.get("explain", False),
        allow=body.get("allow"),
        deny=body.get("deny"),
    )
    return wire.step_json(step)


async def _route(engine: Engine, body: dict[str, Any]) -> dict[str, Any]:
    outcome = await engine.route_servers(body["query"], session=body.get("session"))
    return wire.routing_json(outcome)


async def _decide(engine: Engine, body: dict[str, Any]) -> dict[str, Any]:
    request = wire.decision_request(body)
    result = await engine.try_decide(request, deadline_s=body.get("deadline_s"))
    return wire.decision_json(result)


async def _search_tools(engine: Engine, body: dict[str, Any]) -> dict[str, Any]:
    return await engine.search_tools(
        body["arguments"],
        session=body.get("session"),
        k=body.get("k", 5),
        allow=body.get("allow"),
        deny=body.get("deny"),
    )


async def _update(engine: Engine, body: dict[str, Any]) -> dict[str, Any]:
    await engine.update(
        add=wire.tools(body.get("add", ()), "add"),
        remove=tuple(body.get("remove", ())),
        replace=wire.tools(body.get("replace", ()), "replace"),
    )
    return {"tools": len(engine.catalog), "served": len(engine.index.catalog)}


async def _learn(engine: Engine, body: dict[str, Any]) -> dict[str, Any]:
    # ``Engine.learn`` comes with the learning store; this route is listed only where it
    # exists. Read by name so this line type-checks with and without it.
    learn: Callable[..., Awaitable[object]] = getattr(engine, "learn")  # noqa: B009
    # False: nothing was recorded (a keyword-only engine, or the request not embedded in time).
    recorded = await learn(body["request"], tuple(body["tool_ids"]))
    return {"learned": len(body["tool_ids"]) if recorded else 0}


_ROUTES = (
    Route(
        path="/v1/select",
        operation="select",
        summary="The tools to show the model for one request",
        request=obj(
            {
                "query": typed("string", "the user's request"),
                "strategy": typed("string", enum=["keyword", "semantic", "combined"]),
                "max_tools": typed("integer", "ceiling on ranked picks", minimum=1),
                "threshold": typed(["number", "null"], "minimum score; null for none"),
                "adaptive": typed("boolean", "cut at the score elbow"),
                "always_active": ids("tools shown on every request"),
                "explain": _explain,
                **_access,
            },
            required=["query"],
        ),
        response=SELECTION,
        example={"query": "what is the weather in Oslo tomorrow", "max_tools": 3},
        handle=_select,
    ),
    Route(
        path="/v1/prepare-step",
        operation="prepareStep",
        summary="The tools to show on the next step of an agent loop",
        request=obj(
            {
                "messages": _messages,
                "session": _session,
                "force_sets": array(typed("string"), "tool sets forced from this step on"),
                "release_sets": array(typed("string"), "tool sets no longer forced nor sticky"),
                "explain": _explain,
                **_access,
            },
            required=["messages"],
        ),
        response=STEP,
        example={
            "messages": [{"role": "user", "content": "send an email to Ana about the launch"}],
            "session": "conversation-1",
        },
        handle=_prepare_step,
    ),
    Route(
        path="/v1/route",
        operation="routeServers",
        summary="Which MCP servers the request needs",
        request=obj({"query": _messages, "session": _session}, required=["query"]),
        response=ROUTING,
        example={"query": "list the open issues in the repository"},
        handle=_route,
    ),
    Route(
        path="/v1/decide",
        operation="decide",
        summary="Ask the decision provider typed questions about a state (fails open to null)",
        request=obj(
            {
                "state": {"description": "a string or any JSON value the questions are about"},
                "questions": {
                    "type": "object",
                    "additionalProperties": _question,
                    "description": "question ids to questions; order is kept",
                },
                "model": typed("string", "a model other than the provider's default", minLength=1),
                "deadline_s": typed("number", "seconds for the whole call", minimum=0.001),
            },
            required=["state", "questions"],
        ),
        response=DECISION,
        example={
            "state": "the user asked for the weather",
            "questions": {"weather": {"type": "boolean", "instructions": "Is this about weather?"}},
        },
        handle=_decide,
    ),
    Route(
        path="/v1/search-tools",
        operation="searchTools",
        summary="Answer the model's search_tools call; found tools show on the session's next step",
        request=obj(
            {
                "arguments": {
                    "anyOf": [{"type": "object"}, {"type": "string"}],
                    "description": 'the call\'s arguments, {"query": ...} or its JSON text',
                },
                "session": _session,
                "k": typed("integer", "how many tools to return", minimum=1, maximum=100),
                **_access,
            },
            required=["arguments"],
        ),
        response=SEARCH,
        example={"arguments": {"query": "calendar events"}, "session": "conversation-1", "k": 3},
        handle=_search_tools,
    ),
    Route(
        path="/v1/update",
        operation="update",
        summary="Change the catalogue: remove ids, replace tools by id, add new tools",
        request=obj(
            {
                "add": _tool_definitions,
                "remove": ids("ids to drop"),
                "replace": _tool_definitions,
            }
        ),
        response=UPDATED,
        example={
            "add": [
                {
                    "name": "convert_currency",
                    "description": "Convert an amount between two currencies",
                    "parameters": {"type": "object", "properties": {"amount": {"type": "number"}}},
                }
            ]
        },
        handle=_update,
    ),
)

_LEARN = Route(
    path="/v1/learn",
    operation="learn",
    summary="Record that these tools served this request",
    request=obj(
        {"request": typed("string", "the request the tools served"), "tool_ids": ids("")},
        required=["request", "tool_ids"],
    ),
    response=out({"learned": typed("integer")}, ["learned"]),
    example={"request": "what is the weather in Oslo", "tool_ids": ["get_forecast"]},
    handle=_learn,
)


def routes_for(engine: object) -> Mapping[str, Route]:
    """The JSON routes by path; ``/v1/learn`` only for an engine that can learn."""
    routes = [*_ROUTES, *((_LEARN,) if callable(getattr(engine, "learn", None)) else ())]
    for route in routes:
        known_keywords(route.request, route.path)
        known_keywords(route.response, route.path)
        check(route.example, route.request)  # an example the service would refuse is a bug
    return {route.path: route for route in routes}

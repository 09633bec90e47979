"""The vendors' tool-search shapes, read and written as the recorded fixtures have them."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from toolroute import ConfigError
from toolroute._core.select.vendor_search import (
    NO_QUERY,
    NOTHING_FOUND,
    answer,
    definitions_by_name,
)
from toolroute.tool_search import mark_deferred, read_call, search_tool

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tool_search"


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def undeferred(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in t.items() if k != "defer_loading"} for t in tools]


@pytest.mark.parametrize("vendor", ["anthropic", "openai"])
def test_every_fixture_says_where_its_shapes_come_from(vendor: str) -> None:
    for path in FIXTURES.glob(f"{vendor}_*.json"):
        note = json.loads(path.read_text())["note"]
        assert "@" in note or "Source" in note, path.name  # a commit or a page


@pytest.mark.parametrize("vendor", ["anthropic", "openai"])
def test_the_recorded_search_call_is_read(vendor: str) -> None:
    recorded = fixture(f"{vendor}_exchange")
    for form in (recorded["search_call"], json.dumps(recorded["search_call"])):
        call = read_call(vendor, form)
        assert call.query == "weather forecast for a city"
        assert call.call_id == recorded["answer"].get(
            "tool_use_id", recorded["answer"].get("call_id")
        )


@pytest.mark.parametrize("vendor", ["anthropic", "openai"])
def test_the_answer_is_the_recorded_shape(vendor: str) -> None:
    recorded = fixture(f"{vendor}_exchange")
    definition = recorded["request"]["tools"][0]
    written = answer(read_call(vendor, recorded["search_call"]), ["get_forecast"], [definition])
    assert written == recorded["answer"]


@pytest.mark.parametrize("vendor", ["anthropic", "openai"])
def test_marking_deferred_gives_the_recorded_tool_list(vendor: str) -> None:
    recorded = fixture(f"{vendor}_exchange")
    plain = undeferred(recorded["request"]["tools"][:-1])
    before = copy.deepcopy(plain)
    marked = mark_deferred(vendor, plain)
    assert [*marked, recorded["request"]["tools"][-1]] == recorded["request"]["tools"]
    assert plain == before  # the host's list is not touched
    recorded_search = recorded["request"]["tools"][-1]
    ours = search_tool(vendor)
    assert set(ours) == set(recorded_search)
    assert {k: v for k, v in ours.items() if k != "description"} == {
        k: v for k, v in recorded_search.items() if k != "description"
    }
    assert ours["description"].startswith(recorded_search["description"])


def test_kept_tools_and_the_search_tool_are_never_deferred() -> None:
    tools = [
        {"name": "search_tools", "input_schema": {}},
        {"name": "get_forecast", "input_schema": {}},
        {"name": "create_issue", "input_schema": {}},
        {"type": "web_search_20250305", "name": "web_search"},
    ]
    marked = mark_deferred("anthropic", tools, keep=["create_issue"])
    assert [t.get("defer_loading", False) for t in marked] == [False, True, False, False]


def test_openai_namespace_members_are_deferred() -> None:
    tools = [
        {
            "type": "namespace",
            "name": "crm",
            "description": "CRM",
            "tools": [{"type": "function", "name": "get_customer"}],
        }
    ]
    marked = mark_deferred("openai", tools)
    assert marked[0]["tools"] == [
        {"type": "function", "name": "get_customer", "defer_loading": True}
    ]


@pytest.mark.parametrize(
    ("vendor", "call", "expected"),
    [
        (
            "anthropic",
            {"type": "tool_result", "tool_use_id": "x"},
            "expected anthropic's search call, a 'tool_use' item",
        ),
        (
            "openai",
            {"type": "function_call", "call_id": "x"},
            "expected openai's search call, a 'tool_search_call' item",
        ),
        (
            "openai",
            {"type": "tool_search_call", "execution": "server", "call_id": "x"},
            "execution 'client'",
        ),
        ("anthropic", {"type": "tool_use", "input": {"query": "x"}}, "no 'id' to answer"),
        ("openai", "not json", "not JSON"),
        ("openai", ["a list"], "as an object, got list"),
        ("gemini", {}, "unknown tool-search vendor 'gemini'"),
    ],
)
def test_a_host_passing_something_else_gets_a_clear_error(
    vendor: str, call: object, expected: str
) -> None:
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(")):
        read_call(vendor, call)


@pytest.mark.parametrize("arguments", [{}, {"query": ""}, {"query": 3}, "{broken", None])
def test_a_model_call_without_a_query_is_answered_not_raised(arguments: object) -> None:
    anthropic = read_call("anthropic", {"type": "tool_use", "id": "t", "input": arguments})
    assert anthropic.query is None
    assert answer(anthropic, ["ignored"], [{}]) == {
        "type": "tool_result",
        "tool_use_id": "t",
        "content": [{"type": "text", "text": NO_QUERY}],
        "is_error": True,
    }
    openai = read_call(
        "openai", {"type": "tool_search_call", "call_id": "c", "arguments": arguments}
    )
    assert answer(openai, [], [])["tools"] == []


def test_an_anthropic_answer_that_found_nothing_still_has_content() -> None:
    call = read_call("anthropic", {"type": "tool_use", "id": "t", "input": {"query": "x"}})
    assert answer(call, [], [])["content"] == [{"type": "text", "text": NOTHING_FOUND}]


def test_the_model_may_ask_for_fewer_tools() -> None:
    call = read_call(
        "openai",
        {
            "type": "tool_search_call",
            "call_id": "c",
            "arguments": {"query": ["weather", "forecast"], "limit": 2},
        },
    )
    assert (call.query, call.limit) == ("weather forecast", 2)
    assert (
        read_call(
            "openai",
            {"type": "tool_search_call", "call_id": "c", "arguments": {"query": "x", "limit": 0}},
        ).limit
        is None
    )


def test_mark_deferred_refuses_what_is_not_a_tool_list() -> None:
    with pytest.raises(ConfigError, match="expected a list of tool definitions, got str"):
        mark_deferred("openai", "tools")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="tool 1: expected a tool object, got int"):
        mark_deferred("openai", [{"type": "function", "name": "a"}, 3])  # type: ignore[list-item]
    chat = [{"type": "function", "function": {"name": "get_forecast"}}]
    with pytest.raises(ConfigError, match="got a Chat Completions one"):
        mark_deferred("openai", chat)


@pytest.mark.parametrize(
    ("vendor", "tool", "expected"),
    [
        (
            "anthropic",
            {"type": "function", "name": "get_forecast", "parameters": {}},
            r"tool 1: .*got an OpenAI function tool \(type 'function'\): pass vendor='openai'",
        ),
        (
            "anthropic",
            {"type": "function", "function": {"name": "get_forecast"}},
            "tool 1: .*got an OpenAI function tool",
        ),
        (
            "anthropic",
            {"name": "get_forecast", "inputSchema": {"type": "object"}},
            r"tool 1: expected an Anthropic tool .*got keys \['inputSchema', 'name'\]",
        ),
        (
            "openai",
            {"name": "get_forecast", "input_schema": {"type": "object"}},
            "tool 1: .*got one without a 'type'.*an Anthropic tool: pass vendor='anthropic'",
        ),
    ],
)
def test_another_vendors_tool_list_is_refused_not_sent_undeferred(
    vendor: str, tool: dict[str, Any], expected: str
) -> None:
    # Read as the vendor's, such a tool would be neither deferred nor ever found: every
    # search would answer nothing, with no sign why.
    with pytest.raises(ConfigError, match=expected):
        mark_deferred(vendor, [search_tool(vendor), tool])


def test_an_sdk_item_passed_as_it_is_gets_told_to_dump_it() -> None:
    responses = pytest.importorskip("openai.types.responses")
    item = responses.ResponseToolSearchCall(
        id="ts_1",
        call_id="c",
        arguments={"query": "weather"},
        execution="client",
        status="completed",
        type="tool_search_call",
    )
    with pytest.raises(ConfigError, match=r"got ResponseToolSearchCall \(pass its .model_dump"):
        read_call("openai", item)
    assert read_call("openai", item.model_dump()).query == "weather"


def test_keep_must_be_a_list_of_names() -> None:
    tools = [{"name": "get_forecast", "input_schema": {"type": "object"}}]
    with pytest.raises(ConfigError, match="keep must be a list of tool names, got str"):
        mark_deferred("anthropic", tools, keep="get_forecast")
    with pytest.raises(ConfigError, match="got an item of type int"):
        mark_deferred("anthropic", tools, keep=[3])  # type: ignore[list-item]
    assert "defer_loading" not in mark_deferred("anthropic", tools, keep=("get_forecast",))[0]


def test_namespace_members_are_answered_in_one_item_per_namespace() -> None:
    tools = [
        {
            "type": "namespace",
            "name": "crm",
            "description": "CRM",
            "tools": [
                {"type": "function", "name": "get_customer"},
                {"type": "function", "name": "list_orders"},
            ],
        },
        {"type": "function", "name": "get_invoice"},
    ]
    definitions = definitions_by_name("openai", mark_deferred("openai", tools))
    call = read_call(
        "openai", {"type": "tool_search_call", "call_id": "c", "arguments": {"query": "q"}}
    )
    names = ["list_orders", "get_invoice", "get_customer"]  # rank order
    output = answer(call, names, [definitions[n] for n in names])
    assert output["tools"] == [
        {
            "type": "namespace",
            "name": "crm",
            "description": "CRM",
            "tools": [
                {"type": "function", "name": "list_orders", "defer_loading": True},
                {"type": "function", "name": "get_customer", "defer_loading": True},
            ],
        },
        {"type": "function", "name": "get_invoice", "defer_loading": True},
    ]
    assert definitions["get_customer"]["tools"] == [  # the answer did not grow the source
        {"type": "function", "name": "get_customer", "defer_loading": True}
    ]


@pytest.mark.parametrize(
    ("vendor", "tools", "expected"),
    [
        (
            "anthropic",
            [
                {"name": "get_forecast", "input_schema": {"type": "object"}},
                {"name": "get_forecast", "input_schema": {"type": "object"}},
            ],
            r"tool 1: the name 'get_forecast' is already tool 0's",
        ),
        (
            "openai",
            [
                {"type": "function", "name": "get_forecast", "parameters": {}},
                {"type": "web_search"},
                {"type": "function", "name": "get_forecast", "parameters": {}},
            ],
            r"tool 2: the name 'get_forecast' is already tool 0's",
        ),
        (
            "openai",
            [
                {
                    "type": "namespace",
                    "name": "crm",
                    "tools": [
                        {"type": "function", "name": "search", "parameters": {}},
                        {"type": "function", "name": "search", "parameters": {}},
                    ],
                }
            ],
            r"tool 0: the name 'search' is already in namespace 'crm'",
        ),
        (
            "openai",
            [
                {"type": "namespace", "name": "crm", "tools": []},
                {"type": "namespace", "name": "crm", "tools": []},
            ],
            r"tool 1: the namespace name 'crm' is already tool 0's",
        ),
    ],
)
def test_duplicate_tool_names_are_refused(
    vendor: str, tools: list[dict[str, Any]], expected: str
) -> None:
    # The vendor refuses a request whose tools repeat a name: every request would fail.
    with pytest.raises(ConfigError, match=expected):
        mark_deferred(vendor, tools)


def test_one_name_in_two_openai_namespaces_is_not_a_duplicate() -> None:
    def namespace(name: str) -> dict[str, Any]:
        member = {"type": "function", "name": "search", "parameters": {}}
        return {"type": "namespace", "name": name, "tools": [member]}

    tools = [namespace("crm"), namespace("wiki"), {"type": "function", "name": "search"}]
    marked = mark_deferred("openai", tools)
    assert [t["name"] for t in marked] == ["crm", "wiki", "search"]
    # A host's own search tool, already in the list, is replaced, not a duplicate.
    anthropic = [search_tool("anthropic"), search_tool("anthropic")]
    assert len(mark_deferred("anthropic", anthropic)) == 2


def _keys_of(typed_dict: Any) -> set[str]:
    keys: set[str] = set()
    for klass in typed_dict.__mro__:
        keys.update(getattr(klass, "__annotations__", {}))
    return keys


def test_the_openai_shapes_validate_against_the_sdks_own_types() -> None:
    pytest.importorskip("openai")
    from openai.types.responses import ResponseToolSearchCall, ToolParam
    from openai.types.responses.response_tool_search_output_item_param_param import (
        ResponseToolSearchOutputItemParamParam,
    )
    from pydantic import TypeAdapter

    recorded = fixture("openai_exchange")
    tools = [*mark_deferred("openai", undeferred(recorded["request"]["tools"][:-1]))]
    tools.append(search_tool("openai"))
    TypeAdapter(list[ToolParam]).validate_python(tools)
    # The model's call as the SDK hands it over, dumped as the docs say.
    call = ResponseToolSearchCall.model_validate(recorded["search_call"]).model_dump()
    call.pop("created_by", None)
    written = answer(read_call("openai", call), ["get_forecast"], tools[:1])
    TypeAdapter(ResponseToolSearchOutputItemParamParam).validate_python(written)
    assert set(written) <= _keys_of(ResponseToolSearchOutputItemParamParam)


def test_the_anthropic_shapes_validate_against_the_sdks_own_types() -> None:
    pytest.importorskip("anthropic")
    from anthropic.types import Message, MessageParam, ToolUnionParam
    from pydantic import TypeAdapter

    recorded = fixture("anthropic_exchange")
    tools = [*mark_deferred("anthropic", undeferred(recorded["request"]["tools"][:-1]))]
    tools.append(search_tool("anthropic"))
    TypeAdapter(list[ToolUnionParam]).validate_python(tools)
    reply = Message.model_validate(
        {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
            "content": [recorded["search_call"]],
        }
    )
    call = reply.content[0].model_dump()
    written = answer(read_call("anthropic", call), ["get_forecast"], tools[:1])
    turns = [
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [written]},
    ]
    TypeAdapter(list[MessageParam]).validate_python(turns)

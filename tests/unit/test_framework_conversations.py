"""Conversations as agent frameworks pass them: LangChain messages and their dicts, Pydantic AI
``ModelMessage``s and their dumps, OpenAI Agents SDK items — read like every other shape, or
refused with a message that names what came (never its text).

Each framework test builds the framework's own objects; it is skipped when that framework's
extra is not installed (CI installs every extra)."""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute import ConfigError
from toolroute._core.select.conversation import extract_query, idle_steps, read_turns


def test_role_human_and_ai_are_user_and_assistant() -> None:
    messages = [
        {"role": "human", "content": "weather in Oslo"},
        {"role": "ai", "content": "Checking the forecast."},
    ]
    assert [t.role for t in read_turns(messages)] == ["user", "assistant"]
    assert extract_query(messages) == "Checking the forecast."


def test_an_unknown_role_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"message 0: unknown role 'bot'; expected one of"):
        read_turns([{"role": "bot", "content": "hi"}])


def test_an_unreadable_message_names_its_type_and_keys_never_its_text() -> None:
    with pytest.raises(ConfigError) as caught:
        read_turns([{"kind": "note", "body": "SECRET plan"}])
    message = str(caught.value)
    assert "message 0" in message
    assert "'body'" in message
    assert "'kind'" in message
    assert "SECRET" not in message


def test_an_unknown_item_type_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"message 0: unknown item type 'memo'") as caught:
        read_turns([{"type": "memo", "text": "SECRET"}])
    assert "SECRET" not in str(caught.value)


def test_an_object_of_no_known_shape_names_its_type() -> None:
    class Note:
        def __init__(self) -> None:
            self.text = "SECRET"

    with pytest.raises(ConfigError, match=r"message 0: expected an object.*got Note") as caught:
        read_turns([Note()])
    assert "SECRET" not in str(caught.value)


def test_a_readable_conversation_without_user_text_reads_as_empty() -> None:
    assert extract_query([{"role": "system", "content": "be brief"}]) == ""
    assert extract_query([]) == ""


def test_json_bytes_of_a_message_list_are_read() -> None:
    dumped = json.dumps([{"role": "user", "content": "weather in Oslo"}]).encode()
    assert extract_query(dumped) == "weather in Oslo"


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (b"weather", "messages given as bytes must be the JSON text of a message list"),
        (b'{"role": "user"}', "messages given as bytes must be .* got JSON dict"),
        (b"\xff\xfe", "messages given as bytes must be"),
    ],
)
def test_bytes_that_are_not_a_json_message_list_are_refused(bad: bytes, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        read_turns(bad)


def test_langchain_dicts_from_model_dump_and_messages_to_dict() -> None:
    dumped: list[dict[str, Any]] = [
        {"type": "system", "content": "be brief"},
        {"type": "human", "content": "weather in Oslo"},
        {
            "type": "ai",
            "content": "",
            "tool_calls": [{"name": "get_weather", "args": {}, "id": "c1", "type": "tool_call"}],
        },
        {"type": "tool", "content": "SECRET sunny", "tool_call_id": "c1"},
    ]
    assert extract_query(dumped) == "weather in Oslo — get_weather"
    assert idle_steps(dumped) == 0
    wrapped = [{"type": m["type"], "data": m} for m in dumped]  # messages_to_dict's shape
    assert extract_query(wrapped) == "weather in Oslo — get_weather"


def test_langchain_messages() -> None:
    messages = pytest.importorskip("langchain_core.messages")
    conversation = [
        messages.SystemMessage("be brief"),
        messages.HumanMessage("weather in Oslo"),
        messages.AIMessage("", tool_calls=[{"name": "get_weather", "args": {}, "id": "c1"}]),
        messages.ToolMessage("SECRET sunny", tool_call_id="c1"),
    ]
    assert extract_query(conversation) == "weather in Oslo — get_weather"
    assert idle_steps(conversation) == 0
    assert [t.role for t in read_turns(conversation)] == ["system", "user", "assistant", "tool"]
    conversation.append(messages.AIMessage([{"type": "text", "text": "It is sunny."}]))
    assert extract_query(conversation) == "It is sunny."
    assert idle_steps(conversation) == 1
    assert extract_query(messages.messages_to_dict(conversation)) == "It is sunny."


def test_langchain_chat_messages_carry_their_own_role() -> None:
    messages = pytest.importorskip("langchain_core.messages")
    conversation = [
        messages.ChatMessage("weather in Oslo", role="user"),
        messages.ChatMessage("Checking.", role="assistant"),
    ]
    assert [t.role for t in read_turns(conversation)] == ["user", "assistant"]
    with pytest.raises(ConfigError, match=r"message 0: unknown role 'critic'"):
        read_turns([messages.ChatMessage("x", role="critic")])


def test_langchain_tool_use_blocks_and_tool_calls_count_once() -> None:
    messages = pytest.importorskip("langchain_core.messages")
    reply = messages.AIMessage(
        [{"type": "tool_use", "id": "c1", "name": "get_weather", "input": {}}],
        tool_calls=[{"name": "get_weather", "args": {}, "id": "c1"}],
    )
    conversation = [messages.HumanMessage("weather"), reply]
    assert read_turns(conversation)[-1].tool_calls == ("get_weather",)


def _pydantic_ai_conversation() -> list[Any]:
    pm = pytest.importorskip("pydantic_ai.messages")
    return [
        pm.ModelRequest(
            parts=[pm.SystemPromptPart("be brief"), pm.UserPromptPart("weather in Oslo")]
        ),
        pm.ModelResponse(parts=[pm.ThinkingPart("hmm"), pm.ToolCallPart("get_weather", {}, "c1")]),
        pm.ModelRequest(parts=[pm.ToolReturnPart("get_weather", "SECRET sunny", "c1")]),
        pm.ModelResponse(parts=[pm.TextPart("It is sunny.")]),
        pm.ModelRequest(parts=[pm.UserPromptPart(["and in", pm.TextContent("Bergen?")])]),
    ]


def test_pydantic_ai_model_messages() -> None:
    conversation = _pydantic_ai_conversation()
    assert extract_query(conversation[:3]) == "weather in Oslo — get_weather"
    assert idle_steps(conversation[:3]) == 0
    assert extract_query(conversation[:4]) == "It is sunny."
    assert extract_query(conversation) == "weather in Oslo It is sunny. and in Bergen?"
    roles = [t.role for t in read_turns(conversation)]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]


def test_pydantic_ai_dumps_read_like_the_objects() -> None:
    conversation = _pydantic_ai_conversation()
    adapter = pytest.importorskip("pydantic_ai.messages").ModelMessagesTypeAdapter
    expected = extract_query(conversation)
    assert extract_query(adapter.dump_python(conversation)) == expected
    assert extract_query(adapter.dump_python(conversation, mode="json")) == expected
    assert extract_query(adapter.dump_json(conversation)) == expected
    assert extract_query(json.loads(adapter.dump_json(conversation))) == expected


def test_pydantic_ai_retries_are_tool_results() -> None:
    pm = pytest.importorskip("pydantic_ai.messages")
    retried = pm.ToolReturnPart("get_weather", "SECRET bad args", "c1", outcome="retried")
    conversation = [
        pm.ModelRequest(parts=[pm.UserPromptPart("weather in Oslo")]),
        pm.ModelResponse(parts=[pm.ToolCallPart("get_weather", {"x": 1}, "c1")]),
        pm.ModelRequest(parts=[retried]),
        # the retry part older versions wrote, as its dump still reads
        {"kind": "request", "parts": [{"part_kind": "retry-prompt", "content": "SECRET"}]},
    ]
    assert extract_query(conversation) == "weather in Oslo — get_weather"


def test_openai_agents_run_items_and_input_items() -> None:
    agents = pytest.importorskip("agents")
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    agent = agents.Agent(name="a")
    said = ResponseOutputMessage(
        id="m1",
        role="assistant",
        status="completed",
        type="message",
        content=[ResponseOutputText(type="output_text", text="Checking.", annotations=[])],
    )
    call = ResponseFunctionToolCall(
        type="function_call", call_id="c1", name="get_weather", arguments="{}"
    )
    items = [
        {"role": "user", "content": "weather in Oslo"},
        agents.items.MessageOutputItem(agent=agent, raw_item=said),
        agents.items.ToolCallItem(agent=agent, raw_item=call),
        agents.items.ToolCallOutputItem(
            agent=agent,
            raw_item={"type": "function_call_output", "call_id": "c1", "output": "SECRET"},
            output="SECRET",
        ),
    ]
    assert extract_query(items) == "Checking."
    assert idle_steps(items) == 0
    as_input = [item if isinstance(item, dict) else item.to_input_item() for item in items]
    assert extract_query(as_input) == "Checking."


def test_every_responses_input_item_type_of_the_installed_sdk_is_read() -> None:
    pytest.importorskip("openai")
    from openai.types.responses import response_input_item_param as items

    seen = []
    for kind in typing.get_args(items.ResponseInputItemParam):
        literal = typing.get_type_hints(kind)["type"]
        for value in typing.get_args(literal):
            seen.extend(t for t in typing.get_args(value) or (value,) if isinstance(t, str))
    assert "function_call" in seen
    for tag in seen:
        item: dict[str, Any] = {"type": tag, "role": "user", "content": "x", "name": "n"}
        read_turns([item])  # read or skipped, never refused


_SECRET = "SECRET words of the user"
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.just(_SECRET), st.sampled_from(["", " "])
)
_KINDS = st.sampled_from(
    ["human", "ai", "tool", "system", "chat", "message", "function_call", "memo", "request",
     "response", "reasoning", "x_output", "message_output_item", None, 3]
)  # fmt: skip
_ROLES = st.sampled_from(["user", "human", "assistant", "ai", "model", "bot", "tool", None, 1])


def _blocks() -> st.SearchStrategy[Any]:
    block = st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(
                ["text", "tool_use", "tool_result", "image", "server_tool_call", "x_call", 5]
            ),
            "text": _SCALARS,
            "name": st.one_of(st.just("get_weather"), _SCALARS),
            "part_kind": st.sampled_from(["user-prompt", "text", "tool-call", "tool-return"]),
            "content": _SCALARS,
            "tool_name": st.one_of(st.just("get_weather"), _SCALARS),
            "executableCode": _SCALARS,
        },
    )
    return st.one_of(_SCALARS, block, st.lists(st.one_of(block, _SCALARS), max_size=3))


_MESSAGES = st.fixed_dictionaries(
    {},
    optional={
        "type": _KINDS,
        "role": _ROLES,
        "kind": _KINDS,
        "content": _blocks(),
        "parts": _blocks(),
        "tool_calls": _blocks(),
        "raw_item": st.fixed_dictionaries({"role": _ROLES, "content": _blocks()}),
        "data": st.fixed_dictionaries({"type": _KINDS, "content": _blocks()}),
        "text": _SCALARS,
        "audio": st.fixed_dictionaries({"transcript": _SCALARS}),
        "invalid_tool_calls": _blocks(),
        "id": _SCALARS,
    },
)


@given(st.lists(st.one_of(_MESSAGES, _SCALARS), max_size=4))
def test_any_message_list_reads_or_is_a_config_error_that_never_quotes_the_text(
    messages: list[Any],
) -> None:
    try:
        turns = read_turns(messages)
    except ConfigError as exc:
        refusal = str(exc)
        assert _SECRET not in refusal
        return
    for turn in turns:
        assert isinstance(turn.text, str)
        if turn.is_tool_result:
            assert turn.text == ""  # a tool's output is never read as a request

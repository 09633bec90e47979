"""Item and block types beyond plain text and function calls, as the vendors and frameworks
document them: each is read as the user's words, the model's words, a tool use, a tool result,
or nothing — never misread, never refused."""

from __future__ import annotations

from typing import Any

import pytest

from toolroute._core.select.conversation import extract_query, idle_steps, read_turns

Message = dict[str, Any]
_ASK: Message = {"role": "user", "content": "plot last month's sales"}


def test_a_responses_item_reference_without_its_optional_type_is_skipped() -> None:
    items: list[Message] = [
        _ASK,
        {"id": "rs_1"},  # ItemReference: "type" may be left out
        {"type": "item_reference", "id": "msg_1"},
        {"type": "function_call", "call_id": "c", "name": "query_sales", "arguments": "{}"},
    ]
    assert [t.role for t in read_turns(items)] == ["user", "assistant"]
    assert extract_query(items) == "plot last month's sales — query_sales"


@pytest.mark.parametrize("spelling", ["executableCode", "executable_code"])
def test_gemini_code_execution_is_tool_use(spelling: str) -> None:
    result = "codeExecutionResult" if spelling == "executableCode" else "code_execution_result"
    contents: list[Message] = [
        {"role": "user", "parts": [{"text": "plot last month's sales"}]},
        {
            "role": "model",
            "parts": [
                {spelling: {"language": "PYTHON", "code": "print('SECRET')"}},
                {result: {"outcome": "OUTCOME_OK", "output": "SECRET"}},
            ],
        },
    ]
    assert idle_steps(contents) == 0
    assert extract_query(contents) == "plot last month's sales — code_execution"


def test_hosted_tool_calls_inside_message_content_are_tool_use() -> None:
    # LangChain v1 standard blocks, and the Responses items LangChain keeps in content
    for blocks, called in [
        ([{"type": "server_tool_call", "id": "s", "name": "web_search", "args": {}}], "web_search"),
        ([{"type": "server_tool_call_chunk", "name": "web_search", "args": "{"}], "web_search"),
        ([{"type": "tool_call_chunk", "name": "query_sales", "args": "{", "index": 0}], "query_sales"),
        ([{"type": "web_search_call", "id": "ws", "status": "completed"}], "web_search"),
        ([{"type": "code_interpreter_call", "id": "ci", "code": "SECRET"}], "code_interpreter"),
    ]:  # fmt: skip
        reply: Message = {
            "role": "assistant",
            "content": [
                {"type": "reasoning", "reasoning": "SECRET"},
                *blocks,
                {"type": "server_tool_result", "tool_call_id": "s", "output": "SECRET"},
            ],
        }
        assert idle_steps([_ASK, reply]) == 0, blocks
        assert extract_query([_ASK, reply]) == f"plot last month's sales — {called}"


def test_langchain_v1_standard_blocks() -> None:
    messages = pytest.importorskip("langchain_core.messages")
    ask = messages.HumanMessage(
        content=[
            {"type": "text", "text": "what is in this chart"},
            {"type": "image", "url": "https://example.com/chart.png"},
            {"type": "file", "file_id": "f1"},
        ]
    )
    searched = messages.AIMessage(
        content=[
            {"type": "reasoning", "reasoning": "SECRET"},
            {"type": "server_tool_call", "id": "s", "name": "web_search", "args": {"q": "x"}},
            {"type": "server_tool_result", "tool_call_id": "s", "status": "success"},
        ]
    )
    for conversation in (
        [ask, searched],
        messages.messages_to_dict([ask, searched]),
        [m.model_dump() for m in (ask, searched)],
    ):
        assert idle_steps(conversation) == 0
        assert extract_query(conversation) == "what is in this chart — web_search"


def test_langchain_invalid_tool_calls_are_tool_use() -> None:
    # as in OpenAI Chat, where a call whose arguments do not parse is still a call
    messages = pytest.importorskip("langchain_core.messages")
    reply = messages.AIMessage(
        content="",
        invalid_tool_calls=[
            {
                "type": "invalid_tool_call",
                "id": "c",
                "name": "query_sales",
                "args": "{",
                "error": None,
            }
        ],
    )
    ask = messages.HumanMessage("plot last month's sales")
    assert idle_steps([ask, reply]) == 0
    assert extract_query([ask, reply]) == "plot last month's sales — query_sales"


def test_anthropic_text_after_tool_results_is_the_users_own_words() -> None:
    # One user message may carry the tool results, then what the user adds; in OpenAI Chat
    # (and Pydantic AI) the same conversation is a tool message, then a user message.
    asked: Message = {"role": "user", "content": "weather in Oslo"}
    anthropic: list[Message] = [
        asked,
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "get_weather", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t", "content": "SECRET rain"},
                {"type": "text", "text": "and tomorrow in Bergen?", "cache_control": {}},
            ],
        },
    ]
    chat: list[Message] = [
        asked,
        {"role": "assistant", "tool_calls": [{"function": {"name": "get_weather"}}]},
        {"role": "tool", "tool_call_id": "t", "content": "SECRET rain"},
        {"role": "user", "content": "and tomorrow in Bergen?"},
    ]
    assert (
        extract_query(anthropic) == extract_query(chat) == "weather in Oslo and tomorrow in Bergen?"
    )
    assert idle_steps(anthropic) == idle_steps(chat) == 0
    turns = read_turns(anthropic)
    assert [(t.role, t.is_tool_result) for t in turns[2:]] == [("user", True), ("user", False)]


def test_mcp_sampling_and_prompt_messages_with_one_content_block() -> None:
    types = pytest.importorskip("mcp.types")
    prompt = types.PromptMessage(role="user", content=types.TextContent(type="text", text="hi"))
    assert extract_query([prompt]) == "hi"
    messages = [
        types.SamplingMessage(
            role="user", content=types.TextContent(type="text", text="weather in Oslo")
        ),
        types.SamplingMessage(
            role="assistant",
            content=types.ToolUseContent(type="tool_use", id="u", name="get_weather", input={}),
        ),
        types.SamplingMessage(
            role="user",
            content=[
                types.ToolResultContent(
                    type="tool_result",
                    toolUseId="u",
                    content=[types.TextContent(type="text", text="SECRET rain")],
                )
            ],
        ),
    ]
    assert extract_query(messages) == "weather in Oslo — get_weather"
    assert idle_steps(messages) == 0
    assert [t.role for t in read_turns(messages)] == ["user", "assistant", "user"]


def test_chat_assistant_audio_is_read_by_its_transcript() -> None:
    # what the model said aloud, as Pydantic AI's speech parts; a replayed reply has only an id
    spoken: Message = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "audio": {"id": "a1", "data": "UklG", "expires_at": 1, "transcript": "I'll check Bergen."},
    }
    assert extract_query([_ASK, spoken]) == "I'll check Bergen."
    replayed: Message = {"role": "assistant", "content": None, "audio": {"id": "a1"}}
    assert extract_query([_ASK, replayed]) == "plot last month's sales"
    assert idle_steps([_ASK, spoken]) == idle_steps([_ASK, replayed]) == 1

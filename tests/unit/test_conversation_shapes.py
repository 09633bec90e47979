"""Every conversation shape agents pass: plain strings, OpenAI Chat and Responses, Anthropic and
Gemini — and the property that one conversation reads alike in all of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute import Catalog, ConfigError, ToolIndex
from toolroute._core.select.conversation import extract_query, idle_steps, read_turns
from toolroute._routing.pipeline import routing_query

Message = dict[str, Any]


def test_a_plain_string_is_one_user_request() -> None:
    assert extract_query("  weather in Oslo ") == "weather in Oslo"
    assert idle_steps("weather in Oslo") == 0
    assert extract_query("") == ""


def test_openai_responses_items_as_the_agents_sdk_passes_them() -> None:
    items: list[Message] = [
        {"role": "user", "content": "plan my trip to Rome"},  # an input item without "type"
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "Checking the weather.", "annotations": []}
            ],
        },
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "SECRET sunny"},
    ]
    assert extract_query(items) == "Checking the weather."
    assert idle_steps(items) == 0  # the function call belongs to the step that said it
    assert [t.role for t in read_turns(items)] == ["user", "assistant", "tool"]
    items.append({"type": "function_call", "call_id": "c2", "name": "search_hotels"})
    assert extract_query(items) == "plan my trip to Rome Checking the weather. — search_hotels"
    items.append(
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": ""}]}
    )
    items.append(
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ok"}]}
    )
    assert idle_steps(items) == 0
    assert extract_query(items) == "plan my trip to Rome Checking the weather. ok"


def test_responses_hosted_tool_calls_count_as_tool_use() -> None:
    items: list[Message] = [
        {"role": "user", "content": "latest news on trio"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "mcp_call", "id": "m1", "name": "fetch_page", "server_label": "web"},
    ]
    assert idle_steps(items) == 0
    assert extract_query(items) == "latest news on trio — web_search fetch_page"


def test_gemini_contents() -> None:
    contents: list[Message] = [
        {"role": "user", "parts": [{"text": "find flights to Lisbon"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "search_flights", "args": {}}}]},
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "search_flights", "response": {}}}],
        },
    ]
    assert extract_query(contents) == "find flights to Lisbon — search_flights"
    assert idle_steps(contents) == 0
    contents.append(
        {"role": "model", "parts": [{"text": "thinking", "thought": True}, {"text": "No flights."}]}
    )
    assert extract_query(contents) == "No flights."
    assert idle_steps(contents) == 1


def test_gemini_python_sdk_spelling_and_a_missing_role() -> None:
    contents: list[Message] = [
        {"parts": [{"text": "find flights"}]},
        {"role": "model", "parts": [{"function_call": {"name": "search_flights"}}]},
        {"role": "user", "parts": [{"function_response": {"name": "search_flights"}}]},
    ]
    assert extract_query(contents) == "find flights — search_flights"
    assert idle_steps(contents) == 0


def test_chat_content_parts_custom_tools_and_the_legacy_function_call() -> None:
    messages: list[Message] = [
        {"role": "developer", "content": "be brief"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "sum"}, {"type": "image_url"}, "these"],
        },
        {"role": "assistant", "content": None, "function_call": {"name": "add", "arguments": "{}"}},
        {"role": "function", "name": "add", "content": "3"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "calc", "input": "1"}}],
        },
    ]
    assert extract_query(messages) == "sum these — calc"
    assert idle_steps(messages) == 0


def test_anthropic_server_tool_use_counts_as_tool_use() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "latest news on trio"},
        {
            "role": "assistant",
            "content": [
                {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}},
                {"type": "web_search_tool_result", "tool_use_id": "s1", "content": []},
            ],
        },
    ]
    assert idle_steps(messages) == 0


class _SdkObject:
    """Stands in for a vendor SDK's pydantic model."""

    def __init__(self, data: Message) -> None:
        self.data = data

    def model_dump(self, *, exclude_none: bool = False) -> Message:
        return {k: v for k, v in self.data.items() if v is not None or not exclude_none}


def test_sdk_objects_are_read_through_model_dump() -> None:
    reply = _SdkObject(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_SdkObject({"type": "function", "function": {"name": "get_weather"}})],
        }
    )
    blocks = [_SdkObject({"type": "text", "text": "weather in Oslo"})]
    messages = [{"role": "user", "content": blocks}, reply]
    assert extract_query(messages) == "weather in Oslo — get_weather"
    assert idle_steps(messages) == 0


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (b"weather", "messages given as bytes must be the JSON text of a message list"),
        ({"role": "user", "content": "x"}, "messages must be a string or a list.*got dict"),
        (
            [{"role": "user", "content": 5}],
            "message 0: field 'content' must be a string, a content block",
        ),
        (
            [{"role": "user", "content": [7]}],
            "message 0: content block 0: expected an object, got int 7",
        ),
        (
            [{"role": "user", "content": "x"}, {"type": "message"}],
            "message 1: expected a message with a string 'role'",
        ),
        ([{"type": 3}], "message 0: field 'type' must be a string, got int 3"),
        ([{"parts": "hello"}], "message 0: field 'parts' must be a list, got str"),
        ([{"role": 1, "parts": []}], "message 0: field 'role' must be a string"),
        ([{"parts": [None]}], "message 0: part 0: expected an object, got NoneType"),
        (
            [{"role": "assistant", "tool_calls": "get_weather"}],
            "message 0: field 'tool_calls' must be a list",
        ),
        ([{"role": "assistant", "tool_calls": [1]}], "message 0: tool call 0: expected an object"),
    ],
)
def test_bad_shapes_name_the_message_and_what_came(bad: object, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        read_turns(bad)


class _BrokenSdkObject:
    def model_dump(self, *, exclude_none: bool = False) -> Message:
        raise RuntimeError("not serialisable")


def test_an_sdk_object_that_cannot_dump_itself_is_a_clear_error() -> None:
    with pytest.raises(
        ConfigError, match=r"message 0: cannot read _BrokenSdkObject: not serialisable"
    ):
        read_turns([_BrokenSdkObject()])


# -- one conversation, every shape ------------------------------------------------------------


@attrs.frozen
class Ask:
    text: str


@attrs.frozen
class Step:
    """One model response: optional text and the tools it called (results follow the calls)."""

    text: str
    calls: tuple[str, ...]


Event = Ask | Step


def chat(events: list[Event], parts: bool) -> list[Message]:
    out: list[Message] = []
    for event in events:
        if isinstance(event, Ask):
            content: object = [{"type": "text", "text": event.text}] if parts else event.text
            out.append({"role": "user", "content": content})
            continue
        message: Message = {"role": "assistant", "content": event.text or None}
        if event.calls:
            message["tool_calls"] = [
                {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": "{}"}}
                for i, n in enumerate(event.calls)
            ]
        out.append(message)
        out.extend(
            {"role": "tool", "tool_call_id": f"c{i}", "content": "R"}
            for i in range(len(event.calls))
        )
    return out


def responses(events: list[Event], typed: bool) -> list[Message]:
    out: list[Message] = []
    for event in events:
        if isinstance(event, Ask):
            item: Message = {
                "role": "user",
                "content": [{"type": "input_text", "text": event.text}],
            }
            out.append({"type": "message", **item} if typed else item)
            continue
        if event.text or not event.calls:
            text = [{"type": "output_text", "text": event.text, "annotations": []}]
            out.append({"type": "message", "role": "assistant", "content": text})
        out.append({"type": "reasoning", "summary": []})
        for i, name in enumerate(event.calls):
            out.append(
                {"type": "function_call", "call_id": f"c{i}", "name": name, "arguments": "{}"}
            )
        out.extend(
            {"type": "function_call_output", "call_id": f"c{i}", "output": "R"}
            for i in range(len(event.calls))
        )
    return out


def anthropic(events: list[Event], blocks: bool) -> list[Message]:
    out: list[Message] = []
    for event in events:
        if isinstance(event, Ask):
            content: object = [{"type": "text", "text": event.text}] if blocks else event.text
            last = out[-1]["content"] if out and out[-1]["role"] == "user" else None
            if blocks and isinstance(last, list) and last[-1]["type"] == "tool_result":
                last.append({"type": "text", "text": event.text})  # after the results
            else:
                out.append({"role": "user", "content": content})
            continue
        parts: list[Message] = [{"type": "text", "text": event.text}] if event.text else []
        parts += [
            {"type": "tool_use", "id": f"t{i}", "name": n, "input": {}}
            for i, n in enumerate(event.calls)
        ]
        out.append({"role": "assistant", "content": parts})
        if event.calls:
            results = [
                {"type": "tool_result", "tool_use_id": f"t{i}", "content": "R"}
                for i in range(len(event.calls))
            ]
            out.append({"role": "user", "content": results})
    return out


def gemini(events: list[Event], _: bool) -> list[Message]:
    out: list[Message] = []
    for event in events:
        if isinstance(event, Ask):
            out.append({"role": "user", "parts": [{"text": event.text}]})
            continue
        parts: list[Message] = [{"text": event.text}] if event.text else []
        parts += [{"functionCall": {"name": n, "args": {}}} for n in event.calls]
        out.append({"role": "model", "parts": parts})
        if event.calls:
            replies = [{"functionResponse": {"name": n, "response": {}}} for n in event.calls]
            out.append({"role": "user", "parts": replies})
    return out


SHAPES: list[Callable[[list[Event], bool], list[Message]]] = [chat, responses, anthropic, gemini]
WORDS = ["send", "email", "weather", "file", "read", "calendar", "  ", ""]
TOOL_NAMES = ["send_email", "get_weather", "read_file"]


@st.composite
def conversations(draw: st.DrawFn) -> list[Event]:
    """Asks and steps; a call-only step never directly follows a step without calls, since
    Responses items cannot tell that apart from one step with text and calls."""
    events: list[Event] = []
    for _ in range(draw(st.integers(0, 7))):
        text = " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=4)))
        if draw(st.booleans()):
            events.append(Ask(text))
            continue
        calls = tuple(draw(st.lists(st.sampled_from(TOOL_NAMES), max_size=2)))
        last = events[-1] if events else None
        if calls and not text.strip() and isinstance(last, Step) and not last.calls:
            text = "next"
        events.append(Step(text, calls))
    return events


KEYWORD_INDEX = ToolIndex(
    Catalog.from_plain(
        [
            {"name": "send_email", "description": "Send an email"},
            {"name": "get_weather", "description": "Weather forecast"},
            {"name": "read_file", "description": "Read a file"},
        ]
    ),
    embedder=None,
    cache=None,
)


@given(conversations(), st.booleans())
def test_every_shape_of_one_conversation_reads_alike(events: list[Event], variant: bool) -> None:
    rendered = [shape(events, variant) for shape in SHAPES]
    queries = {extract_query(messages) for messages in rendered}
    assert len(queries) == 1, queries
    assert len({idle_steps(messages) for messages in rendered}) == 1
    assert len({routing_query(messages) for messages in rendered}) == 1  # type: ignore[arg-type]
    selections = {KEYWORD_INDEX.select(q, adaptive=False).tool_ids for q in queries}
    assert len(selections) == 1
    if len(events) == 1 and isinstance(events[0], Ask):
        assert extract_query(events[0].text) == queries.pop()


# -- the frameworks' shapes of the same conversation ------------------------------------------


def langchain(events: list[Event], as_dicts: bool) -> list[Any]:
    lc = pytest.importorskip("langchain_core.messages")
    out: list[Any] = []
    for event in events:
        if isinstance(event, Ask):
            out.append(lc.HumanMessage(event.text))
            continue
        calls = [{"name": n, "args": {}, "id": f"c{i}"} for i, n in enumerate(event.calls)]
        out.append(lc.AIMessage(event.text, tool_calls=calls))
        out.extend(lc.ToolMessage("R", tool_call_id=f"c{i}") for i in range(len(event.calls)))
    return lc.messages_to_dict(out) if as_dicts else out


def langchain_dumps(events: list[Event], _: bool) -> list[Any]:
    return [message.model_dump() for message in langchain(events, False)]


def pydantic_ai(events: list[Event], dumped: bool) -> Any:
    pm = pytest.importorskip("pydantic_ai.messages")
    out: list[Any] = []
    for event in events:
        if isinstance(event, Ask):
            out.append(pm.ModelRequest(parts=[pm.UserPromptPart(event.text)]))
            continue
        parts: list[Any] = [pm.TextPart(event.text)] if event.text else []
        parts += [pm.ToolCallPart(n, {}, f"c{i}") for i, n in enumerate(event.calls)]
        out.append(pm.ModelResponse(parts=parts))
        if event.calls:
            returns = [pm.ToolReturnPart(n, "R", f"c{i}") for i, n in enumerate(event.calls)]
            out.append(pm.ModelRequest(parts=returns))
    return pm.ModelMessagesTypeAdapter.dump_json(out) if dumped else out


def pydantic_ai_dumps(events: list[Event], _: bool) -> Any:
    adapter = pytest.importorskip("pydantic_ai.messages").ModelMessagesTypeAdapter
    return adapter.dump_python(pydantic_ai(events, False))


def agents_items(events: list[Event], as_input: bool) -> list[Any]:
    items = pytest.importorskip("agents.items")
    agent = pytest.importorskip("agents").Agent(name="a")
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    out: list[Any] = []
    for event in events:
        if isinstance(event, Ask):
            out.append({"role": "user", "content": event.text})
            continue
        if event.text or not event.calls:
            text = ResponseOutputText(type="output_text", text=event.text, annotations=[])
            said = ResponseOutputMessage(
                id="m", role="assistant", status="completed", type="message", content=[text]
            )
            out.append(items.MessageOutputItem(agent=agent, raw_item=said))
        for i, name in enumerate(event.calls):
            call = ResponseFunctionToolCall(
                type="function_call", call_id=f"c{i}", name=name, arguments="{}"
            )
            out.append(items.ToolCallItem(agent=agent, raw_item=call))
        out.extend(
            items.ToolCallOutputItem(
                agent=agent,
                raw_item={"type": "function_call_output", "call_id": f"c{i}", "output": "R"},
                output="R",
            )
            for i in range(len(event.calls))
        )
    if as_input:
        return [i if isinstance(i, dict) else i.to_input_item() for i in out]
    return out


FRAMEWORK_SHAPES: list[Callable[[list[Event], bool], Any]] = [
    langchain,
    langchain_dumps,
    pydantic_ai,
    pydantic_ai_dumps,
    agents_items,
]


@given(conversations(), st.booleans())
def test_every_framework_shape_of_one_conversation_reads_alike(
    events: list[Event], variant: bool
) -> None:
    rendered = [shape(events, variant) for shape in [*SHAPES, *FRAMEWORK_SHAPES]]
    queries = {extract_query(messages) for messages in rendered}
    assert len(queries) == 1, queries
    assert len({idle_steps(messages) for messages in rendered}) == 1
    assert len({routing_query(messages) for messages in rendered}) == 1
    selections = {KEYWORD_INDEX.select(q, adaptive=False).tool_ids for q in queries}
    assert len(selections) == 1

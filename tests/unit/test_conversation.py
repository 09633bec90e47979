"""Query extraction and step counting over OpenAI- and Anthropic-style conversations.

Every other shape agents pass (Responses items, Gemini contents, plain strings) and the
property that they all read alike: tests/unit/test_conversation_shapes.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute import ConfigError
from toolroute._core.select.conversation import extract_query, idle_steps, read_turns


def user(text: str) -> dict[str, object]:
    return {"role": "user", "content": text}


def assistant(text: str = "", *calls: str) -> dict[str, object]:
    message: dict[str, object] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [
            {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": "{}"}}
            for i, n in enumerate(calls)
        ]
    return message


def tool_result(text: str = "42") -> dict[str, object]:
    return {"role": "tool", "tool_call_id": "c0", "content": text}


def test_first_step_uses_the_request() -> None:
    assert extract_query([{"role": "system", "content": "be nice"}, user("weather in Oslo")]) == (
        "weather in Oslo"
    )


def test_anchor_persists_after_it_scrolls_out_of_the_window() -> None:
    messages = [
        user("book a table for four at an italian place near the office on friday"),
        assistant("Which time?"),
        user("7pm"),
        assistant("Any budget?"),
        user("cheap"),
    ]
    query = extract_query(messages)
    assert query.startswith("book a table for four")
    assert query.endswith("7pm Any budget? cheap")


def test_anchor_is_not_repeated_when_it_is_recent() -> None:
    assert extract_query([user("short"), user("the longest request here")]) == (
        "short the longest request here"
    )


def test_after_a_step_with_text_that_text_is_the_query() -> None:
    messages = [user("plan my trip"), assistant("I will check the weather in Rome first.")]
    assert extract_query(messages) == "I will check the weather in Rome first."


def test_after_tool_calls_only_the_request_and_tool_names() -> None:
    messages = [
        user("plan my trip to Rome"),
        assistant("", "get_weather", "search_hotels"),
        tool_result(),
    ]
    assert extract_query(messages) == "plan my trip to Rome — get_weather search_hotels"


def test_tool_results_add_no_text() -> None:
    messages = [user("sum the numbers"), assistant("", "add"), tool_result("SECRET OUTPUT")]
    assert "SECRET" not in extract_query(messages)


def test_anthropic_blocks() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "find flights to Lisbon"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "search_flights", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "no flights"}],
        },
    ]
    assert extract_query(messages) == "find flights to Lisbon — search_flights"
    assert idle_steps(messages) == 0


def test_idle_steps_count_trailing_steps_without_tool_calls() -> None:
    assert idle_steps([user("x")]) == 0
    assert idle_steps([user("x"), assistant("hmm")]) == 1
    assert idle_steps([user("x"), assistant("hmm"), assistant("still")]) == 2
    assert idle_steps([user("x"), assistant("", "t"), tool_result(), assistant("done?")]) == 1
    # a new request starts counting again
    assert idle_steps([user("x"), assistant("hmm"), user("y")]) == 0


def test_empty_conversation_has_no_query() -> None:
    assert extract_query([]) == ""
    assert extract_query([{"role": "system", "content": "rules"}]) == ""


@pytest.mark.parametrize("bad", [[1], [{"content": "no role"}], None])
def test_malformed_messages_are_a_clear_error(bad: object) -> None:
    with pytest.raises(ConfigError, match="message"):
        read_turns(bad)


texts = st.text(max_size=40)
messages = st.lists(
    st.one_of(
        st.builds(user, texts),
        st.builds(assistant, texts, st.sampled_from(["a", "b"])),
        st.builds(assistant, texts),
        st.builds(tool_result, texts),
    ),
    max_size=12,
)


@given(messages)
def test_any_conversation_yields_a_query_and_a_count(conversation: list[dict[str, object]]) -> None:
    query = extract_query(conversation)
    assert isinstance(query, str)
    assert 0 <= idle_steps(conversation) <= len(conversation)

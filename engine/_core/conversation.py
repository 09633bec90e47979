"""Reading an agent conversation: the request to route on, and how the last steps went.

Messages are OpenAI Chat Completions or Anthropic Messages dicts. Text comes from string
content and from text blocks; tool calls from OpenAI ``tool_calls`` and Anthropic ``tool_use``
blocks; tool results (OpenAI ``role: tool``, Anthropic ``tool_result`` blocks) carry no
request text.

Query extraction follows toolpick's rules as the reference:

- the **conversation query** is the longest user text (the anchor; the first wins ties) plus
  the last ``RECENT_WINDOW`` texts from user or assistant, the anchor left out when the window
  already holds it;
- after a step in which the assistant said what it will do next, that text is the query;
- after a step with tool calls only, the query is the conversation query plus the names of the
  tools just used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .errors import ConfigError

#: How many recent texts join the anchor in the conversation query.
RECENT_WINDOW = 3


@attrs.frozen
class Turn:
    """One message reduced to what routing needs."""

    role: str
    text: str
    tool_calls: tuple[str, ...] = ()
    is_tool_result: bool = False


def read_turns(messages: object) -> list[Turn]:
    """Normalise OpenAI- or Anthropic-style messages.

    Raises:
        ConfigError: ``messages`` is not a list of objects with a string ``role``.
    """
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise ConfigError(
            f"messages must be a list of message objects, got {type(messages).__name__}"
        )
    turns = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise ConfigError(
                f"message {index}: expected an object with a string 'role', got {message!r:.80}"
            )
        turns.append(_turn(message))
    return turns


def _turn(message: Mapping[str, Any]) -> Turn:
    role = message["role"]
    content = message.get("content")
    texts: list[str] = []
    calls: list[str] = []
    tool_result = role in ("tool", "function")
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, Sequence):
        for block in content:
            if isinstance(block, str):
                texts.append(block)
            elif isinstance(block, Mapping):
                kind = block.get("type")
                if kind in ("text", "input_text", "output_text") and isinstance(
                    block.get("text"), str
                ):
                    texts.append(block["text"])
                elif kind == "tool_use" and isinstance(block.get("name"), str):
                    calls.append(block["name"])
                elif kind == "tool_result":
                    tool_result = True
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            calls.append(function["name"])
    text = "" if tool_result else " ".join(t for t in texts if t.strip())
    return Turn(role, text.strip(), tuple(calls), tool_result)


def conversation_query(turns: Sequence[Turn]) -> str:
    """The longest user text plus the recent window (toolpick's ``conversationQuery``)."""
    anchor = ""
    for turn in turns:
        if turn.role == "user" and len(turn.text) > len(anchor):
            anchor = turn.text
    recent = [t.text for t in turns if t.role in ("user", "assistant") and t.text][-RECENT_WINDOW:]
    if not anchor or anchor in recent:
        return " ".join(recent)
    return " ".join([anchor, *recent])


def steps_since_request(turns: Sequence[Turn]) -> list[Turn]:
    """The assistant turns after the last user request (tool results do not end a step run)."""
    steps: list[Turn] = []
    for turn in reversed(turns):
        if turn.role == "user" and not turn.is_tool_result:
            break
        if turn.role == "assistant":
            steps.append(turn)
    steps.reverse()
    return steps


def extract_query(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text to route the next step on; ``""`` when the conversation has none."""
    turns = read_turns(messages)
    steps = steps_since_request(turns)
    if steps:
        last = steps[-1]
        if last.text:
            return last.text  # the assistant's stated next action
        base = conversation_query(turns)
        if last.tool_calls:
            return f"{base} — {' '.join(last.tool_calls)}".strip(" —")
        return base
    return conversation_query(turns)


def idle_steps(messages: Sequence[Mapping[str, Any]]) -> int:
    """How many of the latest steps, newest first, made no tool call (paging escalation)."""
    count = 0
    for step in reversed(steps_since_request(read_turns(messages))):
        if step.tool_calls:
            break
        count += 1
    return count

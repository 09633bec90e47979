"""Reading an agent conversation: the request to route on, and how the last steps went.

A conversation is a plain string (one user request) or a list in any shape agents pass around:

- **OpenAI Chat Completions** — ``{"role", "content": str | [parts], "tool_calls"?}``; tool
  results are ``role: "tool"`` (or the legacy ``"function"``);
- **OpenAI Responses** items — ``{"type": "message", "role", "content"}`` (also without
  ``"type"``), ``function_call`` and the other ``*_call`` items, ``function_call_output`` and
  the other ``*_output`` items; other item types (``reasoning`` …) carry nothing to read;
- **Anthropic Messages** — content blocks ``text``, ``tool_use`` (and ``server_tool_use``,
  ``mcp_tool_use``), ``tool_result``;
- **Gemini contents** — ``{"role": "user" | "model", "parts": [{"text"}, {"functionCall"},
  {"functionResponse"}]}`` (the Python SDK's ``function_call`` spelling too).

Objects with a ``model_dump()`` method (the vendors' SDK types) are read as their dump. Text
comes from string content and text blocks; tool results carry no request text. Responses
call items that follow an assistant turn join it: one model response is one step there too,
so every shape of the same conversation gives the same query and step count.

Query extraction follows toolpick's rules as the reference:

- the **conversation query** is the longest user text (the anchor; the first wins ties) plus
  the last ``RECENT_WINDOW`` texts from user or assistant, the anchor left out when the window
  already holds it;
- after a step in which the assistant said what it will do next, that text is the query;
- after a step with tool calls only, the query is the conversation query plus the names of the
  tools just used.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias, TypeGuard

import attrs

from ..errors import ConfigError

#: How many recent texts join the anchor in the conversation query.
RECENT_WINDOW = 3

#: A conversation: one request as a string, or a list of messages in any supported shape.
Messages: TypeAlias = "str | Sequence[object]"

_ROLES = {"model": "assistant", "developer": "system"}  # Gemini and OpenAI spellings
_TOOL_ROLES = ("tool", "function")
_TEXT_BLOCKS = ("text", "input_text", "output_text")
_CALL_BLOCKS = ("tool_use", "server_tool_use", "mcp_tool_use")
_NAMED_CALL_ITEMS = ("function_call", "custom_tool_call", "mcp_call")
_EXPECTED = (
    "a message with a string 'role', a Responses item with a string 'type' "
    "or a Gemini content with 'parts'"
)


@attrs.frozen
class Turn:
    """One message reduced to what routing needs."""

    role: str
    text: str
    tool_calls: tuple[str, ...] = ()
    is_tool_result: bool = False


def read_turns(messages: object) -> list[Turn]:
    """Normalise a conversation in any supported shape into turns.

    Args:
        messages: a string (one user request) or a list of messages (see the module doc).

    Returns:
        One turn per message; Gemini ``model`` becomes ``assistant``, Responses call items join
        the assistant turn they follow, and items that carry nothing (``reasoning`` …) are left
        out.

    Raises:
        ConfigError: ``messages`` is neither a string nor a list, or a message has a shape none
            of the formats allows; the message names the index, what was expected and what came.
    """
    if isinstance(messages, str):
        return [Turn("user", messages.strip())]
    if isinstance(messages, bytes | bytearray | Mapping) or not isinstance(messages, Sequence):
        raise ConfigError(
            f"messages must be a string or a list of message objects, got {_describe(messages)}"
        )
    turns: list[Turn] = []
    for index, message in enumerate(messages):
        turn, joins_step = _read_message(index, message)
        if turn is None:
            continue
        last = turns[-1] if turns else None
        if joins_step and last is not None and last.role == "assistant":
            turns[-1] = attrs.evolve(last, tool_calls=(*last.tool_calls, *turn.tool_calls))
        else:
            turns.append(turn)
    return turns


def _read_message(index: int, raw: object) -> tuple[Turn | None, bool]:
    """The turn a message gives (``None``: nothing to read) and whether it joins the last step."""
    message = _as_mapping(raw, f"message {index}")
    kind = message.get("type")
    role = message.get("role")
    where = f"message {index}"
    if "parts" in message and kind is None:
        return _gemini_turn(where, message), False
    if kind is None or kind == "message":
        if not isinstance(role, str):
            raise ConfigError(f"{where}: expected {_EXPECTED}, got {_clip(message)}")
        return _message_turn(where, role, message), False
    if not isinstance(kind, str):
        raise ConfigError(f"{where}: field 'type' must be a string, got {_describe(kind)}")
    if kind in _NAMED_CALL_ITEMS or kind.endswith("_call"):
        name = message.get("name")
        called = name if kind in _NAMED_CALL_ITEMS and isinstance(name, str) else kind[:-5]
        return Turn("assistant", "", (called,)), True
    if kind.endswith("_output"):
        return Turn("tool", "", (), True), False
    return None, False  # reasoning, item_reference, approvals…: no request text, no tool use


def _message_turn(where: str, role: str, message: Mapping[str, Any]) -> Turn:
    role = _ROLES.get(role, role)
    content = message.get("content")
    texts: list[str] = []
    calls: list[str] = []
    tool_result = role in _TOOL_ROLES
    if isinstance(content, str):
        texts.append(content)
    elif _is_list(content):
        for number, raw in enumerate(content):
            if isinstance(raw, str):
                texts.append(raw)
                continue
            block = _as_mapping(raw, f"{where}: content block {number}")
            kind = block.get("type")
            if kind in _TEXT_BLOCKS and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind in _CALL_BLOCKS and isinstance(block.get("name"), str):
                calls.append(block["name"])
            elif kind == "tool_result":
                tool_result = True
    elif content is not None:
        raise ConfigError(
            f"{where}: field 'content' must be a string, a list of content blocks or null, "
            f"got {_describe(content)}"
        )
    calls.extend(_chat_calls(where, message))
    return _turn(role, texts, calls, tool_result)


def _chat_calls(where: str, message: Mapping[str, Any]) -> list[str]:
    """Names from OpenAI Chat ``tool_calls`` and the legacy ``function_call``."""
    raw_calls = message.get("tool_calls")
    if raw_calls is None:
        raw_calls = []
    elif not _is_list(raw_calls):
        raise ConfigError(f"{where}: field 'tool_calls' must be a list, got {_describe(raw_calls)}")
    functions = []
    for number, raw in enumerate(raw_calls):
        call = _as_mapping(raw, f"{where}: tool call {number}")
        functions.append(call.get("function", call.get("custom")))  # function or custom tool
    functions.append(message.get("function_call"))
    names = []
    for function in functions:
        if function is not None and not isinstance(function, Mapping):
            function = _as_mapping(function, f"{where}: function")
        if function is not None and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


def _gemini_turn(where: str, content: Mapping[str, Any]) -> Turn:
    role = content.get("role", "user")  # Gemini allows the role to be left out for user turns
    if not isinstance(role, str):
        raise ConfigError(f"{where}: field 'role' must be a string, got {_describe(role)}")
    role = _ROLES.get(role, role)
    parts = content.get("parts")
    if parts is None:
        parts = []
    elif not _is_list(parts):
        raise ConfigError(f"{where}: field 'parts' must be a list, got {_describe(parts)}")
    texts: list[str] = []
    calls: list[str] = []
    tool_result = role in _TOOL_ROLES
    for number, raw in enumerate(parts):
        part = _as_mapping(raw, f"{where}: part {number}")
        call = part.get("functionCall", part.get("function_call"))
        if isinstance(part.get("text"), str) and not part.get("thought"):
            texts.append(part["text"])
        elif call is not None:
            call = _as_mapping(call, f"{where}: part {number}: functionCall")
            if isinstance(call.get("name"), str):
                calls.append(call["name"])
        elif part.get("functionResponse", part.get("function_response")) is not None:
            tool_result = True
    return _turn(role, texts, calls, tool_result)


def _turn(role: str, texts: list[str], calls: list[str], tool_result: bool) -> Turn:
    text = "" if tool_result else " ".join(t for t in texts if t.strip())
    return Turn(role, text.strip(), tuple(calls), tool_result)


def _as_mapping(value: object, where: str) -> Mapping[str, Any]:
    """A dict as is; an SDK object (pydantic) as its ``model_dump()``."""
    if isinstance(value, Mapping):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        try:
            dumped = dump(exclude_none=True)
        except Exception as exc:  # a caller's object that cannot describe itself
            raise ConfigError(f"{where}: cannot read {type(value).__name__}: {exc}") from exc
        if isinstance(dumped, Mapping):
            return dumped
    raise ConfigError(f"{where}: expected an object, got {_describe(value)}")


def _is_list(value: object) -> TypeGuard[Sequence[Any]]:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray)


def _describe(value: object) -> str:
    return f"{type(value).__name__} {_clip(value)}"


def _clip(value: object) -> str:
    text = reprlib.repr(value)  # bounded depth and length, whatever the caller passed
    return text if len(text) <= 80 else text[:77] + "..."


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


def extract_query(messages: Messages) -> str:
    """The text to route the next step on; ``""`` when the conversation has none.

    Raises:
        ConfigError: as ``read_turns``.
    """
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


def idle_steps(messages: Messages) -> int:
    """How many of the latest steps, newest first, made no tool call (paging escalation).

    Raises:
        ConfigError: as ``read_turns``.
    """
    count = 0
    for step in reversed(steps_since_request(read_turns(messages))):
        if step.tool_calls:
            break
        count += 1
    return count

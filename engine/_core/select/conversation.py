"""Reading an agent conversation: the request to route on, and how the last steps went.

A conversation is a plain string (one user request) or a list in any shape agents pass around:

- **OpenAI Chat Completions** — ``{"role", "content": str | [parts], "tool_calls"?}``; tool
  results are ``role: "tool"`` (or the legacy ``"function"``);
- **OpenAI Responses** items — ``{"type": "message", "role", "content"}`` (also without
  ``"type"``), ``function_call`` and the other ``*_call`` items, ``function_call_output`` and
  the other ``*_output`` items; other item types (``reasoning``, item references, also as a
  bare ``{"id"}`` …) carry nothing to read;
- **Anthropic Messages** — content blocks ``text``, ``tool_use`` (and ``server_tool_use``,
  ``mcp_tool_use``), ``tool_result`` (text after the tool results of a user message is a user
  turn of its own);
- **Gemini contents** — ``{"role": "user" | "model", "parts": [{"text"}, {"functionCall"},
  {"functionResponse"}, {"executableCode"}]}`` (the Python SDK's ``function_call`` spelling too);
- **MCP** ``SamplingMessage`` / ``PromptMessage`` — content that is one block, read as a list.

- **LangChain** messages and their dicts, **Pydantic AI** ``ModelMessage``s and their dumps
  (see ``framework_messages``), **OpenAI Agents SDK** run items (their ``raw_item``) and
  input items (Responses items); ``role: "human"`` and ``"ai"`` are LangChain's spellings.

Objects are read by their shape, never by importing a framework: a pydantic model (the
vendors' SDK types, LangChain messages) as its ``model_dump()``, a dataclass (Pydantic AI,
Agents items) as its fields. A message no format reads is a ``ConfigError`` naming its index,
type and keys (never its text); a readable conversation without user text reads as no query
(``skipped``). Text
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

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import attrs

from ..errors import ConfigError
from .framework_messages import (
    is_langchain,
    is_pydantic_ai,
    langchain_turn,
    pydantic_ai_turns,
)
from .message_view import Turn as Turn
from .message_view import as_mapping, is_list, listed, make_turn, shape

#: How many recent texts join the anchor in the conversation query.
RECENT_WINDOW = 3

#: A conversation: one request as a string, a list of messages in any supported shape, or the
#: JSON text of such a list as bytes (Pydantic AI's ``ModelMessagesTypeAdapter.dump_json``).
Messages: TypeAlias = "str | bytes | Sequence[object]"

_ROLES = {"model": "assistant", "developer": "system", "human": "user", "ai": "assistant"}
_KNOWN_ROLES = ("user", "assistant", "system", "tool", "function")
_TOOL_ROLES = ("tool", "function")
_TEXT_BLOCKS = ("text", "input_text", "output_text")
#: Content blocks that are a named tool use: Anthropic's, and LangChain's standard blocks.
_CALL_BLOCKS = (
    "tool_use",
    "server_tool_use",
    "mcp_tool_use",
    "tool_call",
    "tool_call_chunk",
    "server_tool_call",
    "server_tool_call_chunk",
)
_NAMED_CALL_ITEMS = ("function_call", "custom_tool_call", "mcp_call")
#: Responses item types that carry no request text and no tool use of the agent's.
_SILENT_ITEMS = (
    "reasoning",
    "item_reference",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "compaction",
    "compaction_trigger",
    "configuration_update",
    "additional_tools",
    "program",
)
_EXPECTED = (
    "a message with a string 'role' (OpenAI, Anthropic), a Responses item with a string "
    "'type', a Gemini content with 'parts', a LangChain message ('type': human, ai, system, "
    "tool) or a Pydantic AI message ('kind': request or response, with 'parts')"
)


def read_turns(messages: object) -> list[Turn]:
    """Normalise a conversation in any supported shape into turns.

    Args:
        messages: a string (one user request), a list of messages (see the module doc), or
            the JSON text of such a list as bytes (``ModelMessagesTypeAdapter.dump_json``).

    Returns:
        One turn per message (a Pydantic AI request may give several); Gemini ``model``
        becomes ``assistant``, Responses call items join the assistant turn they follow, and
        items that carry nothing (``reasoning`` …) are left out.

    Raises:
        ConfigError: ``messages`` is neither a string nor a list, or a message has a shape none
            of the formats allows; the message names the index, what was expected and what
            came (its type and keys, never its text).
    """
    if isinstance(messages, str):
        return [Turn("user", messages.strip())]
    if isinstance(messages, bytes | bytearray):
        messages = _json_list(messages)
    if isinstance(messages, Mapping) or not isinstance(messages, Sequence):
        raise ConfigError(
            f"messages must be a string or a list of message objects, got {shape(messages)}"
        )
    turns: list[Turn] = []
    for index, message in enumerate(messages):
        for turn, joins_step in _read_message(f"message {index}", message):
            last = turns[-1] if turns else None
            if joins_step and last is not None and last.role == "assistant":
                turns[-1] = attrs.evolve(last, tool_calls=(*last.tool_calls, *turn.tool_calls))
            else:
                turns.append(turn)
    return turns


def _json_list(data: bytes | bytearray) -> object:
    expected = (
        "messages given as bytes must be the JSON text of a message list "
        "(as ModelMessagesTypeAdapter.dump_json writes it)"
    )
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ConfigError(f"{expected}, got {shape(data)} that are not JSON") from None
    if not isinstance(value, list):
        raise ConfigError(f"{expected}, got JSON {shape(value)}")
    return value


def _read_message(where: str, raw: object) -> Iterator[tuple[Turn, bool]]:
    """The turns a message gives (none: nothing to read), each with whether it joins the
    last step."""
    message = as_mapping(raw, where)
    kind = message.get("type")
    if "raw_item" in message and isinstance(kind, str) and kind.endswith("_item"):
        yield from _read_message(where, message["raw_item"])  # an Agents SDK run item
        return
    if is_pydantic_ai(message):
        for turn in pydantic_ai_turns(where, message):
            yield turn, False
        return
    if "parts" in message and kind is None:
        yield _gemini_turn(where, message), False
        return
    if is_langchain(message):
        read = langchain_turn(where, message, _content, _role)
        if read is not None:
            yield read, False
        return
    if kind is None and "id" in message and message.keys() <= {"id", "type"}:
        return  # a Responses item reference, its optional "type" left out
    if kind is None or kind == "message":
        if not isinstance(message.get("role"), str):
            raise ConfigError(f"{where}: expected {_EXPECTED}; got {shape(message)}")
        for turn in _message_turns(where, message):
            yield turn, False
        return
    if not isinstance(kind, str):
        raise ConfigError(f"{where}: field 'type' must be a string, got {shape(kind)}")
    if kind.endswith("_call"):
        yield Turn("assistant", "", (_called(kind, message),)), True
    elif kind.endswith("_output"):
        yield Turn("tool", "", (), True), False
    elif kind not in _SILENT_ITEMS:
        raise ConfigError(
            f"{where}: unknown item type {kind!r} (keys {listed(message.keys())}); expected "
            f"{_EXPECTED}"
        )


def _called(kind: str, item: Mapping[str, Any]) -> str:
    """The tool a Responses ``*_call`` item uses: its name, or the hosted tool's."""
    name = item.get("name")
    return name if kind in _NAMED_CALL_ITEMS and isinstance(name, str) else kind[:-5]


def _role(where: str, role: object) -> str:
    if not isinstance(role, str):
        raise ConfigError(f"{where}: field 'role' must be a string, got {shape(role)}")
    role = _ROLES.get(role, role)
    if role not in _KNOWN_ROLES:
        known = ", ".join((*_KNOWN_ROLES, *_ROLES))
        raise ConfigError(f"{where}: unknown role {role!r}; expected one of {known}")
    return role


def _message_turns(where: str, message: Mapping[str, Any]) -> list[Turn]:
    role = _role(where, message.get("role"))
    texts, calls, tool_result = _content(where, message.get("content"))
    calls.extend(_chat_calls(where, message))
    audio = message.get("audio")
    if isinstance(audio, Mapping) and isinstance(audio.get("transcript"), str):
        texts.append(audio["transcript"])  # an OpenAI Chat reply spoken aloud
    turn = make_turn(role, texts, calls, tool_result or role in _TOOL_ROLES)
    if tool_result and role == "user" and texts:
        # Anthropic: text blocks after the tool results are the user's own words
        return [turn, make_turn(role, texts, (), False)]
    return [turn]


def _content(where: str, content: object) -> tuple[list[str], list[str], bool]:
    """Texts, tool calls and whether a tool result came, from string or block content."""
    texts: list[str] = []
    calls: list[str] = []
    tool_result = False
    if isinstance(content, Mapping) and isinstance(content.get("type"), str):
        content = [content]  # one block (MCP sampling and prompt messages)
    if isinstance(content, str):
        texts.append(content)
    elif is_list(content):
        for number, raw in enumerate(content):
            if isinstance(raw, str):
                texts.append(raw)
                continue
            block = as_mapping(raw, f"{where}: content block {number}")
            kind = block.get("type")
            if kind in _TEXT_BLOCKS and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind in _CALL_BLOCKS:
                if isinstance(block.get("name"), str):
                    calls.append(block["name"])
            elif isinstance(kind, str) and kind.endswith("_call"):
                calls.append(_called(kind, block))  # Responses items kept as content (LangChain)
            elif kind == "tool_result":
                tool_result = True
    elif content is not None:
        raise ConfigError(
            f"{where}: field 'content' must be a string, a content block, a list of content "
            f"blocks or null, got {shape(content)}"
        )
    return texts, calls, tool_result


def _chat_calls(where: str, message: Mapping[str, Any]) -> list[str]:
    """Names from OpenAI Chat ``tool_calls`` and the legacy ``function_call``."""
    raw_calls = message.get("tool_calls")
    if raw_calls is None:
        raw_calls = []
    elif not is_list(raw_calls):
        raise ConfigError(f"{where}: field 'tool_calls' must be a list, got {shape(raw_calls)}")
    functions = []
    for number, raw in enumerate(raw_calls):
        call = as_mapping(raw, f"{where}: tool call {number}")
        functions.append(call.get("function", call.get("custom", call)))  # or a bare call
    functions.append(message.get("function_call"))
    names = []
    for function in functions:
        if function is not None and not isinstance(function, Mapping):
            function = as_mapping(function, f"{where}: function")
        if function is not None and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


def _gemini_turn(where: str, content: Mapping[str, Any]) -> Turn:
    # Gemini allows the role to be left out for user turns
    role = _role(where, content.get("role", "user"))
    parts = content.get("parts")
    if parts is None:
        parts = []
    elif not is_list(parts):
        raise ConfigError(f"{where}: field 'parts' must be a list, got {shape(parts)}")
    texts: list[str] = []
    calls: list[str] = []
    tool_result = role in _TOOL_ROLES
    for number, raw in enumerate(parts):
        part = as_mapping(raw, f"{where}: part {number}")
        call = part.get("functionCall", part.get("function_call"))
        if isinstance(part.get("text"), str) and not part.get("thought"):
            texts.append(part["text"])
        elif call is not None:
            call = as_mapping(call, f"{where}: part {number}: functionCall")
            if isinstance(call.get("name"), str):
                calls.append(call["name"])
        elif part.get("executableCode", part.get("executable_code")) is not None:
            calls.append("code_execution")  # the model ran code with the hosted tool
        elif part.get("functionResponse", part.get("function_response")) is not None:
            tool_result = True
    return make_turn(role, texts, calls, tool_result)


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
    return query_of_turns(read_turns(messages))


def query_of_turns(turns: Sequence[Turn]) -> str:
    """``extract_query`` of a conversation already read (``read_turns``)."""
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
    return idle_steps_of_turns(read_turns(messages))


def idle_steps_of_turns(turns: Sequence[Turn]) -> int:
    """``idle_steps`` of a conversation already read (``read_turns``)."""
    count = 0
    for step in reversed(steps_since_request(turns)):
        if step.tool_calls:
            break
        count += 1
    return count

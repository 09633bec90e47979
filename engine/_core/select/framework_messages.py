"""Conversations as agent frameworks keep them: LangChain messages and Pydantic AI
``ModelMessage``s, read by their shape (the core imports no framework).

- **LangChain** — ``BaseMessage`` objects (read as their ``model_dump()``), those dumps
  (``{"type": "human" | "ai" | "system" | "tool" | …, "content", "tool_calls"?}``) and
  ``messages_to_dict``'s ``{"type", "data": {...}}``;
- **Pydantic AI** — ``ModelRequest`` / ``ModelResponse`` (dataclasses with ``kind`` and
  ``parts``), each part told apart by its ``part_kind``, and their dumps
  (``ModelMessagesTypeAdapter.dump_python``, or ``dump_json`` parsed).

OpenAI Agents SDK run items wrap a Responses item in ``raw_item``; ``conversation`` unwraps
them, so they read as the Responses items they hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from .message_view import Turn, as_mapping, is_list, make_turn, shape, text_of

#: LangChain's message ``type`` → the role it plays (``chat`` messages carry their own role).
LANGCHAIN_TYPES = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "developer": "system",
    "tool": "tool",
    "function": "function",
    "chat": "chat",
}
#: Streaming chunks: the same messages under their class names.
LANGCHAIN_TYPES |= {
    f"{name}MessageChunk": role
    for name, role in (
        ("Human", "user"),
        ("AI", "assistant"),
        ("System", "system"),
        ("Tool", "tool"),
        ("Function", "function"),
        ("Chat", "chat"),
    )
}
#: ``RemoveMessage``: an instruction to a graph's state, not a message.
LANGCHAIN_SKIPPED = ("remove",)

PYDANTIC_AI_KINDS = ("request", "response")
_SYSTEM_PARTS = ("system-prompt", "instruction", "instruction-delta", "instruction-baseline")


def is_langchain(message: Mapping[str, Any]) -> bool:
    kind = message.get("type")
    return isinstance(kind, str) and (kind in LANGCHAIN_TYPES or kind in LANGCHAIN_SKIPPED)


def langchain_turn(
    where: str, message: Mapping[str, Any], read_content: Any, chat_role: Any
) -> Turn | None:
    """The turn of a LangChain message (``None`` for ``RemoveMessage``).

    ``read_content(where, content)`` reads string or block content into texts and calls;
    ``chat_role(where, role)`` maps a ``chat`` message's own role.
    """
    kind = message["type"]  # the outer type names the message; the data's may differ
    data = message.get("data")
    if isinstance(data, Mapping) and "content" not in message:
        message = data  # messages_to_dict: {"type", "data": {...}}
    if kind in LANGCHAIN_SKIPPED:
        return None
    role = LANGCHAIN_TYPES[kind]
    if role == "chat":
        role = chat_role(where, message.get("role"))
    texts, block_calls, block_result = read_content(where, message.get("content"))
    calls = [
        *_langchain_calls(where, message, "tool_calls"),
        *_langchain_calls(where, message, "invalid_tool_calls"),  # calls whose args did not parse
    ]
    # A provider's tool_use blocks and the message's tool_calls are the same calls: count once.
    return make_turn(
        role, texts, calls or block_calls, block_result or role in ("tool", "function")
    )


def _langchain_calls(where: str, message: Mapping[str, Any], field: str) -> list[str]:
    raw = message.get(field)
    if raw is None:
        return []
    if not is_list(raw):
        raise ConfigError(f"{where}: field '{field}' must be a list, got {shape(raw)}")
    names = []
    for number, item in enumerate(raw):
        call = as_mapping(item, f"{where}: tool call {number}")
        name = text_of(call.get("name"))
        if name is not None:
            names.append(name)
    return names


def is_pydantic_ai(message: Mapping[str, Any]) -> bool:
    return message.get("kind") in PYDANTIC_AI_KINDS and "parts" in message


def pydantic_ai_turns(where: str, message: Mapping[str, Any]) -> list[Turn]:
    """A ``ModelResponse`` is one assistant step; a ``ModelRequest`` gives a turn per run of
    parts of one role (system prompt, user prompt, tool returns), in order."""
    parts = message.get("parts")
    if not is_list(parts):
        raise ConfigError(f"{where}: field 'parts' must be a list, got {shape(parts)}")
    read = [as_mapping(raw, f"{where}: part {number}") for number, raw in enumerate(parts)]
    if message["kind"] == "response":
        texts, calls = [], []
        for part in read:
            kind = str(part.get("part_kind", ""))
            if kind == "text":
                texts.append(text_of(part.get("content")) or "")
            elif kind == "speech":
                texts.append(text_of(part.get("transcript")) or "")
            elif kind.endswith("-call") and isinstance(part.get("tool_name"), str):
                calls.append(part["tool_name"])
            # thinking, file, compaction, built-in tool returns: no text, no call of ours
        return [make_turn("assistant", texts, calls, False)]
    turns: list[Turn] = []
    for number, part in enumerate(read):
        role, texts = _request_part(f"{where}: part {number}", part)
        if role is None:
            continue
        last = turns[-1] if turns else None
        tool_result = role == "tool"
        if last is not None and last.role == role:
            merged = [last.text, *texts]
            turns[-1] = make_turn(role, merged, (), tool_result)
        else:
            turns.append(make_turn(role, texts, (), tool_result))
    return turns


def _request_part(where: str, part: Mapping[str, Any]) -> tuple[str | None, list[str]]:
    """The role a request part plays and its texts (``None``: a part that carries nothing)."""
    kind = str(part.get("part_kind", ""))
    if kind == "user-prompt":
        return "user", _user_prompt(where, part.get("content"))
    if kind == "speech":
        return "user", [text_of(part.get("transcript")) or ""]
    if kind in _SYSTEM_PARTS:
        return "system", []
    if kind.endswith("-return") or kind.startswith("retry-"):
        return "tool", []  # tool returns and retry prompts: results, never a request
    return None, []  # settings, availability and capability deltas, compaction…


def _user_prompt(where: str, content: object) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not is_list(content):
        return []
    texts = []
    for number, item in enumerate(content):
        if isinstance(item, str):
            texts.append(item)
            continue
        block = as_mapping(item, f"{where}: content {number}")
        if block.get("kind") == "text-content" and isinstance(block.get("content"), str):
            texts.append(block["content"])
        # images, audio, documents, cache points: no request text
    return texts

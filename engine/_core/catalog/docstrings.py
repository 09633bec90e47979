"""A function's docstring read into a summary and parameter descriptions.

Google style (``Args:`` / ``Arguments:`` / ``Parameters:`` with ``name (type): text``),
NumPy style (``Parameters`` over a dashed line, ``name : type`` then indented text) and
Sphinx fields (``:param name: text``). Anything else is summary text.
"""

from __future__ import annotations

import inspect
import re

import attrs

_GOOGLE_ARGS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments"}
_GOOGLE_SECTIONS = _GOOGLE_ARGS | {
    "returns",
    "return",
    "yields",
    "raises",
    "examples",
    "example",
    "notes",
    "note",
    "attributes",
    "see also",
    "warnings",
    "warning",
    "references",
    "todo",
}
_GOOGLE_ITEM = re.compile(r"^\*{0,2}(\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")
_NUMPY_ITEM = re.compile(r"^\*{0,2}(\w+)\s*(?::\s*(.*))?$")
_SPHINX_PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")
_SPHINX_FIELD = re.compile(r"^:\w+")


@attrs.frozen
class Docstring:
    summary: str
    parameters: dict[str, str]


def read_docstring(text: str | None) -> Docstring:
    """The summary (everything before the first section) and each parameter's text."""
    if not text:
        return Docstring("", {})
    lines = inspect.cleandoc(text).splitlines()
    summary: list[str] = []
    parameters: dict[str, str] = {}
    index = 0
    in_summary = True
    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        heading = stripped.rstrip(":").lower()
        underlined = index + 1 < len(lines) and set(lines[index + 1].strip()) == {"-"}
        if underlined and not line.startswith(" "):  # NumPy: a heading over dashes
            in_summary = False
            end = _section_end(lines, index + 2, numpy=True)
            if heading in _GOOGLE_ARGS:
                parameters.update(_numpy_items(lines[index + 2 : end]))
            index = end
            continue
        if stripped.endswith(":") and heading in _GOOGLE_SECTIONS and not line.startswith(" "):
            in_summary = False
            end = _section_end(lines, index + 1, numpy=False)
            if heading in _GOOGLE_ARGS:
                parameters.update(_google_items(lines[index + 1 : end]))
            index = end
            continue
        field = _SPHINX_PARAM.match(stripped)
        if field:
            in_summary = False
            texts = [field.group(2)]
            index += 1
            while index < len(lines) and lines[index].startswith((" ", "\t")):
                texts.append(lines[index].strip())
                index += 1
            parameters[field.group(1)] = _joined(texts)
            continue
        if _SPHINX_FIELD.match(stripped):
            in_summary = False
        elif in_summary:
            summary.append(line)
        index += 1
    return Docstring("\n".join(summary).strip(), parameters)


def _section_end(lines: list[str], start: int, *, numpy: bool) -> int:
    """Where a section's body ends: at the next heading (a non-indented line for Google
    style, a line over dashes for NumPy style)."""
    index = start
    while index < len(lines):
        line = lines[index]
        if numpy:
            if index + 1 < len(lines) and set(lines[index + 1].strip()) == {"-"} and line.strip():
                return index
        elif line.strip() and not line.startswith((" ", "\t")):
            return index
        index += 1
    return index


def _google_items(body: list[str]) -> dict[str, str]:
    items: dict[str, list[str]] = {}
    indent: int | None = None
    current: str | None = None
    for line in body:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        indent = depth if indent is None else indent
        match = _GOOGLE_ITEM.match(line.strip())
        if depth <= indent and match:
            current = match.group(1)
            items[current] = [match.group(3)]
        elif current is not None:
            items[current].append(line.strip())
    return {name: _joined(texts) for name, texts in items.items()}


def _numpy_items(body: list[str]) -> dict[str, str]:
    items: dict[str, list[str]] = {}
    current: str | None = None
    for line in body:
        if not line.strip():
            continue
        if not line.startswith((" ", "\t")):
            match = _NUMPY_ITEM.match(line.strip())
            current = match.group(1) if match else None
            if current is not None:
                items[current] = []
        elif current is not None:
            items[current].append(line.strip())
    return {name: _joined(texts) for name, texts in items.items()}


def _joined(texts: list[str]) -> str:
    return " ".join(t for t in texts if t).strip()

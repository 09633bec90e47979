"""A plain Python function as a tool: its signature and docstring as a JSON Schema.

Types come from the annotations (``str``, ``int``, ``float``, ``bool``, ``None``, lists,
tuples, sets, dicts, ``Optional`` and unions, ``Literal``, enums, ``datetime``, dataclasses,
``TypedDict``s, pydantic models, ``Annotated[..., "description"]``); a parameter with a
default is optional and its default (when it is JSON) is shown; parameter descriptions come
from a Google-, NumPy- or Sphinx-style docstring. A parameter of a type with no JSON Schema
is left untyped (``{}``) rather than refused: the model still sees its name and description.
"""

from __future__ import annotations

import builtins
import collections.abc
import dataclasses
import datetime
import enum
import inspect
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import CatalogError
from .docstrings import read_docstring
from .tool import Tool

#: Types of a framework's context argument, which the model never fills (by name: the core
#: imports no framework).
CONTEXT_TYPES = frozenset({"RunContext", "RunContextWrapper", "ToolContext"})
#: How deep nested types are followed (a self-referencing dataclass stops here).
MAX_DEPTH = 6
#: A name the tool-calling APIs accept (OpenAI's and Anthropic's rule for function names).
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")

_SCALARS: dict[type, dict[str, Any]] = {
    bool: {"type": "boolean"},
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    bytes: {"type": "string"},
    type(None): {"type": "null"},
    datetime.datetime: {"type": "string", "format": "date-time"},
    datetime.date: {"type": "string", "format": "date"},
    datetime.time: {"type": "string", "format": "time"},
}
_ARRAYS = {
    list,
    set,
    frozenset,
    collections.abc.Sequence,
    collections.abc.MutableSequence,
    collections.abc.Set,
    collections.abc.MutableSet,
    collections.abc.Iterable,
    collections.abc.Collection,
}
_OBJECTS = {dict, collections.abc.Mapping, collections.abc.MutableMapping}


def is_plain_function(value: object) -> bool:
    return inspect.isfunction(value) or inspect.ismethod(value)


def function_tool(index: int, function: Callable[..., Any], server: str | None = None) -> Tool:
    """The tool a function describes: its name, docstring summary and parameters.

    Raises:
        CatalogError: its name is not one a tool-calling API accepts (a lambda's
            ``<lambda>``), or its signature cannot be read (a builtin without one).
    """
    name = getattr(function, "__name__", "")
    if not isinstance(name, str) or TOOL_NAME.fullmatch(name) is None:
        raise CatalogError(
            f"tool {index}: a function named {name!r} cannot be a tool: the model calls a tool"
            " by its name, and tool-calling APIs accept only names of 1 to 64 letters, digits,"
            " '_' and '-'; define it with def under the tool's name, or name it first"
            " (fn.__name__ = 'get_weather')"
        )
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError) as exc:
        raise CatalogError(f"tool {index} ({name!r}): cannot read its signature: {exc}") from None
    hints = _hints(function)
    docs = read_docstring(inspect.getdoc(function))
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        annotation = hints.get(parameter.name, parameter.annotation)
        if _is_context(annotation):
            continue
        schema = dict(schema_of(annotation))
        if parameter.name in docs.parameters and "description" not in schema:
            schema["description"] = docs.parameters[parameter.name]
        if parameter.default is parameter.empty:
            required.append(parameter.name)
        else:
            default = json_value(parameter.default)
            if default is not _NOT_JSON:
                schema["default"] = default
        properties[parameter.name] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return Tool(id=name, name=name, description=docs.summary, parameters=parameters, server=server)


def _hints(function: Callable[..., Any]) -> Mapping[str, Any]:
    try:
        return typing.get_type_hints(function, include_extras=True)
    except Exception:  # one annotation names something out of reach: resolve the others
        pass
    names = {**vars(builtins), **getattr(function, "__globals__", {})}
    hints: dict[str, Any] = {}
    for name, annotation in getattr(function, "__annotations__", {}).items():
        try:
            # What get_type_hints does for each string annotation, one at a time.
            hints[name] = eval(annotation, names) if isinstance(annotation, str) else annotation
        except Exception:  # left unresolved: read as untyped (or a context, by its name)
            hints[name] = annotation
    return hints


def _is_context(annotation: object) -> bool:
    if isinstance(annotation, str):  # unresolved: "RunContext[Deps]", "agents.RunContextWrapper"
        return annotation.split("[")[0].rsplit(".")[-1].strip() in CONTEXT_TYPES
    target = typing.get_origin(annotation) or annotation
    return getattr(target, "__name__", None) in CONTEXT_TYPES


def schema_of(annotation: object, depth: int = 0) -> dict[str, Any]:
    """The JSON Schema of a Python type annotation (``{}``: any value)."""
    if depth > MAX_DEPTH or annotation in (inspect.Parameter.empty, typing.Any, object):
        return {}
    if annotation is None:
        annotation = type(None)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        schema = dict(schema_of(args[0], depth + 1))
        for meta in args[1:]:
            text = meta if isinstance(meta, str) else getattr(meta, "description", None)
            if isinstance(text, str) and text:
                schema["description"] = text
        return schema
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [schema_of(arg, depth + 1) for arg in args]}
    if origin is typing.Literal:
        return _enum(list(args))
    if isinstance(annotation, type) and annotation in _SCALARS:
        return dict(_SCALARS[annotation])
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _enum([member.value for member in annotation])
    if origin is tuple or annotation is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_of(args[0], depth + 1)}
        if args:
            items = [schema_of(arg, depth + 1) for arg in args]
            return {"type": "array", "prefixItems": items, "minItems": len(items)}
        return {"type": "array"}
    if origin in _ARRAYS or annotation in _ARRAYS:
        return (
            {"type": "array", "items": schema_of(args[0], depth + 1)} if args else {"type": "array"}
        )
    if origin in _OBJECTS or annotation in _OBJECTS:
        if len(args) == 2:
            return {"type": "object", "additionalProperties": schema_of(args[1], depth + 1)}
        return {"type": "object"}
    return _class_schema(annotation, depth)


def _class_schema(annotation: object, depth: int) -> dict[str, Any]:
    """Dataclasses, ``TypedDict``s and pydantic models (by their ``model_json_schema``)."""
    if not isinstance(annotation, type):
        return {}
    model_schema = getattr(annotation, "model_json_schema", None)
    if callable(model_schema):
        try:
            schema = model_schema()
        except Exception:  # a model that cannot describe itself stays untyped
            return {}
        return dict(schema) if isinstance(schema, Mapping) else {}
    if typing.is_typeddict(annotation):
        hints = _type_hints(annotation)
        required = [k for k in hints if k in getattr(annotation, "__required_keys__", hints)]
        return _object({k: schema_of(v, depth + 1) for k, v in hints.items()}, required)
    if dataclasses.is_dataclass(annotation):
        hints = _type_hints(annotation)
        fields = dataclasses.fields(annotation)
        properties = {f.name: schema_of(hints.get(f.name, f.type), depth + 1) for f in fields}
        required = [
            f.name
            for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        return _object(properties, required)
    return {}


def _type_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls, include_extras=True)
    except Exception:  # unresolvable forward references: the raw annotations
        return dict(getattr(cls, "__annotations__", {}))


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _enum(values: list[Any]) -> dict[str, Any]:
    values = [j if (j := json_value(v)) is not _NOT_JSON else str(v) for v in values]
    kinds = {_JSON_TYPES.get(type(v)) for v in values}
    schema: dict[str, Any] = {"enum": values}
    if len(kinds) == 1 and None not in kinds:
        schema["type"] = kinds.pop()
    return schema


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}
_NOT_JSON: Any = object()


def json_value(value: object) -> Any:
    """``value`` as JSON (an enum as its value), or ``_NOT_JSON``."""
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _NOT_JSON
    if isinstance(value, list | tuple):
        items = [json_value(v) for v in value]
        return _NOT_JSON if any(i is _NOT_JSON for i in items) else items
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        pairs = {k: json_value(v) for k, v in value.items()}
        return _NOT_JSON if any(v is _NOT_JSON for v in pairs.values()) else pairs
    return _NOT_JSON

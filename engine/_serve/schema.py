"""The JSON Schemas of the service's bodies, and the one validator that reads requests by them.

The schemas are plain dicts (JSON Schema 2020-12, as OpenAPI 3.1 takes them); the same dict is
printed in ``/openapi.json`` and checks the request, so the document cannot drift from what the
service accepts. The validator covers only the keywords these schemas use (a schema with any
other keyword is refused when the route table is built, not when a request comes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: The keywords ``check`` understands; ``describe`` keywords are documentation only.
CHECKED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "anyOf",
    }
)
DESCRIBED = frozenset({"description", "examples", "title", "default", "format"})

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "null": (type(None),),
}

Schema = dict[str, Any]


class BodyError(Exception):
    """A request body that does not fit its schema; ``field`` is a dotted path (``a.0.b``)."""

    def __init__(self, message: str, field: str | None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def obj(
    properties: Mapping[str, Schema],
    *,
    required: Sequence[str] = (),
    description: str = "",
    closed: bool = True,
) -> Schema:
    """An object schema; a ``closed`` one (requests) refuses unknown keys, so a typo is a
    caller's mistake, named. Responses stay open: new fields may come."""
    schema: Schema = {"type": "object", "properties": dict(properties)}
    if closed:
        schema["additionalProperties"] = False
    if required:
        schema["required"] = list(required)
    if description:
        schema["description"] = description
    return schema


def array(items: Schema, description: str = "", **extra: Any) -> Schema:
    schema: Schema = {"type": "array", "items": items, **extra}
    if description:
        schema["description"] = description
    return schema


def typed(kind: str | list[str], description: str = "", **extra: Any) -> Schema:
    schema: Schema = {"type": kind, **extra}
    if description:
        schema["description"] = description
    return schema


def ids(description: str) -> Schema:
    """A list of tool ids."""
    return array({"type": "string", "minLength": 1}, description)


def known_keywords(schema: object, where: str = "#") -> None:
    """Refuse a schema that uses a keyword ``check`` would silently ignore.

    Raises:
        ValueError: naming the keyword and where it is.
    """
    if not isinstance(schema, dict):
        return
    unknown = set(schema) - CHECKED - DESCRIBED
    if unknown:
        raise ValueError(f"schema {where} uses unchecked keywords {sorted(unknown)}")
    for name, sub in schema.get("properties", {}).items():
        known_keywords(sub, f"{where}/properties/{name}")
    for key in ("items", "additionalProperties"):
        known_keywords(schema.get(key), f"{where}/{key}")
    for position, sub in enumerate(schema.get("anyOf", ())):
        known_keywords(sub, f"{where}/anyOf/{position}")


def check(value: object, schema: Schema, field: str | None = None) -> None:
    """Raise ``BodyError`` naming the first field of ``value`` that ``schema`` refuses."""
    where = field or "the body"
    if "anyOf" in schema:
        if not any(_fits(value, option, field) for option in schema["anyOf"]):
            raise BodyError(f"{where}: expected {describe(schema)}, got {got(value)}", field)
        return
    kind = schema.get("type")
    if kind is not None and not _is_type(value, kind):
        raise BodyError(f"{where}: expected {describe(schema)}, got {got(value)}", field)
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(repr(v) for v in schema["enum"])
        raise BodyError(f"{where}: expected one of {choices}, got {got(value)}", field)
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        raise BodyError(f"{where}: expected a non-empty string, got {value!r}", field)
    if isinstance(value, str) and len(value) > schema.get("maxLength", len(value)):
        raise BodyError(
            f"{where}: expected at most {schema['maxLength']} characters,"
            f" got a string of {len(value)}",
            field,
        )
    if _is_number(value):
        _check_range(value, schema, where, field)
    if isinstance(value, list):
        _check_array(value, schema, where, field)
    if isinstance(value, dict):
        _check_object(value, schema, field)


def _check_range(value: Any, schema: Schema, where: str, field: str | None) -> None:
    if "minimum" in schema and value < schema["minimum"]:
        raise BodyError(f"{where}: expected at least {schema['minimum']}, got {value!r}", field)
    if "maximum" in schema and value > schema["maximum"]:
        raise BodyError(f"{where}: expected at most {schema['maximum']}, got {value!r}", field)


def _check_array(value: list[Any], schema: Schema, where: str, field: str | None) -> None:
    if len(value) < schema.get("minItems", 0):
        raise BodyError(f"{where}: expected at least {schema['minItems']} items, got none", field)
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        raise BodyError(
            f"{where}: expected at most {schema['maxItems']} items, got {len(value)}", field
        )
    items = schema.get("items")
    if items is not None:
        for position, item in enumerate(value):
            check(item, items, _join(field, str(position)))


def _check_object(value: dict[str, Any], schema: Schema, field: str | None) -> None:
    properties: dict[str, Schema] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            raise BodyError(f"{_join(field, name)}: required, missing", _join(field, name))
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            check(item, properties[name], _join(field, name))
        elif extra is False:
            known = ", ".join(sorted(properties)) or "none"
            raise BodyError(
                f"{_join(field, name)}: unknown field (expected one of: {known})",
                _join(field, name),
            )
        elif isinstance(extra, dict):
            check(item, extra, _join(field, name))


def _fits(value: object, schema: Schema, field: str | None) -> bool:
    try:
        check(value, schema, field)
    except BodyError:
        return False
    return True


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_type(value: object, kind: str | list[str]) -> bool:
    if isinstance(kind, list):
        return any(_is_type(value, k) for k in kind)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return _is_number(value) and math.isfinite(float(value))  # type: ignore[arg-type]
    return isinstance(value, _JSON_TYPES[kind])


def describe(schema: Schema) -> str:
    """A schema in words, for error messages."""
    if "anyOf" in schema:
        return " or ".join(describe(option) for option in schema["anyOf"])
    kind = schema.get("type", "any JSON value")
    if isinstance(kind, list):
        return " or ".join(_a(k) for k in kind)
    if kind == "array" and "items" in schema:
        return f"an array of {describe(schema['items']).removeprefix('a ').removeprefix('an ')}s"
    return _a(kind)


def _a(kind: str) -> str:
    return {"integer": "an integer", "object": "an object", "array": "an array"}.get(
        kind, "null" if kind == "null" else f"a {kind}"
    )


def got(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dict):
        return "an object"
    return "an array" if isinstance(value, list) else type(value).__name__


def _join(field: str | None, name: str) -> str:
    return name if field is None else f"{field}.{name}"

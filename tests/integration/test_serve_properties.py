"""Properties of the service's edge: its request validator agrees with the JSON Schema it
documents, and no body whatever makes it fail (each answer is a 200 or a JSON error naming
what came, and a body is refused for size exactly when it is past the limit)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute import Catalog, open_engine
from toolroute._serve.app import ServeApp
from toolroute._serve.routes import routes_for
from toolroute._serve.schema import BodyError, check
from toolroute.testing import inline_cpu

ROUTES = routes_for(object())

# JSON Schema counts 1.0 as an integer; the service does not (the engine's counts are ints),
# so integral floats are left out of the agreement below rather than papered over.
_floats = st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer())
_scalars = st.none() | st.booleans() | st.integers(-5, 200) | _floats | st.text(max_size=8)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


def near(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values at and around what ``schema`` accepts: its enums, its bounds and one past them,
    empty strings where it wants non-empty ones, and now and then any JSON value."""
    if "anyOf" in schema:
        return st.one_of([near(option) for option in schema["anyOf"]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([near({**schema, "type": k}) for k in kind])
    if "enum" in schema:
        return st.one_of(*[st.sampled_from(schema["enum"])] * 4, st.text(max_size=3))
    low, high = schema.get("minimum", -3), schema.get("maximum", 120)
    if kind == "string":
        value: st.SearchStrategy[Any] = st.text(max_size=6) | st.just("")
    elif kind == "integer":
        value = st.integers(int(low) - 1, int(high) + 1) | st.sampled_from([low, high])
    elif kind == "number":
        value = st.floats(low - 1, high + 1).filter(lambda f: not f.is_integer())
        value |= st.sampled_from([low, high])
    elif kind == "boolean":
        value = st.booleans()
    elif kind == "null":
        value = st.none()
    elif kind == "array":
        value = st.lists(near(schema.get("items", {})), max_size=3)
    elif kind == "object":
        value = _objects(schema)
    else:
        return _json
    # Mostly the right kind, so a body gets past its other fields to the one being tried.
    return st.one_of(value, value, value, value, _json)


def _objects(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    properties = schema.get("properties", {})
    required = {name: near(properties.get(name, {})) for name in schema.get("required", ())}
    optional = {name: near(sub) for name, sub in properties.items() if name not in required}
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        return st.dictionaries(st.text(min_size=1, max_size=4), near(extra), max_size=2)
    return st.fixed_dictionaries(required, optional=optional) | st.dictionaries(
        st.text(max_size=5), _json, max_size=3
    )


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, Any]:
    """A route and a body for it: its example with one or two fields set to values near
    their schema (so each check is reached with the rest valid), a field dropped or added,
    or any JSON value at all."""
    path = draw(st.sampled_from(sorted(ROUTES)))
    route = ROUTES[path]
    if draw(st.integers(0, 9)) == 0:
        return path, draw(_json)
    body = dict(route.example)
    properties = route.request["properties"]
    for name in draw(st.lists(st.sampled_from(sorted(properties)), min_size=1, max_size=2)):
        body[name] = draw(near(properties[name]))
    if draw(st.booleans()) and body:
        body.pop(draw(st.sampled_from(sorted(body))))
    if draw(st.integers(0, 4)) == 0:
        body[draw(st.text(min_size=1, max_size=4))] = draw(_json)
    return path, body


@given(bodies())
def test_the_validator_accepts_exactly_what_the_documented_schema_accepts(
    case: tuple[str, Any],
) -> None:
    path, body = case
    schema = ROUTES[path].request
    documented = jsonschema.Draft202012Validator(schema).is_valid(body)
    refused: BodyError | None = None
    try:
        check(body, schema)
    except BodyError as error:
        refused = error
    assert (refused is None) == documented, (path, body, refused and refused.message)
    if refused is not None and refused.field is not None:
        # The field named is in the body, or the one it lacks.
        assert isinstance(body, dict)
        named = [*body, *schema.get("required", ())]  # a key may hold a dot itself
        field = refused.field
        assert any(field == k or field.startswith(f"{k}.") for k in named), (field, body)


_raw = st.binary(max_size=300) | _json.map(lambda v: json.dumps(v).encode())


@settings(max_examples=15)
@given(
    st.lists(st.tuples(st.sampled_from(sorted(ROUTES)), _raw), min_size=1, max_size=15),
    st.integers(1, 400),
)
def test_no_body_makes_the_service_fail_and_size_is_refused_exactly_past_the_limit(
    requests: list[tuple[str, bytes]], limit: int
) -> None:
    answers: list[tuple[str, bytes, int, Any]] = []

    async def run() -> None:
        async with open_engine(Catalog.demo(), embedder=None, run_cpu=inline_cpu()) as engine:
            app = ServeApp(engine, max_body_bytes=limit)
            for path, body in requests:
                sent: list[dict[str, Any]] = []
                scope = {
                    "type": "http",
                    "method": "POST",
                    "path": path,
                    "query_string": b"",
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }

                async def receive(body: bytes = body) -> dict[str, Any]:
                    return {"type": "http.request", "body": body, "more_body": False}

                async def send(message: dict[str, Any], sent: list[dict[str, Any]] = sent) -> None:
                    sent.append(message)

                await app(scope, receive, send)
                status = sent[0]["status"]
                answers.append((path, body, status, json.loads(sent[1]["body"])))

    trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))
    for path, body, status, answer in answers:
        assert (status == 413) == (len(body) > limit), (path, body, status)
        assert status in {200, 400, 413, 422}, (path, body, answer)
        if status != 200:
            error = answer["error"]
            assert set(error) == {"type", "message", "field"}
            assert error["message"]

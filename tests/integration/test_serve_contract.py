"""The service against its own OpenAPI document: every route's example is accepted and its
answer fits the documented schema, every documented error fits the error schema, and the
document itself is valid OpenAPI 3.1 JSON Schema (checked with ``jsonschema``, not with the
service's own validator)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from serving import served

from toolroute import Catalog, open_engine
from toolroute._serve.routes import routes_for


def _resolve(schema: Any, document: dict[str, Any]) -> Any:
    """``schema`` with ``#/components/...`` references replaced by what they name."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            target: Any = document
            for part in schema["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            return _resolve(target, document)
        return {key: _resolve(value, document) for key, value in schema.items()}
    if isinstance(schema, list):
        return [_resolve(item, document) for item in schema]
    return schema


def _validate(instance: object, schema: dict[str, Any], document: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(_resolve(schema, document)).validate(instance)


def _broken(example: dict[str, Any]) -> dict[str, Any]:
    """The example with a field the schema does not know: a 400 every route must give."""
    return {**example, "no_such_field": 1}


async def test_every_route_answers_its_example_as_its_document_says(tmp_path: Path) -> None:
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        document = (await client.get("/openapi.json")).json()
        operations = {
            (path, method): operation
            for path, item in document["paths"].items()
            for method, operation in item.items()
        }
        checked = []
        for (path, method), operation in operations.items():
            responses = operation["responses"]
            if method == "get":
                if path == "/v1/events":
                    continue  # a stream: read by test_serve.py's SSE tests
                reply = await client.get(path)
            else:
                content = operation["requestBody"]["content"]["application/json"]
                jsonschema.Draft202012Validator(content["schema"]).validate(content["example"])
                reply = await client.post(path, json=content["example"])
                wrong = await client.post(path, json=_broken(content["example"]))
                assert wrong.status_code == 400, path
                _validate(
                    wrong.json(),
                    responses["400"]["content"]["application/json"]["schema"],
                    document,
                )
                assert wrong.json()["error"]["field"] == "no_such_field"
            status = str(reply.status_code)
            assert status in responses, (path, reply.status_code, reply.text)
            assert status.startswith("2"), (path, reply.text)
            _validate(
                reply.json(), responses[status]["content"]["application/json"]["schema"], document
            )
            checked.append(path)
    assert set(checked) >= {
        "/v1/select",
        "/v1/prepare-step",
        "/v1/route",
        "/v1/decide",
        "/v1/search-tools",
        "/v1/update",
        "/health",
        "/ready",
        "/openapi.json",
    }


async def test_the_document_is_openapi_3_1_with_valid_schemas(tmp_path: Path) -> None:
    async with served(tmp_path) as service, httpx.AsyncClient(base_url=service.url) as client:
        document = (await client.get("/openapi.json")).json()
    assert document["openapi"] == "3.1.0"
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for path, item in document["paths"].items():
        for method, operation in item.items():
            assert operation["operationId"], (path, method)
            for response in operation["responses"].values():
                for media in response.get("content", {}).values():
                    jsonschema.Draft202012Validator.check_schema(
                        _resolve(media["schema"], document)
                    )
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                jsonschema.Draft202012Validator.check_schema(body["schema"])
    # The probes are open: a load balancer carries no token.
    assert document["paths"]["/health"]["get"]["security"] == []
    assert document["paths"]["/ready"]["get"]["security"] == []


def test_learn_is_listed_only_for_an_engine_that_can_learn() -> None:
    class Learner:
        async def learn(self, request: str, tool_ids: tuple[str, ...]) -> None:
            self.learned = (request, tool_ids)

    assert "/v1/learn" not in routes_for(object())
    assert "/v1/learn" in routes_for(Learner())


async def test_the_learn_route_forwards_to_engine_learn() -> None:
    class Learner:
        learned: tuple[str, tuple[str, ...]] | None = None

        async def learn(self, request: str, tool_ids: tuple[str, ...]) -> bool:
            self.learned = (request, tool_ids)
            return True

    engine = Learner()
    route = routes_for(engine)["/v1/learn"]
    answer = await route.handle(engine, dict(route.example))  # type: ignore[arg-type]
    assert answer == {"learned": 1}
    assert engine.learned == (route.example["request"], tuple(route.example["tool_ids"]))


async def test_the_learn_route_says_nothing_was_learned_when_the_engine_learned_nothing() -> None:
    # A keyword-only engine has no vectors to learn from: Engine.learn returns False, and the
    # answer must not tell the client its tools were learned.
    async with open_engine(Catalog.demo(), embedder=None) as engine:
        route = routes_for(engine)["/v1/learn"]
        body = {"request": "weather in Oslo", "tool_ids": ["get_forecast", "get_alerts"]}
        assert await engine.learn(body["request"], body["tool_ids"]) is False
        assert await route.handle(engine, body) == {"learned": 0}


@pytest.mark.parametrize("path", sorted(routes_for(object())))
def test_every_example_fits_its_request_schema_by_jsonschema_too(path: str) -> None:
    route = routes_for(object())[path]
    jsonschema.Draft202012Validator(route.request).validate(route.example)

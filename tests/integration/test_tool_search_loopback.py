"""The vendors' tool-search turn over real HTTP on 127.0.0.1: the model asks for a search, the
host answers with ``ToolSearch``, and the model's next turn calls a tool it found. The tools
the vendor loads are the ones ``Engine.select`` ranks."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from loopback.tool_search_vendor import SEARCH_TOOL, serve_tool_search

import toolroute.asyncio
from toolroute import Catalog, EngineConfig, Policy, open_engine
from toolroute.tool_search import ToolSearch

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tool_search"
CATALOG = Catalog.demo()
REQUESTS = [
    "What will the weather be in Lisbon this week?",
    "Open an issue in the repository about the login bug",
    "Find the email from my landlord about the deposit",
]


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def host_tools(vendor: str) -> list[dict[str, Any]]:
    """The demo catalogue as a host lists it for ``vendor`` (ids as names: the demo has two
    tools named ``search``)."""
    if vendor == "anthropic":
        return [
            {"name": t.id, "description": t.description, "input_schema": dict(t.parameters)}
            for t in CATALOG
        ]
    return [
        {
            "type": "function",
            "name": t.id,
            "description": t.description,
            "parameters": dict(t.parameters),
            "strict": None,
        }
        for t in CATALOG
    ]


async def ranked(engine: Any, query: str, k: int) -> list[str]:
    selection = await engine.select(
        query, policy=Policy(max_tools=k, threshold=None, adaptive=False)
    )
    return list(selection.tool_ids)


@pytest.mark.parametrize("request_text", REQUESTS)
async def test_anthropic_search_turn_loads_the_tools_select_ranks(request_text: str) -> None:
    recorded = fixture("anthropic_exchange")
    async with open_engine(CATALOG, config=EngineConfig(cache=False), embedder=None) as engine:
        search = ToolSearch(engine, "anthropic", host_tools("anthropic"), k=3)
        body = {**recorded["request"], "tools": search.tools()}
        body["messages"] = [{"role": "user", "content": request_text}]
        with serve_tool_search() as vendor:
            async with httpx.AsyncClient(timeout=5.0, verify=False) as client:
                first = (await client.post(vendor.url("/v1/messages"), json=body)).json()
                call = next(b for b in first["content"] if b["type"] == "tool_use")
                assert call["name"] == SEARCH_TOOL
                result = await search.answer(call)
                body["messages"] += [
                    {"role": "assistant", "content": first["content"]},
                    {"role": "user", "content": [result]},
                ]
                second = await client.post(vendor.url("/v1/messages"), json=body)
        expected = await ranked(engine, request_text, 3)
    assert second.status_code == 200, vendor.seen.errors
    assert vendor.seen.loaded == [expected]
    assert second.json()["content"][0] == {
        "type": "tool_use",
        "id": "toolu_call_1",
        "name": expected[0],
        "input": {},
    }
    assert vendor.seen.tool_blocks[0] == vendor.seen.tool_blocks[1]  # the cached prefix holds


@pytest.mark.parametrize("request_text", REQUESTS)
async def test_openai_search_turn_loads_the_tools_select_ranks(request_text: str) -> None:
    recorded = fixture("openai_exchange")
    async with open_engine(CATALOG, config=EngineConfig(cache=False), embedder=None) as engine:
        search = ToolSearch(engine, "openai", host_tools("openai"), k=3)
        body = {**recorded["request"], "tools": search.tools()}
        body["input"] = [{"role": "user", "content": request_text}]
        with serve_tool_search() as vendor:
            async with httpx.AsyncClient(timeout=5.0, verify=False) as client:
                first = (await client.post(vendor.url("/v1/responses"), json=body)).json()
                call = next(i for i in first["output"] if i["type"] == "tool_search_call")
                output = await search.answer(call)
                body["input"] += [call, output]  # appended: the tools block stays as it was
                second = await client.post(vendor.url("/v1/responses"), json=body)
        expected = await ranked(engine, request_text, 3)
    assert second.status_code == 200, vendor.seen.errors
    assert vendor.seen.loaded == [expected]
    assert second.json()["output"][0]["name"] == expected[0]
    assert vendor.seen.tool_blocks[0] == vendor.seen.tool_blocks[1]


async def test_the_vendor_refuses_a_reference_to_a_tool_it_was_not_sent() -> None:
    # The loopback vendor checks what the real API checks, so a wrong answer cannot pass.
    recorded = fixture("anthropic_exchange")
    body = dict(recorded["request"])
    with serve_tool_search() as vendor:
        async with httpx.AsyncClient(timeout=5.0, verify=False) as client:
            first = (await client.post(vendor.url("/v1/messages"), json=body)).json()
            wrong = {
                "type": "tool_result",
                "tool_use_id": first["content"][0]["id"],
                "content": [{"type": "tool_reference", "tool_name": "not_in_the_request"}],
            }
            body["messages"] = [
                *body["messages"],
                {"role": "assistant", "content": first["content"]},
                {"role": "user", "content": [wrong]},
            ]
            second = await client.post(vendor.url("/v1/messages"), json=body)
    assert second.status_code == 400
    assert "not a deferred tool" in second.json()["error"]["message"]


def test_an_asyncio_host_answers_with_the_same_backend() -> None:
    async def main() -> tuple[dict[str, Any], list[str]]:
        async with toolroute.asyncio.open_engine(
            CATALOG, config=EngineConfig(cache=False), embedder=None
        ) as engine:
            search = ToolSearch(engine, "openai", host_tools("openai"), k=3)
            call = {
                "type": "tool_search_call",
                "call_id": "c1",
                "execution": "client",
                "arguments": {"query": REQUESTS[0]},
            }
            return await search.answer(call), await ranked(engine, REQUESTS[0], 3)

    output, expected = asyncio.run(main())
    assert [tool["name"] for tool in output["tools"]] == expected
    assert output["call_id"] == "c1"


async def test_openai_namespace_members_load_inside_their_namespace() -> None:
    # The host groups the demo's tools by server: found members come back in their
    # namespace, one item per namespace, and the vendor loads exactly the ranked tools.
    servers: dict[str, list[dict[str, Any]]] = {}
    for tool in host_tools("openai"):
        servers.setdefault(str(CATALOG[tool["name"]].server), []).append(tool)
    tools = [
        {"type": "namespace", "name": name, "description": f"{name} tools", "tools": members}
        for name, members in servers.items()
    ]
    request_text = "Find the email from my landlord and search the web for the deposit rules"
    async with open_engine(CATALOG, config=EngineConfig(cache=False), embedder=None) as engine:
        search = ToolSearch(engine, "openai", tools, k=4)
        body = {
            "model": "gpt-5.4",
            "tools": search.tools(),
            "input": [{"role": "user", "content": request_text}],
        }
        with serve_tool_search() as vendor:
            async with httpx.AsyncClient(timeout=5.0, verify=False) as client:
                first = (await client.post(vendor.url("/v1/responses"), json=body)).json()
                call = first["output"][0]
                output = await search.answer(call)
                body["input"] += [call, output]
                second = await client.post(vendor.url("/v1/responses"), json=body)
        expected = await ranked(engine, request_text, 4)
    assert second.status_code == 200, vendor.seen.errors
    namespaces = [item["name"] for item in output["tools"]]
    assert len(namespaces) == len(set(namespaces))  # one item per namespace
    assert sorted(vendor.seen.loaded[0]) == sorted(expected)

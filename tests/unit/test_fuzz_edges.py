"""Fuzzing every edge a caller's data crosses: catalogue readers, conversation readers,
``EngineConfig.from_mapping``, ``dedupe_tools`` and the command line's file inputs.

Each edge is fed arbitrary JSON values (biased towards the keys its formats use, so the fuzzer
gets past the first check) and, for files, arbitrary bytes. It must return a result or raise its
documented error — never another exception, never a hang (each example has a generous
deadline). 1,000 examples per edge when ``CI`` is set, 100 otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import typing
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolroute import Catalog, CatalogError, ConfigError, Tool, dedupe_tools
from toolroute._cli.inputs import read_catalog, read_json, read_queries
from toolroute._cli.main import main
from toolroute._core.catalog.readers import FORMATS, MAX_NESTING
from toolroute._core.config import EngineConfig
from toolroute._core.select.conversation import extract_query, idle_steps, read_turns

EXAMPLES = 1_000 if os.environ.get("CI") else 100
fuzz = settings(
    max_examples=EXAMPLES,
    deadline=timedelta(seconds=5),  # a hang, not a slow machine
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,  # files are rewritten on every example
        HealthCheck.filter_too_much,
    ],
)

TOOL_KEYS = [
    "name", "description", "parameters", "tools", "function", "type", "input_schema",
    "inputSchema", "functionDeclarations", "function_declarations", "parametersJsonSchema",
    "servers", "result", "jsonrpc", "id", "server", "annotations", "title", "properties",
]  # fmt: skip
MESSAGE_KEYS = [
    "role", "content", "type", "parts", "text", "tool_calls", "function", "name", "arguments",
    "functionCall", "function_call", "functionResponse", "function_response", "thought",
    "custom", "call_id", "output",
]  # fmt: skip
MESSAGE_WORDS = [
    "user", "assistant", "model", "tool", "function", "system", "developer", "message",
    "text", "input_text", "output_text", "tool_use", "tool_result", "server_tool_use",
    "function_call", "function_call_output", "web_search_call", "reasoning", "custom",
]  # fmt: skip
QUERY_KEYS = ["query", "expected", "expected_groups"]


def json_values(keys: Sequence[str], words: Sequence[str] = ()) -> st.SearchStrategy[Any]:
    """Any JSON value; object keys and strings lean on a format's vocabulary."""
    strings = st.text(max_size=12) | st.sampled_from([*keys, *words, "get_weather", "object"])
    scalars = st.none() | st.booleans() | st.integers() | st.floats() | strings
    names = st.text(max_size=6) | (st.sampled_from(keys) if keys else st.nothing())
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(names, inner, max_size=5),
        max_leaves=30,
    )


def good_or_any(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a well-formed value, sometimes anything: gets the fuzzer past the first check."""
    return good | good | json_values([], ["object", "string", "function"])


SCHEMAS = st.fixed_dictionaries(
    {},
    optional={
        "type": good_or_any(st.just("object")),
        "properties": good_or_any(
            st.dictionaries(
                st.text(max_size=5), good_or_any(st.just({"type": "string"})), max_size=3
            )
        ),
        "jsonSchema": json_values(["properties", "type"]),
    },
)
TOOL = st.fixed_dictionaries(
    {},
    optional={
        "name": good_or_any(
            st.sampled_from(["get_weather", "send_email", "x"]) | st.text(max_size=8)
        ),
        "description": good_or_any(st.text(max_size=20)),
        "parameters": good_or_any(SCHEMAS),
        "input_schema": good_or_any(SCHEMAS),
        "inputSchema": good_or_any(SCHEMAS),
        "parametersJsonSchema": good_or_any(SCHEMAS),
        "type": good_or_any(st.just("function")),
        "id": good_or_any(st.text(max_size=6)),
        "server": good_or_any(st.sampled_from(["s1", "s2"])),
        "annotations": good_or_any(st.just({"readOnlyHint": True})),
        "title": good_or_any(st.text(max_size=6)),
    },
)
TOOLS = st.lists(TOOL | st.builds(lambda t: {"type": "function", "function": t}, TOOL), max_size=5)
near_documents = st.one_of(
    TOOLS,
    TOOLS.map(lambda t: {"tools": t}),
    TOOLS.map(lambda t: {"jsonrpc": "2.0", "id": 1, "result": {"tools": t}}),
    TOOLS.map(lambda t: [{"functionDeclarations": t}]),
    TOOLS.map(lambda t: {"function_declarations": t}),
    st.lists(
        st.fixed_dictionaries(
            {"name": good_or_any(st.sampled_from(["s1", "s2"])), "tools": good_or_any(TOOLS)}
        ),
        max_size=3,
    ).map(lambda s: {"servers": s}),
    st.dictionaries(st.text(max_size=6), TOOL, max_size=3),
)
tool_documents = json_values(TOOL_KEYS, ["function", "object", "string"]) | near_documents

TEXT = st.sampled_from(["send an email", "weather", "", " "]) | st.text(max_size=10)
NAMES = st.sampled_from(["get_weather", "send_email"])
BLOCK = st.one_of(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "input_text", "output_text"]), "text": good_or_any(TEXT)}
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["tool_use", "server_tool_use"]), "name": good_or_any(NAMES)}
    ),
    st.fixed_dictionaries({"type": st.just("tool_result"), "content": good_or_any(TEXT)}),
    TEXT,
)
PART = st.one_of(
    st.fixed_dictionaries({"text": good_or_any(TEXT)}, optional={"thought": st.booleans()}),
    st.fixed_dictionaries(
        {"functionCall": good_or_any(st.fixed_dictionaries({"name": good_or_any(NAMES)}))}
    ),
    st.fixed_dictionaries({"function_response": good_or_any(st.just({"name": "x"}))}),
)
CALL = st.fixed_dictionaries(
    {
        "type": st.just("function"),
        "function": good_or_any(st.fixed_dictionaries({"name": good_or_any(NAMES)})),
    }
)
MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "role": good_or_any(st.sampled_from(["user", "assistant", "model", "tool", "system"])),
        "content": good_or_any(TEXT | st.lists(good_or_any(BLOCK), max_size=3) | st.none()),
        "type": good_or_any(
            st.sampled_from(
                ["message", "function_call", "function_call_output", "reasoning", "web_search_call"]
            )
        ),
        "parts": good_or_any(st.lists(good_or_any(PART), max_size=3)),
        "tool_calls": good_or_any(st.lists(good_or_any(CALL), max_size=2)),
        "name": good_or_any(NAMES),
    },
)
conversations = json_values(MESSAGE_KEYS, MESSAGE_WORDS) | st.lists(MESSAGE, max_size=8) | TEXT


def _section(cls: type) -> st.SearchStrategy[Any]:
    """A mapping of some of an attrs class's fields (nested sections too) to any values."""
    fields = {f.name: f for f in attrs.fields(cls)}
    hints = typing.get_type_hints(cls)

    def value(name: str) -> st.SearchStrategy[Any]:
        hint = hints.get(name)
        if isinstance(hint, type) and attrs.has(hint):
            return st.deferred(lambda: _section(hint)) | json_values([])
        return json_values([]) | st.sampled_from([0, 1, -1, 0.5, 1e9, True, "signature", None])

    return st.dictionaries(
        st.sampled_from(sorted(fields)) | st.text(max_size=5),
        st.deferred(lambda: st.one_of(*(value(n) for n in fields))),
        max_size=4,
    )


# -- catalogue readers ------------------------------------------------------------------------


@fuzz
@given(tool_documents, st.sampled_from([None, *FORMATS]))
def test_catalogue_readers_return_a_catalogue_or_a_catalog_error(
    data: Any, format: str | None
) -> None:
    try:
        catalog = Catalog.from_data(data, format=format)
    except CatalogError:
        return
    assert all(isinstance(tool.name, str) and tool.name for tool in catalog)


@fuzz
@given(tool_documents)
def test_every_named_reader_returns_or_raises_a_catalog_error(data: Any) -> None:
    for read in (
        Catalog.from_openai,
        Catalog.from_anthropic,
        Catalog.from_gemini,
        Catalog.from_mcp,
        Catalog.from_plain,
        Catalog.from_mcp_servers,
    ):
        with contextlib.suppress(CatalogError):
            read(data)


@fuzz
@given(st.binary(max_size=200) | tool_documents.map(lambda d: json.dumps(d).encode()))
def test_catalogue_files_of_any_bytes(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "tools.json"
    path.write_bytes(content)
    with contextlib.suppress(CatalogError):
        Catalog.from_file(path)


@fuzz
@given(tool_documents, st.sampled_from(["signature", "content"]), st.floats(0, 1))
def test_dedupe_tools_reads_or_refuses_any_definitions(
    data: Any, mode: Any, threshold: float
) -> None:
    try:
        result = dedupe_tools(data, mode=mode, threshold=threshold)
    except CatalogError:
        return
    assert all(isinstance(tool, Tool) for tool in result.tools)


# -- conversation readers ---------------------------------------------------------------------


@fuzz
@given(
    conversations
    | st.lists(
        st.dictionaries(st.sampled_from(MESSAGE_KEYS), conversations, max_size=5), max_size=6
    )
)
def test_conversation_readers_return_or_raise_a_config_error(messages: Any) -> None:
    try:
        turns = read_turns(messages)
    except ConfigError:
        with pytest.raises(ConfigError):
            extract_query(messages)
        return
    assert isinstance(extract_query(messages), str)
    assert 0 <= idle_steps(messages) <= len(turns)


# -- configuration ----------------------------------------------------------------------------


@fuzz
@given(_section(EngineConfig))
def test_engine_config_from_any_mapping(data: dict[str, Any]) -> None:
    try:
        config = EngineConfig.from_mapping(data)
    except ConfigError:
        return
    assert isinstance(config, EngineConfig)


# -- the command line's files -----------------------------------------------------------------


def _documents(keys: list[str]) -> st.SearchStrategy[bytes]:
    return (
        st.binary(max_size=120)
        | json_values(keys).map(lambda d: json.dumps(d).encode())
        | st.lists(
            st.dictionaries(st.sampled_from(keys), json_values(keys), max_size=3), max_size=4
        ).map(lambda d: json.dumps(d).encode())
    )


@fuzz
@given(_documents(TOOL_KEYS), _documents(QUERY_KEYS))
def test_cli_readers_return_or_raise_a_documented_error(
    tmp_path: Path, tools: bytes, queries: bytes
) -> None:
    tools_path, queries_path = tmp_path / "tools.json", tmp_path / "queries.json"
    tools_path.write_bytes(tools)
    queries_path.write_bytes(queries)
    for read in (
        lambda: read_json(tools_path, "tool"),
        lambda: read_catalog(tools_path, None),
        lambda: read_queries(queries_path),
    ):
        with contextlib.suppress(ConfigError, CatalogError):
            read()


VALID_TOOLS = json.dumps(
    [{"name": "get_weather", "description": "weather"}, {"name": "send_email"}]
).encode()


@fuzz
@given(
    _documents(TOOL_KEYS) | st.just(VALID_TOOLS),
    _documents(QUERY_KEYS),
    st.sampled_from(["select", "eval"]),
)
def test_cli_main_exits_0_or_2_on_any_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tools: bytes, queries: bytes, command: str
) -> None:
    tools_path, queries_path = tmp_path / "tools.json", tmp_path / "queries.json"
    tools_path.write_bytes(tools)
    queries_path.write_bytes(queries)
    argv = ["--tools", str(tools_path), "--embedder", "none", "--json"]
    if command == "select":
        argv = ["select", *argv, "weather"]
    else:
        argv = ["eval", *argv, "--queries", str(queries_path)]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code in (0, 2)
    if code == 2:
        assert out == ""
        assert err.startswith("toolroute: error: ")
        assert len(err.splitlines()) == 1, err


# -- nesting no generator reaches: hundreds and thousands of levels ---------------------------


def nested_list(depth: int) -> list[Any]:
    outer: list[Any] = []
    inner = outer
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return outer


def nested_schema(depth: int) -> dict[str, Any]:
    outer: dict[str, Any] = {"type": "object"}
    inner = outer
    for _ in range(depth):
        inner["properties"] = {"a": {"type": "object"}}
        inner = inner["properties"]["a"]
    return outer


@pytest.mark.parametrize("depth", [400, 5_000])
def test_deeply_nested_definitions_are_catalog_errors(depth: int, tmp_path: Path) -> None:
    deep = [{"name": "x", "parameters": nested_schema(depth)}]
    with pytest.raises(CatalogError, match=r"tool 0 \('x'\): the schema is nested too deeply"):
        Catalog.from_data(deep)
    with pytest.raises(CatalogError, match=r"field 'inputSchema' nests .* more than 200 levels"):
        Catalog.from_mcp({"tools": [{"name": "x", "inputSchema": nested_schema(depth)}]})
    with pytest.raises(CatalogError, match=r"field 'annotations' nests"):
        Catalog.from_mcp({"tools": [{"name": "x", "annotations": nested_schema(depth)}]})
    with pytest.raises(CatalogError, match="nested too deeply"):
        dedupe_tools(deep)
    with pytest.raises(CatalogError, match=r"tool 0: field 'name' must be a non-empty string"):
        Catalog.from_data([{"name": nested_list(depth)}])
    path = tmp_path / "tools.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CatalogError, match="is not valid JSON: nested too deeply"):
        Catalog.from_file(path)
    with pytest.raises(ConfigError, match="is not valid JSON: nested too deeply"):
        read_catalog(path, None)


def test_a_schema_nests_up_to_the_same_bound_on_every_python() -> None:
    # The parameters object is level 1; its array and the arrays inside it follow.
    deepest_allowed = {"type": "object", "x": nested_list(MAX_NESTING - 2)}
    assert Catalog.from_data([{"name": "x", "parameters": deepest_allowed}]).tools[0].parameters
    one_more = {"type": "object", "x": nested_list(MAX_NESTING - 1)}
    with pytest.raises(CatalogError, match=r"tool 0 \('x'\): the schema is nested too deeply"):
        Catalog.from_data([{"name": "x", "parameters": one_more}])


@pytest.mark.parametrize("depth", [400, 5_000])
def test_deeply_nested_messages_are_config_errors(depth: int) -> None:
    with pytest.raises(
        ConfigError, match=r"message 0: content block 0: expected an object, got list of 1 items"
    ):
        read_turns([{"role": "user", "content": nested_list(depth)}])
    with pytest.raises(ConfigError, match=r"message 0: expected a message"):
        read_turns([{"role": nested_list(depth)}])


def test_deeply_nested_config_values_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        EngineConfig.from_mapping({"selection": {"max_tools": nested_list(5_000)}})

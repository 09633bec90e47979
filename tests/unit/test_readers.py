"""Readers from every vendor's tool format into a Catalog (engine/_readers.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute import Catalog, CatalogError, ConfigError, Server, Tool
from toolroute._core import files
from toolroute._core.catalog.catalog import readers
from toolroute._core.text import tool_text
from toolroute.evaluate import load_queries

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name"},
        "units": {"type": "string", "enum": ["c", "f"]},
    },
    "required": ["city"],
}
EMAIL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"to": {"type": "array", "items": {"type": "string"}}},
}


def openai_chat() -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": copy.deepcopy(WEATHER_SCHEMA),
            },
        },
        {
            "type": "function",
            "function": {
                "name": "send_email",
                "description": "Send an email",
                "parameters": copy.deepcopy(EMAIL_SCHEMA),
            },
        },
    ]


def openai_responses() -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": copy.deepcopy(WEATHER_SCHEMA),
        },
        {
            "type": "function",
            "name": "send_email",
            "description": "Send an email",
            "parameters": copy.deepcopy(EMAIL_SCHEMA),
        },
    ]


def anthropic_tools() -> list[dict[str, Any]]:
    return [
        {
            "name": "get_weather",
            "description": "Current weather for a city",
            "input_schema": copy.deepcopy(WEATHER_SCHEMA),
        },
        {
            "name": "send_email",
            "description": "Send an email",
            "input_schema": copy.deepcopy(EMAIL_SCHEMA),
        },
    ]


def gemini_declarations() -> list[dict[str, Any]]:
    return [
        {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": copy.deepcopy(WEATHER_SCHEMA),
        },
        {
            "name": "send_email",
            "description": "Send an email",
            "parameters": copy.deepcopy(EMAIL_SCHEMA),
        },
    ]


def mcp_result() -> dict[str, Any]:
    return {
        "tools": [
            {
                "name": "get_weather",
                "title": "Weather",
                "description": "Current weather for a city",
                "inputSchema": copy.deepcopy(WEATHER_SCHEMA),
                "annotations": {"readOnlyHint": True, "openWorldHint": True},
            },
            {
                "name": "send_email",
                "description": "Send an email",
                "inputSchema": copy.deepcopy(EMAIL_SCHEMA),
            },
        ]
    }


def jsonrpc_response() -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "result": mcp_result()}


def plain_list() -> list[dict[str, Any]]:
    return gemini_declarations()


def plain_mapping() -> dict[str, Any]:
    return {
        "get_weather": {
            "description": "Current weather for a city",
            "inputSchema": copy.deepcopy(WEATHER_SCHEMA),
        },
        "send_email": {"description": "Send an email", "inputSchema": copy.deepcopy(EMAIL_SCHEMA)},
    }


def servers_file() -> dict[str, Any]:
    return {
        "servers": [
            {
                "name": "mail",
                "description": "Email and calendar",
                "tools": [
                    {"name": "send", "description": "Send an email"},
                    {"name": "search", "description": "Search the mailbox"},
                ],
            },
            {
                "name": "files",
                "description": "The local file system",
                "tools": [
                    {"name": "search", "description": "Search files by name"},
                    {"name": "read", "description": "Read a file"},
                ],
            },
        ]
    }


def assert_weather_and_email(catalog: Catalog) -> None:
    assert catalog.ids == ("get_weather", "send_email")
    weather = catalog["get_weather"]
    assert weather.name == "get_weather"
    assert weather.description == "Current weather for a city"
    assert weather.parameters == WEATHER_SCHEMA
    assert catalog["send_email"].parameters == EMAIL_SCHEMA


# -- each vendor format ---------------------------------------------------------------------


def test_openai_chat_completions_form_reads_the_nested_function() -> None:
    assert_weather_and_email(Catalog.from_openai(openai_chat()))


def test_openai_responses_flat_form_reads_top_level_fields() -> None:
    assert_weather_and_email(Catalog.from_openai(openai_responses()))


@pytest.mark.parametrize("tools", [openai_chat(), openai_responses()], ids=["chat", "responses"])
def test_openai_tools_wrapper_is_unwrapped(tools: list[dict[str, Any]]) -> None:
    assert_weather_and_email(Catalog.from_openai({"tools": tools}))


def test_openai_tool_without_type_is_taken_as_a_function() -> None:
    catalog = Catalog.from_openai([{"function": {"name": "ping"}}])
    assert catalog.ids == ("ping",)


def test_openai_non_function_tool_is_rejected_naming_its_type() -> None:
    with pytest.raises(CatalogError, match=r"tool 0: .*'web_search'"):
        Catalog.from_openai([{"type": "web_search"}])


def test_anthropic_input_schema_becomes_parameters() -> None:
    assert_weather_and_email(Catalog.from_anthropic(anthropic_tools()))
    assert_weather_and_email(Catalog.from_anthropic({"tools": anthropic_tools()}))


def test_anthropic_tool_without_input_schema_has_empty_parameters() -> None:
    catalog = Catalog.from_anthropic([{"name": "bash", "type": "bash_20250124"}])
    assert catalog["bash"].parameters == {}


@pytest.mark.parametrize("key", ["function_declarations", "functionDeclarations"])
def test_gemini_tool_object_lists_its_declarations(key: str) -> None:
    assert_weather_and_email(Catalog.from_gemini({key: gemini_declarations()}))


def test_gemini_list_of_tool_objects_is_flattened_in_order() -> None:
    first, second = gemini_declarations()
    data = [{"function_declarations": [first]}, {"functionDeclarations": [second]}]
    assert_weather_and_email(Catalog.from_gemini(data))


def test_gemini_request_tools_are_unwrapped_as_they_are_detected() -> None:
    # A generateContent request (or its config) holds its Tool objects under "tools".
    first, second = gemini_declarations()
    request = {"contents": [], "tools": [{"functionDeclarations": [first, second]}]}
    assert_weather_and_email(Catalog.from_gemini(request))
    assert_weather_and_email(Catalog.from_data(request))
    hosted = {"tools": [{"functionDeclarations": [first]}, {"googleSearch": {}}]}
    with pytest.raises(CatalogError, match=r"tool 1: .*got 'googleSearch'"):
        Catalog.from_data(hosted)


def test_gemini_bare_declarations_are_read() -> None:
    assert_weather_and_email(Catalog.from_gemini(gemini_declarations()))


def test_gemini_parameters_json_schema_is_read() -> None:
    data = {"function_declarations": [{"name": "f", "parametersJsonSchema": WEATHER_SCHEMA}]}
    assert Catalog.from_gemini(data)["f"].parameters == WEATHER_SCHEMA


def test_gemini_declarations_not_a_list_is_rejected_naming_the_field() -> None:
    with pytest.raises(CatalogError, match="function_declarations"):
        Catalog.from_gemini({"function_declarations": {"name": "f"}})


def test_mcp_result_reads_input_schema_title_and_annotations() -> None:
    catalog = Catalog.from_mcp(mcp_result())
    assert_weather_and_email(catalog)
    weather = catalog["get_weather"]
    assert weather.title == "Weather"
    assert weather.annotations == {"readOnlyHint": True, "openWorldHint": True}
    assert weather.server is None
    assert catalog["send_email"].title is None
    assert catalog["send_email"].annotations == {}


def test_an_mcp_title_given_only_in_annotations_is_the_title() -> None:
    tools = [
        {"name": "q", "annotations": {"title": "Run SQL query", "readOnlyHint": True}},
        {"name": "w", "title": "Write file", "annotations": {"title": "Old title"}},
        {"name": "x", "annotations": {"title": 5}},
    ]
    catalog = Catalog.from_mcp({"tools": tools})
    assert [t.title for t in catalog] == ["Run SQL query", "Write file", None]
    assert catalog["q"].annotations == {"title": "Run SQL query", "readOnlyHint": True}
    assert "Run SQL query" in tool_text(catalog["q"])


def test_mcp_jsonrpc_response_is_unwrapped() -> None:
    assert_weather_and_email(Catalog.from_mcp(jsonrpc_response()))


def test_mcp_server_argument_sets_tool_server_and_servers() -> None:
    catalog = Catalog.from_mcp(mcp_result(), server="wx")
    assert {t.server for t in catalog} == {"wx"}
    assert catalog.servers == (Server("wx", "", ("get_weather", "send_email")),)


def test_mcp_result_without_tools_names_the_missing_field() -> None:
    with pytest.raises(CatalogError, match="'tools' is missing"):
        Catalog.from_mcp({"nextCursor": "x"})


def test_mcp_servers_qualify_only_clashing_names() -> None:
    servers = {
        "mail": {"tools": [{"name": "send"}, {"name": "search"}]},
        "files": jsonrpc_response() | {"result": {"tools": [{"name": "search"}, {"name": "read"}]}},
    }
    catalog = Catalog.from_mcp_servers(servers)
    assert catalog.ids == ("send", "mail__search", "files__search", "read")
    assert [t.name for t in catalog] == ["send", "search", "search", "read"]
    assert catalog["mail__search"].server == "mail"
    assert catalog["files__search"].server == "files"
    assert [s.id for s in catalog.servers] == ["mail", "files"]
    assert catalog.servers[0].tool_ids == ("send", "mail__search")


def test_a_tool_without_a_server_keeps_its_name_beside_a_server_tool_of_that_name() -> None:
    # An OpenAI Responses request may hold a top-level function and a namespace's function
    # of one name: two tools the model tells apart, so both are read.
    tools = [
        {"type": "function", "name": "search", "description": "Search my notes"},
        {"type": "namespace", "name": "web", "tools": [{"type": "function", "name": "search"}]},
    ]
    assert Catalog.from_openai(tools).ids == ("search", "web__search")
    plain = [{"name": "search"}, {"name": "search", "server": "web"}]
    assert Catalog.from_plain(plain).ids == ("search", "web__search")
    with pytest.raises(CatalogError, match="duplicate tool id 'search'"):
        Catalog.from_plain([{"name": "search"}, {"name": "search"}])


def test_mcp_servers_without_clash_keep_plain_names() -> None:
    catalog = Catalog.from_mcp_servers({"a": {"tools": [{"name": "x"}]}, "b": [{"name": "y"}]})
    assert catalog.ids == ("x", "y")


@pytest.mark.parametrize("server", [5, "", ["github"]])
def test_a_server_argument_that_is_not_a_name_is_a_catalog_error(server: Any) -> None:
    with pytest.raises(CatalogError, match=r"server must be a non-empty string or None, got"):
        Catalog.from_mcp({"tools": [{"name": "a"}]}, server=server)
    with pytest.raises(CatalogError, match=r"server must be a non-empty string or None, got"):
        Catalog.from_tools([{"name": "a"}], server=server)


def test_mcp_servers_refuse_an_empty_server_name() -> None:
    with pytest.raises(CatalogError, match=r"server names must be non-empty, got ''"):
        Catalog.from_mcp_servers({"": {"tools": [{"name": "a"}]}})


def test_mcp_servers_rejects_a_non_mapping() -> None:
    with pytest.raises(CatalogError, match="mapping of server name"):
        Catalog.from_mcp_servers([{"tools": []}])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ({"tools": [{"name": "b"}, {"name": 5}]}, r"server 'slack': tool 1: field 'name'"),
        (None, r"server 'slack': expected a list of tools, got nothing"),
        ({"result": {}}, r"server 'slack': expected an MCP tools/list result"),
    ],
)
def test_mcp_servers_name_the_server_of_a_bad_listing(result: object, message: str) -> None:
    servers = {"github": {"tools": [{"name": "a"}, {"name": "b"}]}, "slack": result}
    with pytest.raises(CatalogError, match=message):
        Catalog.from_mcp_servers(servers)


def test_a_duplicate_id_names_the_servers_of_both_tools() -> None:
    servers = {"github": {"tools": [{"name": "a"}]}, "slack": {"tools": [{"name": "b"}] * 2}}
    message = r"duplicate tool id 'b': tool 1 \(server 'slack'\) and tool 2 \(server 'slack'\)"
    with pytest.raises(CatalogError, match=message):
        Catalog.from_mcp_servers(servers)
    with pytest.raises(CatalogError, match=message):
        Catalog.from_data({"servers": [{"name": n, **r} for n, r in servers.items()]})


def test_servers_file_form_keeps_server_descriptions_and_qualifies_clashes() -> None:
    catalog = Catalog.from_data(servers_file())
    assert catalog.ids == ("send", "mail__search", "files__search", "read")
    assert catalog.servers == (
        Server("mail", "Email and calendar", ("send", "mail__search")),
        Server("files", "The local file system", ("files__search", "read")),
    )


def test_servers_file_form_names_the_bad_server_and_tool() -> None:
    data = servers_file()
    data["servers"][1]["tools"][1]["description"] = 42
    with pytest.raises(CatalogError, match=r"server 1 \('files'\): tool 1 \('read'\).*description"):
        Catalog.from_data(data)


def test_servers_file_form_rejects_a_server_without_name() -> None:
    with pytest.raises(CatalogError, match=r"server 0: field 'name'"):
        Catalog.from_data({"servers": [{"tools": []}]})


def test_plain_list_is_read() -> None:
    assert_weather_and_email(Catalog.from_plain(plain_list()))


def test_plain_mapping_of_name_to_spec_is_read() -> None:
    assert_weather_and_email(Catalog.from_plain(plain_mapping()))


def test_plain_tool_keeps_its_explicit_id_and_server() -> None:
    catalog = Catalog.from_plain([{"id": "w1", "name": "weather", "server": "wx"}])
    assert catalog["w1"] == Tool(id="w1", name="weather", server="wx")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"mcpServers": {"time": {"command": "uvx"}}}, r"an MCP client config.*toolroute mcp"),
        ({"servers": {"time": {"type": "stdio", "command": "uvx"}}}, r"an MCP client config"),
        ({"openapi": "3.1.0", "info": {}, "paths": {}}, r"an OpenAPI document"),
        ({"name": "get_weather", "description": "Weather"}, r"a single tool definition.*list"),
        ({"type": "function", "function": {"name": "a"}}, r"a single tool definition"),
    ],
)
def test_a_document_that_is_not_a_catalogue_is_named_not_read_as_tools(
    tmp_path: Path, data: object, message: str
) -> None:
    with pytest.raises(CatalogError, match=message):
        Catalog.from_data(data)
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(data))
    with pytest.raises(CatalogError, match=message):
        Catalog.from_file(path)


def test_tools_named_like_those_documents_keys_are_still_read() -> None:
    spec = {"description": "List the servers"}
    data = {"servers": spec, "function": spec, "openapi": spec, "type": spec, "name": spec}
    assert Catalog.from_data(data).ids == ("servers", "function", "openapi", "type", "name")


def test_plain_mapping_entry_not_an_object_is_rejected_naming_the_tool() -> None:
    with pytest.raises(CatalogError, match="tool 'broken'"):
        Catalog.from_plain({"broken": "a string"})


# -- auto-detection from files ----------------------------------------------------------------


FILE_FORMATS: dict[str, Any] = {
    "openai-chat": openai_chat(),
    "openai-chat-wrapped": {"tools": openai_chat()},
    "openai-responses": openai_responses(),
    "anthropic": anthropic_tools(),
    "anthropic-wrapped": {"tools": anthropic_tools()},
    "gemini-tool": {"function_declarations": gemini_declarations()},
    "gemini-camel": {"functionDeclarations": gemini_declarations()},
    "gemini-tool-list": [{"function_declarations": gemini_declarations()}],
    "mcp": mcp_result(),
    "mcp-jsonrpc": jsonrpc_response(),
    "plain-list": plain_list(),
    "plain-mapping": plain_mapping(),
}


@pytest.mark.parametrize("data", FILE_FORMATS.values(), ids=FILE_FORMATS.keys())
def test_from_file_detects_the_format(tmp_path: Path, data: object) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert_weather_and_email(Catalog.from_file(path))
    assert_weather_and_email(Catalog.from_file(str(path)))


def test_from_file_detects_the_servers_form(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(servers_file()), encoding="utf-8")
    catalog = Catalog.from_file(path)
    assert catalog.servers[0].description == "Email and calendar"
    assert catalog.ids == ("send", "mail__search", "files__search", "read")


def test_mcp_annotations_survive_detection_from_file(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(jsonrpc_response()), encoding="utf-8")
    assert Catalog.from_file(path)["get_weather"].annotations["readOnlyHint"] is True


EXPLICIT: list[tuple[str, Any]] = [
    ("openai", openai_chat()),
    ("openai", {"tools": openai_responses()}),
    ("anthropic", anthropic_tools()),
    ("gemini", gemini_declarations()),
    ("gemini", {"functionDeclarations": gemini_declarations()}),
    ("mcp", mcp_result()),
    ("mcp", jsonrpc_response()),
    ("plain", plain_list()),
    ("plain", plain_mapping()),
    ("plain", {"tools": plain_list()}),
]


@pytest.mark.parametrize(("fmt", "data"), EXPLICIT)
def test_explicit_format_is_honoured(tmp_path: Path, fmt: str, data: object) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert_weather_and_email(Catalog.from_file(path, format=fmt))
    assert_weather_and_email(Catalog.from_data(data, format=fmt))


def test_explicit_servers_format_reads_the_servers_form() -> None:
    catalog = Catalog.from_data(servers_file(), format="mcp-servers")
    assert len(catalog.servers) == 2


def test_explicit_format_overrides_detection() -> None:
    # Detected as "plain" (items have only a name), but read as Anthropic on request:
    # a "parameters" key is then not a schema key and is ignored.
    data = [{"name": "f", "parameters": {"type": "object"}}]
    assert Catalog.from_data(data, format="anthropic")["f"].parameters == {}
    assert Catalog.from_data(data)["f"].parameters == {"type": "object"}


# -- errors -------------------------------------------------------------------------------------


def test_missing_name_names_the_index_and_field() -> None:
    tools = [{"name": "ok"}, {"description": "no name"}]
    with pytest.raises(CatalogError, match=r"tool 1: field 'name' must be a non-empty string"):
        Catalog.from_plain(tools)


@pytest.mark.parametrize("name", ["", "   "])
def test_empty_name_names_the_index_and_field(name: str) -> None:
    with pytest.raises(CatalogError, match=r"tool 0: field 'name'"):
        Catalog.from_anthropic([{"name": name}])


def test_non_string_name_is_rejected() -> None:
    with pytest.raises(CatalogError, match=r"tool 0: field 'name'.*int 3"):
        Catalog.from_plain([{"name": 3}])


def test_non_string_description_names_the_tool_and_field() -> None:
    tools = [{"name": "a"}, {"name": "b", "description": ["x"]}]
    with pytest.raises(CatalogError, match=r"tool 1 \('b'\): field 'description' must be a string"):
        Catalog.from_plain(tools)


@pytest.mark.parametrize(
    ("reader", "tools", "field"),
    [
        (
            Catalog.from_openai,
            [{"type": "function", "function": {"name": "t", "parameters": []}}],
            "parameters",
        ),
        (Catalog.from_openai, [{"type": "function", "name": "t", "parameters": "x"}], "parameters"),
        (Catalog.from_anthropic, [{"name": "t", "input_schema": 5}], "input_schema"),
        (Catalog.from_gemini, [{"name": "t", "parameters": [1]}], "parameters"),
        (Catalog.from_mcp, {"tools": [{"name": "t", "inputSchema": "s"}]}, "inputSchema"),
        (Catalog.from_plain, [{"name": "t", "parameters": True}], "parameters"),
    ],
)
def test_parameters_not_an_object_names_the_tool_and_field(
    reader: Any, tools: object, field: str
) -> None:
    with pytest.raises(
        CatalogError, match=rf"tool 0 \('t'\): field '{field}' must be a JSON Schema"
    ):
        reader(tools)


def test_null_parameters_mean_no_parameters() -> None:
    assert Catalog.from_mcp({"tools": [{"name": "t", "inputSchema": None}]})["t"].parameters == {}


def test_annotations_not_an_object_names_the_tool_and_field() -> None:
    result = {"tools": [{"name": "t", "annotations": ["readOnlyHint"]}]}
    with pytest.raises(
        CatalogError, match=r"tool 0 \('t'\): field 'annotations' must be an object"
    ):
        Catalog.from_mcp(result)


def test_title_not_a_string_names_the_tool_and_field() -> None:
    with pytest.raises(CatalogError, match=r"tool 0 \('t'\): field 'title'"):
        Catalog.from_mcp({"tools": [{"name": "t", "title": 1}]})


def test_tool_not_an_object_names_its_index() -> None:
    with pytest.raises(CatalogError, match=r"tool 1: expected an object, got str"):
        Catalog.from_plain([{"name": "a"}, "b"])


def test_duplicate_ids_name_both_indexes() -> None:
    tools = [{"name": "a"}, {"name": "b"}, {"name": "a"}]
    with pytest.raises(CatalogError, match=r"duplicate tool id 'a': tool 0 and tool 2"):
        Catalog.from_plain(tools)


def test_duplicate_tool_objects_are_rejected_by_the_catalog() -> None:
    with pytest.raises(CatalogError, match=r"tool 0 and tool 1"):
        Catalog([Tool("x", "x"), Tool("x", "y")])


def test_not_json_reports_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('[\n  {"name": "a"},\n  {"name": }\n]', encoding="utf-8")
    with pytest.raises(CatalogError, match=r"not valid JSON.*line 3, column 12") as info:
        Catalog.from_file(path)
    assert "broken.json" in str(info.value)


def test_not_utf8_is_a_catalog_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(b'[{"name": "caf\xe9"}]')
    with pytest.raises(CatalogError, match="not UTF-8"):
        Catalog.from_file(path)


def test_a_byte_order_mark_and_crlf_line_ends_are_read(tmp_path: Path) -> None:
    # Windows editors (Notepad, PowerShell 5's Out-File -Encoding utf8) start UTF-8 files
    # with a byte order mark; RFC 8259 lets a reader ignore it, and every reader of the
    # catalogue's JSON does.
    path = tmp_path / "tools.json"
    text = '[\r\n  {"name": "get_weather", "description": "Wetter f\u00fcr eine Stadt"}\r\n]\r\n'
    path.write_bytes(text.encode("utf-8-sig"))
    assert Catalog.from_file(path)["get_weather"].description == "Wetter f\u00fcr eine Stadt"
    queries = tmp_path / "queries.json"
    queries.write_bytes('[{"query": "Wetter", "expected": "get_weather"}]'.encode("utf-8-sig"))
    assert load_queries(queries)[0].text == "Wetter"


def test_a_yaml_file_is_said_to_be_one(tmp_path: Path) -> None:
    path = tmp_path / "tools.yaml"
    path.write_text("- name: get_weather\n  description: Weather\n", encoding="utf-8")
    with pytest.raises(CatalogError, match=r"not valid JSON: .*; YAML is not read: convert"):
        Catalog.from_file(path)


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "absent.json"
    with pytest.raises(CatalogError, match=r"cannot read tool file .*absent\.json"):
        Catalog.from_file(path)


@pytest.mark.parametrize(
    ("path", "came"),
    [(None, "NoneType None"), (3, "int 3"), (b"tools.json", "bytes b'tools.json'")],
)
def test_a_path_that_is_not_one_is_a_catalog_error(path: object, came: str) -> None:
    """Not a raw ``TypeError`` from ``os.fspath``, nor file descriptor 3 opened as a file."""
    says = r"tool file path must be a str or an os\.PathLike \(a pathlib\.Path, say\), got "
    with pytest.raises(CatalogError, match=f"^{says}{came}$"):
        Catalog.from_file(path)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^queries file path must be a str"):
        load_queries(path)  # type: ignore[arg-type]


def test_a_path_with_a_nul_is_a_catalog_error() -> None:
    with pytest.raises(CatalogError, match="cannot read tool file 'a\\\\x00b': embedded null"):
        Catalog.from_file("a\x00b")


def test_unknown_format_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=r"unknown tool format 'yaml'.*openai.*plain"):
        Catalog.from_data([], format="yaml")
    path = tmp_path / "tools.json"
    path.write_text("[]", encoding="utf-8")
    with pytest.raises(CatalogError, match=r"tools\.json: unknown tool format 'xml'"):
        Catalog.from_file(path, format="xml")


def test_malformed_tool_in_a_file_names_the_file_and_tool(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([{"name": "a", "description": 1}]), encoding="utf-8")
    with pytest.raises(CatalogError, match=r"tools\.json: tool 0 \('a'\): field 'description'"):
        Catalog.from_file(path)


@pytest.mark.parametrize("data", [42, "tools", None, 1.5])
def test_document_neither_list_nor_object_is_rejected(data: object) -> None:
    with pytest.raises(CatalogError, match="expected a JSON list or object"):
        Catalog.from_data(data)


def test_object_without_tools_for_openai_is_rejected() -> None:
    with pytest.raises(CatalogError, match=r"expected a list of openai tools"):
        Catalog.from_openai({"name": "x"})


def test_catalog_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="field 'name'"):
        Catalog.from_plain([{}])


# -- accepted edge cases --------------------------------------------------------------------


def test_huge_description_is_kept_whole() -> None:
    description = "word " * 200_000 + "end"  # ~1 MB
    catalog = Catalog.from_plain([{"name": "big", "description": description}])
    assert catalog["big"].description == description


def test_non_ascii_and_emoji_are_kept() -> None:
    tools = [
        {"name": "météo", "description": "Prévisions à Zürich ☀️"},
        {"name": "検索", "description": "ファイルを検索する"},
        {"name": "party_🎉", "description": "🎉🎊"},
    ]
    catalog = Catalog.from_plain(tools)
    assert catalog.ids == ("météo", "検索", "party_🎉")
    assert catalog["party_🎉"].description == "🎉🎊"
    assert catalog["météo"].description == "Prévisions à Zürich ☀️"


def test_non_ascii_survives_a_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text(
        json.dumps([{"name": "検索", "description": "café 🎉"}], ensure_ascii=False),
        encoding="utf-8",
    )
    assert Catalog.from_file(path)["検索"].description == "café 🎉"


def test_empty_and_missing_descriptions_become_empty_strings() -> None:
    catalog = Catalog.from_plain(
        [{"name": "a", "description": ""}, {"name": "b"}, {"name": "c", "description": None}]
    )
    assert [t.description for t in catalog] == ["", "", ""]


def test_bfcl_dotted_names_are_kept_verbatim() -> None:
    tools = [
        {"name": "math.factorial", "description": "n!", "parameters": {"type": "dict"}},
        {"name": "spotify.play", "description": "Play a song"},
    ]
    catalog = Catalog.from_data(tools)
    assert catalog.ids == ("math.factorial", "spotify.play")
    assert catalog["math.factorial"].parameters == {"type": "dict"}


def test_empty_tool_list_gives_an_empty_catalog() -> None:
    assert len(Catalog.from_data([])) == 0
    assert len(Catalog.from_data({"tools": []})) == 0


# -- nothing mutated ----------------------------------------------------------------------------


MUTATION_CASES: list[tuple[str, Any]] = [
    ("openai", openai_chat),
    ("openai", openai_responses),
    ("anthropic", anthropic_tools),
    ("gemini", lambda: {"function_declarations": gemini_declarations()}),
    ("mcp", jsonrpc_response),
    ("mcp-servers", servers_file),
    ("plain", plain_list),
    ("plain", plain_mapping),
]


@pytest.mark.parametrize(("fmt", "make"), MUTATION_CASES)
def test_reading_leaves_the_input_untouched(fmt: str, make: Any) -> None:
    data = make()
    before = copy.deepcopy(data)
    Catalog.from_data(data, format=fmt)
    Catalog.from_data(data)
    assert data == before


def test_mutating_the_input_afterwards_does_not_change_the_tool() -> None:
    data = mcp_result()
    catalog = Catalog.from_mcp(data)
    weather = data["tools"][0]
    weather["description"] = "changed"
    weather["inputSchema"]["properties"]["city"]["description"] = "changed"
    weather["inputSchema"]["required"].append("units")
    weather["annotations"]["readOnlyHint"] = False
    tool = catalog["get_weather"]
    assert tool.description == "Current weather for a city"
    assert tool.parameters == WEATHER_SCHEMA
    assert tool.annotations == {"readOnlyHint": True, "openWorldHint": True}


@pytest.mark.parametrize(("fmt", "make"), MUTATION_CASES[:3] + MUTATION_CASES[6:])
def test_tool_schemas_are_copies_not_the_callers_objects(fmt: str, make: Any) -> None:
    data = make()
    catalog = Catalog.from_data(data, format=fmt)
    before = copy.deepcopy(catalog.tools)
    for schema in _all_dicts(data):
        schema.clear()
    assert catalog.tools == before


def _all_dicts(value: object) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        for item in value.values():
            found.extend(_all_dicts(item))
        found.append(value)
    elif isinstance(value, list):
        for item in value:
            found.extend(_all_dicts(item))
    return found


# -- property -----------------------------------------------------------------------------------


names = st.text(min_size=1, max_size=20).filter(lambda s: bool(s.strip()))
plain_tools = st.lists(
    st.tuples(names, st.text(max_size=40)), max_size=12, unique_by=lambda pair: pair[0]
)


@settings(max_examples=60, deadline=None)
@given(plain_tools)
def test_plain_tools_round_trip_names_and_descriptions_in_order(
    pairs: list[tuple[str, str]],
) -> None:
    data = [{"name": name, "description": description} for name, description in pairs]
    for catalog in (Catalog.from_plain(data), Catalog.from_data(data)):
        assert [(t.name, t.description) for t in catalog] == pairs
        assert catalog.ids == tuple(name for name, _ in pairs)


# -- the one core module that reads files --------------------------------------------------------


def test_tool_and_queries_files_are_read_alike(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"a": }', encoding="utf-8")
    with pytest.raises(CatalogError) as tools:
        Catalog.from_file(path)
    with pytest.raises(ConfigError) as queries:
        load_queries(path)
    assert str(tools.value) == str(queries.value).replace("queries file", "tool file")
    assert "not valid JSON: Expecting value at line 1, column 7" in str(queries.value)


def test_a_duplicate_in_a_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "twice.json"
    path.write_text('[{"name": "a"}, {"name": "a"}]', encoding="utf-8")
    with pytest.raises(CatalogError, match=r"twice\.json: duplicate tool id 'a'"):
        Catalog.from_file(path)


def test_read_regular_file_refuses_what_it_must_not_read(tmp_path: Path) -> None:
    small = tmp_path / "small.bin"
    small.write_bytes(b"12345")
    assert files.read_regular_file(str(small), 5) == b"12345"
    with pytest.raises(files.FileTooLarge) as too_big:
        files.read_regular_file(str(small), 4)
    assert too_big.value.size == 5
    with pytest.raises(files.NotAFile):
        files.read_regular_file(str(tmp_path), 100)
    with pytest.raises(FileNotFoundError):
        files.read_regular_file(str(tmp_path / "absent"), 100)
    with pytest.raises(ValueError, match=r"null (byte|character)"):  # as Python words it
        files.read_regular_file("bad\0name", 100)


def test_readers_return_tools_and_the_catalog_is_built_once() -> None:
    read = readers.read_data({"servers": [{"name": "s", "description": "d", "tools": []}]})
    assert read == readers.ReadTools([], {"s": "d"})
    assert isinstance(Catalog.from_data([{"name": "a"}]), Catalog)


def test_openai_custom_tools_are_read_without_parameters() -> None:
    grammar = {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}
    chat = {"type": "custom", "custom": {"name": "apply_patch", "description": "Apply a diff"}}
    responses = {"type": "custom", "name": "run_sql", "description": "Run SQL", "format": grammar}
    for read in (Catalog.from_openai, Catalog.from_data, Catalog.from_tools):
        catalog = read([chat, responses])
        assert [(t.id, t.description, t.parameters) for t in catalog] == [
            ("apply_patch", "Apply a diff", {}),
            ("run_sql", "Run SQL", {}),
        ]


def test_openai_namespace_members_have_the_namespace_as_their_server() -> None:
    data = [
        {"type": "function", "name": "get_weather", "description": "Weather now"},
        {
            "type": "namespace",
            "name": "crm",
            "description": "Customer records",
            "tools": [{"type": "function", "name": "search", "description": "Find a contact"}],
        },
        {
            "type": "namespace",
            "name": "docs",
            "tools": [{"type": "function", "name": "search", "description": "Find a page"}],
        },
    ]
    for read in (Catalog.from_openai, Catalog.from_data):
        catalog = read(data)
        assert [(t.id, t.name, t.server) for t in catalog] == [
            ("get_weather", "get_weather", None),
            ("crm__search", "search", "crm"),
            ("docs__search", "search", "docs"),
        ]
        assert [(s.id, s.description) for s in catalog.servers] == [
            ("crm", "Customer records"),
            ("docs", ""),
        ]


@pytest.mark.parametrize(
    ("read", "tools", "says"),
    [
        (
            Catalog.from_openai,
            [{"type": "function", "name": "f"}, {"type": "web_search"}],
            r"tool 1: expected an OpenAI function or custom tool, got type 'web_search': a tool"
            " OpenAI runs itself",
        ),
        (
            Catalog.from_gemini,
            [{"functionDeclarations": [{"name": "f"}]}, {"googleSearch": {}}],
            r"tool 1: expected a tool definition with a name, got 'googleSearch': a tool the vendor"
            " runs itself",
        ),
        (
            Catalog.from_tools,
            [{"type": "web_search_preview"}],
            r"tool 0: expected a tool definition with a name, got type 'web_search_preview'",
        ),
        (
            Catalog.from_tools,
            [{"codeExecution": {}}],
            r"tool 0: expected a tool definition with a name, got 'codeExecution'",
        ),
        (  # only hosted tools: the format is not detected, so the plain reader reads them
            Catalog.from_data,
            [{"type": "web_search"}],
            r"tool 0: expected a tool definition with a name, got type 'web_search'",
        ),
        (
            Catalog.from_data,
            [{"googleSearch": {}}],
            r"tool 0: expected a tool definition with a name, got 'googleSearch'",
        ),
        (  # Gemini: several hosted tools in one object
            Catalog.from_gemini,
            [{"googleSearch": {}, "codeExecution": {}}],
            r"tool 0: expected a tool definition with a name, got 'googleSearch', 'codeExecution'",
        ),
        (
            Catalog.from_data,
            [{"googleSearch": {}, "codeExecution": {}}],
            r"tool 0: expected a tool definition with a name, got 'googleSearch', 'codeExecution'",
        ),
    ],
)
def test_a_tool_the_vendor_runs_itself_is_refused_naming_it(
    read: Any, tools: list[dict[str, Any]], says: str
) -> None:
    with pytest.raises(CatalogError, match=says) as refused:
        read(tools)
    assert str(refused.value).endswith("leave it out of the catalogue and send it on every step")


@pytest.mark.parametrize("read", [Catalog.from_tools, Catalog.from_gemini, Catalog.from_data])
@pytest.mark.parametrize("tool", [{}, {"title": "Weather"}, {"id": "weather", "tags": ["x"]}])
def test_every_reader_tells_a_hosted_tool_from_a_nameless_definition_alike(
    read: Any, tool: dict[str, Any]
) -> None:
    # Neither a string ``type`` nor only keys holding objects: a definition without its
    # name, whichever reader reads it (not a tool the vendor runs itself).
    with pytest.raises(CatalogError, match="tool 0: field 'name' must be a non-empty string"):
        read([tool])


def test_a_definition_without_a_name_is_still_said_to_lack_one() -> None:
    with pytest.raises(CatalogError, match="tool 0: field 'name' must be a non-empty string"):
        Catalog.from_tools([{"description": "no name", "parameters": {"type": "object"}}])

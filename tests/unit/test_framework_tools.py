"""Catalogues from the tool objects frameworks hold and from plain Python functions: read by
shape, or refused naming the index and the type."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Annotated, Any, Literal, Optional, TypedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute import Catalog, CatalogError, Tool, ToolIndex
from toolroute._core.catalog.functions import schema_of


class Unit(enum.Enum):
    CELSIUS = "c"
    FAHRENHEIT = "f"


@dataclasses.dataclass
class Place:
    city: str
    country: str = "NO"


class Window(TypedDict):
    start: str
    days: int


def forecast(
    city: str,
    days: int = 3,
    unit: Unit = Unit.CELSIUS,
    hourly: bool = False,
    tags: list[str] | None = None,
    extra: dict[str, float] | None = None,
    mode: Literal["brief", "full"] = "brief",
    near: Optional[Place] = None,  # noqa: UP045 — the spelling users write, read alike
    window: Window | None = None,
    note: Annotated[str, "free text for the forecaster"] = "",
    *rest: int,
    **options: Any,
) -> str:
    """Weather forecast for a city.

    More words about it.

    Args:
        city: the city name.
        days (int): how many days,
            counted from today.
        unit: degrees.

    Returns:
        The forecast.
    """
    return ""


def météo(city: str) -> str:
    """Weather in French."""
    return city


@pytest.mark.parametrize(
    ("function", "name"),
    [(lambda city: city, "'<lambda>'"), (météo, "'météo'")],
)
def test_a_function_whose_name_is_not_a_tool_name_is_refused(function: Any, name: str) -> None:
    """Not a tool with the id ``<lambda>`` that every tool-calling API refuses."""
    with pytest.raises(
        CatalogError,
        match=rf"^tool 1: a function named {name} cannot be a tool: .* 1 to 64 letters, digits,"
        r" '_' and '-'; define it with def under the tool's name, or name it first"
        r" \(fn\.__name__ = 'get_weather'\)$",
    ):
        Catalog.from_tools([forecast, function])
    function.__name__ = "named_now"
    assert Catalog.from_tools([function]).tools[0].id == "named_now"


def test_a_function_becomes_a_tool_with_a_json_schema() -> None:
    (tool,) = Catalog.from_tools([forecast]).tools
    assert tool.name == tool.id == "forecast"
    assert tool.description == "Weather forecast for a city.\n\nMore words about it."
    schema = tool.parameters
    assert schema["required"] == ["city"]
    props = schema["properties"]
    assert set(props) == {
        "city",
        "days",
        "unit",
        "hourly",
        "tags",
        "extra",
        "mode",
        "near",
        "window",
        "note",
    }
    assert props["city"] == {"type": "string", "description": "the city name."}
    assert props["days"] == {
        "type": "integer",
        "description": "how many days, counted from today.",
        "default": 3,
    }
    assert props["unit"] == {
        "enum": ["c", "f"],
        "type": "string",
        "description": "degrees.",
        "default": "c",
    }
    assert props["hourly"] == {"type": "boolean", "default": False}
    assert props["tags"] == {
        "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
        "default": None,
    }
    assert props["extra"]["anyOf"][0] == {
        "type": "object",
        "additionalProperties": {"type": "number"},
    }
    assert props["mode"] == {"enum": ["brief", "full"], "type": "string", "default": "brief"}
    assert props["near"]["anyOf"][0] == {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city"],
    }
    assert props["window"]["anyOf"][0]["required"] == ["start", "days"]
    assert props["note"]["description"] == "free text for the forecaster"
    json.dumps(schema)  # plain JSON, as every reader gives


def test_numpy_and_sphinx_docstrings_describe_parameters() -> None:
    def send(to: str, subject: str) -> None:
        """Send an email.

        Parameters
        ----------
        to : str
            The recipient's
            address.
        subject : str
            The subject line.

        Returns
        -------
        None
        """

    def read(path: str) -> str:
        """Read a file.

        :param path: where the file is.
        :returns: its text.
        """
        return ""

    send_tool, read_tool = Catalog.from_tools([send, read]).tools
    assert send_tool.description == "Send an email."
    assert send_tool.parameters["properties"]["to"]["description"] == "The recipient's address."
    assert send_tool.parameters["properties"]["subject"]["description"] == "The subject line."
    assert read_tool.description == "Read a file."
    assert read_tool.parameters["properties"]["path"]["description"] == "where the file is."


def test_a_framework_context_argument_and_methods_self_are_left_out() -> None:
    class RunContext:
        pass

    class Mailer:
        def send(self, ctx: RunContext, to: str) -> None:
            """Send."""

    (tool,) = Catalog.from_tools([Mailer().send]).tools
    # RunContext is local, so its annotation cannot be resolved; the others still are.
    assert tool.parameters["properties"] == {"to": {"type": "string"}}


def test_unannotated_and_unknown_types_are_left_untyped() -> None:
    class Opaque:
        pass

    def act(a, b: Opaque, c: NotDefinedAnywhere = 1) -> None:  # type: ignore[no-untyped-def,name-defined]  # noqa: F821
        """Act."""

    (tool,) = Catalog.from_tools([act]).tools
    assert tool.parameters["properties"] == {"a": {}, "b": {}, "c": {"default": 1}}
    assert tool.parameters["required"] == ["a", "b"]


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (
            [object()],
            r"tool 0: cannot read a value of type 'object' as a tool; expected a Tool, a tool definition dict",
        ),
        ([Tool("a", "a"), 5], r"tool 1: cannot read a value of type 'int' as a tool"),
        ([Tool], r"tool 0: cannot read a value of type 'type' as a tool"),
        ("get_weather", r"expected a list of tools .* got str"),
        ({"name": "x"}, r"expected a list of tools .* got dict"),
    ],
)
def test_an_object_of_no_known_shape_is_named_by_index_and_type(bad: Any, says: str) -> None:
    with pytest.raises(CatalogError, match=says):
        Catalog.from_tools(bad)


def test_dicts_of_every_format_and_tools_mix() -> None:
    catalog = Catalog.from_tools(
        [
            Tool("kept", "kept", description="as it is"),
            {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
            {"type": "function", "name": "b", "parameters": {"type": "object"}},
            {"name": "c", "input_schema": {"type": "object"}},
            {"name": "d", "inputSchema": {"type": "object"}},
            {"name": "e", "parameters": {"type": "object"}, "description": "plain"},
        ],
        server="mine",
    )
    assert catalog.ids == ("kept", "a", "b", "c", "d", "e")
    assert {t.server for t in catalog.tools[1:]} == {"mine"}
    assert all(t.parameters == {"type": "object"} for t in catalog.tools[1:])


def test_an_openai_namespace_is_read_as_its_members_on_the_namespace() -> None:
    def member(name: str) -> dict[str, Any]:
        return {"type": "function", "name": name, "parameters": {"type": "object"}}

    listed = [
        {"type": "namespace", "name": "crm", "description": "CRM", "tools": [member("search")]},
        {"type": "namespace", "name": "docs", "description": "Docs", "tools": [member("search")]},
        member("get_weather"),
    ]
    catalog = Catalog.from_tools(listed)
    assert catalog.ids == ("crm__search", "docs__search", "get_weather")
    assert [(t.server, t.name) for t in catalog.tools] == [
        ("crm", "search"),
        ("docs", "search"),
        (None, "get_weather"),
    ]
    assert Catalog.from_tools(listed[:1], server="mine").tools[0].server == "mine"
    with pytest.raises(CatalogError, match=r"tool 0: expected a namespace .*tools of type str"):
        Catalog.from_tools([{"type": "namespace", "name": "crm", "tools": "search"}])


def test_a_malformed_dict_names_the_tool_and_field() -> None:
    with pytest.raises(CatalogError, match=r"tool 1 \('b'\): field 'description' must be"):
        Catalog.from_tools([{"name": "a"}, {"name": "b", "description": 5}])


def test_openai_agents_function_tools() -> None:
    agents = pytest.importorskip("agents")

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Weather for a city.

        Args:
            city: the city name.
        """
        return ""

    (tool,) = Catalog.from_tools([get_weather]).tools
    assert (tool.name, tool.description) == ("get_weather", "Weather for a city.")
    assert tool.parameters["properties"]["city"]["description"] == "the city name."
    assert tool.parameters == get_weather.params_json_schema
    assert tool.parameters is not get_weather.params_json_schema  # copied, never shared


def test_pydantic_ai_tool_definitions_and_tools() -> None:
    tools = pytest.importorskip("pydantic_ai.tools")

    def get_weather(city: str) -> str:
        """Weather for a city."""
        return ""

    definition = tools.ToolDefinition(
        name="send_email",
        description="Send an email",
        parameters_json_schema={"type": "object", "properties": {"to": {"type": "string"}}},
    )
    catalog = Catalog.from_tools([definition, tools.Tool(get_weather)])
    assert catalog.ids == ("send_email", "get_weather")
    assert catalog["send_email"].parameters["properties"] == {"to": {"type": "string"}}
    assert catalog["get_weather"].description == "Weather for a city."
    assert catalog["get_weather"].parameters["required"] == ["city"]


def test_langchain_tools() -> None:
    lc_tools = pytest.importorskip("langchain_core.tools")
    from pydantic import BaseModel, Field

    @lc_tools.tool
    def send_email(to: str, body: str = "") -> str:
        """Send an email."""
        return ""

    class ReadArgs(BaseModel):
        path: str = Field(description="where the file is")

    read_file = lc_tools.StructuredTool.from_function(
        func=lambda path: "", name="read_file", description="Read a file", args_schema=ReadArgs
    )
    catalog = Catalog.from_tools([send_email, read_file])
    assert catalog.ids == ("send_email", "read_file")
    assert catalog["send_email"].description == "Send an email."
    assert catalog["send_email"].parameters["required"] == ["to"]
    assert "title" not in catalog["send_email"].parameters
    path = catalog["read_file"].parameters["properties"]["path"]
    assert path["description"] == "where the file is"


def test_mcp_sdk_tools_and_list_tools_results() -> None:
    types = pytest.importorskip("mcp.types")
    read = types.Tool(
        name="read_file",
        description="Read a file",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
        annotations=types.ToolAnnotations(read_only_hint=True),
    )
    write = types.Tool(name="write_file", description="Write a file", input_schema={})
    result = types.ListToolsResult(tools=[read, write])
    for catalog in (
        Catalog.from_mcp(result, server="fs"),
        Catalog.from_mcp([read, write], server="fs"),
        Catalog.from_tools([read, write], server="fs"),
    ):
        assert catalog.ids == ("read_file", "write_file")
        assert catalog["read_file"].annotations == {"readOnlyHint": True}
        assert catalog["read_file"].parameters["properties"] == {"path": {"type": "string"}}
        assert catalog["read_file"].server == "fs"
    both = Catalog.from_mcp_servers({"fs": result, "backup": types.ListToolsResult(tools=[read])})
    assert both.ids == ("fs__read_file", "write_file", "backup__read_file")


def test_a_catalogue_from_functions_selects_like_one_from_dicts() -> None:
    def get_weather(city: str) -> str:
        """Weather forecast for a city."""
        return ""

    def send_email(to: str) -> None:
        """Send an email message."""

    functions = Catalog.from_tools([get_weather, send_email])
    dicts = Catalog.from_plain(
        [
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in functions
        ]
    )
    for query in ("weather in Oslo", "email my boss"):
        assert (
            ToolIndex(functions, embedder=None, cache=None).select(query).tool_ids
            == ToolIndex(dicts, embedder=None, cache=None).select(query).tool_ids
        )


_LEAVES = st.sampled_from([str, int, float, bool, type(None), Unit, Place, Window, Any, bytes])


def _types(leaf: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(lambda t: list[t], leaf),  # type: ignore[valid-type]
        st.builds(lambda t: dict[str, t], leaf),  # type: ignore[valid-type]
        st.builds(lambda t: tuple[t, ...], leaf),  # type: ignore[valid-type]
        st.builds(lambda a, b: a | b, leaf, leaf).filter(lambda t: t is not None),
        st.builds(lambda t: Optional[t], leaf),  # noqa: UP045
        st.builds(lambda t: Annotated[t, "described"], leaf),
    )


_NESTED = _types(st.one_of(_LEAVES, _types(_LEAVES)))  # two levels of nesting


@given(st.one_of(_LEAVES, _NESTED))
def test_any_annotation_gives_a_json_schema(annotation: Any) -> None:
    schema = schema_of(annotation)
    assert isinstance(schema, dict)
    json.dumps(schema)

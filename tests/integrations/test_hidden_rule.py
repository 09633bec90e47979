"""The rule every adapter shares for a call to a hidden tool, and the narrowing it reads:
properties over random catalogues and selections (no framework needed)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from framework_fixtures import asyncio_engine
from hypothesis import given
from hypothesis import strategies as st

from toolroute import Catalog, ConfigError, Tool
from toolroute.integrations._hidden import Activations, checked_mode, refusal
from toolroute.integrations._narrow import StepRouter, narrowing

names = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)


@st.composite
def catalogues(draw: st.DrawFn) -> tuple[Catalog, list[str]]:
    tool_names = draw(st.lists(names, min_size=1, max_size=8, unique=True))
    servers = draw(
        st.lists(
            st.sampled_from([None, "s1", "s2"]), min_size=len(tool_names), max_size=len(tool_names)
        )
    )
    tools = [
        Tool(id=n, name=n, description=f"does {n}", server=s)
        for n, s in zip(tool_names, servers, strict=True)
    ]
    return Catalog(tools), tool_names


@given(catalogues(), st.data())
def test_a_narrowing_shows_the_selection_what_it_keeps_and_every_tool_it_cannot_judge(
    drawn: tuple[Catalog, list[str]], data: st.DataObject
) -> None:
    catalog, tool_names = drawn
    selected = data.draw(st.none() | st.lists(st.sampled_from(tool_names), unique=True))
    keep = data.draw(st.lists(names, max_size=3))
    offered = data.draw(st.lists(names, max_size=10))  # the framework's tools: some unknown
    narrowed = narrowing(catalog, selected, keep)
    shown = narrowed.filter(offered)
    assert shown == [n for n in offered if n in shown]  # the framework's order, kept
    for name in offered:
        if selected is None or name in keep or name in selected or name not in tool_names:
            assert narrowed.shows(name)  # fail-open: never fewer than the engine chose
        else:
            assert not narrowed.shows(name)


@given(catalogues(), st.data())
def test_an_mcp_tool_is_matched_on_its_own_server(
    drawn: tuple[Catalog, list[str]], data: st.DataObject
) -> None:
    catalog, tool_names = drawn
    selected = data.draw(st.lists(st.sampled_from(tool_names), unique=True))
    narrowed = narrowing(catalog, selected)
    for tool in catalog.tools:
        if tool.server is not None:
            assert narrowed.shows(tool.name, tool.server) == (tool.name in selected)
    assert narrowed.shows("not-in-the-catalogue", "s1")


@given(st.lists(st.tuples(st.sampled_from("abcdefghij"), names), max_size=60), st.integers(1, 5))
def test_activations_are_bounded_and_keep_the_sessions_used_last(
    calls: list[tuple[str, str]], bound: int
) -> None:
    activations = Activations(max_sessions=bound)
    for session, tool in calls:
        activations.activate(session, tool)
        assert tool in activations.of(session)
        assert len(activations) <= bound
    assert activations.of(None) == frozenset()
    activations.activate(None, "x")  # nothing to remember without a session
    assert len(activations) <= bound


def test_the_mode_is_refuse_or_activate_and_nothing_else() -> None:
    assert checked_mode("refuse") == "refuse"
    assert checked_mode("activate") == "activate"
    for wrong in ("Refuse", "", None, 1, True):
        with pytest.raises(
            ConfigError, match="on_hidden_call must be one of 'refuse', 'activate', got"
        ):
            checked_mode(wrong)


def test_a_refusal_says_what_to_do_next() -> None:
    with_search = refusal("run_sql", search_tool="search_tools", shown=["get_weather"])
    assert with_search.startswith(
        "The tool 'run_sql' is not available on this step, so it was not run."
    )
    assert "Call 'search_tools' with a few words describing what you need" in with_search
    listed = refusal("run_sql", search_tool=None, shown=[f"t{i}" for i in range(12)])
    assert "Use one of the tools you were shown ('t0', 't1'" in listed
    assert listed.endswith(", …) or answer without one.")
    assert refusal("run_sql", search_tool=None, shown=["run_sql"]).endswith(
        "Answer without calling a tool."
    )


def test_a_conversation_the_engine_cannot_read_shows_every_tool_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        async with asyncio_engine() as engine:
            router = StepRouter(engine, "test", "refuse", None)
            narrowed = await router.narrow([{"role": "bot", "content": "hi"}], None)
            assert narrowed.selected is None
            assert narrowed.shows("get_weather")
            assert narrowed.shows("send_email")
            assert "unknown role 'bot'" in narrowed.reason
            readable = await router.narrow("what is the weather forecast in Oslo", None)
            assert readable.filter(["get_weather", "send_email"]) == ["get_weather"]

    with caplog.at_level(logging.WARNING, logger="toolroute.integrations"):
        asyncio.run(main())
    assert "toolroute shows every tool on this step: message 0: unknown role 'bot'" in caplog.text


def test_a_closed_engine_is_the_callers_mistake() -> None:
    async def main() -> StepRouter:
        async with asyncio_engine() as engine:
            return StepRouter(engine, "test", "refuse", None)

    router = asyncio.run(main())
    with pytest.raises(RuntimeError, match="after the engine closed"):
        asyncio.run(router.narrow("weather", None))

"""Prompt-cache mode: stable order, sticky picks and each vendor's restriction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute import Catalog, ConfigError, Tool
from toolroute._core.select.prompt_cache import _grouping
from toolroute.prompt_cache import (
    StickyPicks,
    permitted_call,
    restriction,
    same_topic,
    stable_order,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tool_search"
ORDER = tuple(f"tool_{i:02d}" for i in range(30))
NAMES = ["get_forecast", "get_hourly_forecast"]


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def test_the_restrictions_are_the_recorded_shapes() -> None:
    openai = fixture("openai_restriction")
    assert restriction("openai-responses", NAMES) == openai["responses"]
    assert restriction("openai", NAMES) == openai["chat"]
    gemini = fixture("gemini_restriction")
    assert restriction("gemini", NAMES) == gemini["auto"]
    assert restriction("gemini", NAMES, mode="required") == gemini["required"]
    assert restriction("anthropic", NAMES) is fixture("anthropic_restriction")["restriction"]
    assert restriction("openai-responses", NAMES, mode="required")["mode"] == "required"  # type: ignore[index]


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda: restriction("mistral", NAMES), "unknown vendor 'mistral'"),
        (lambda: restriction("openai", NAMES, mode="any"), "mode must be 'auto' or 'required'"),
        (lambda: restriction("openai", "get_forecast"), "names must be a list of tool names"),  # type: ignore[arg-type]
        (lambda: StickyPicks(keep_overlap=0), r"keep_overlap must be a number in \(0, 1\]"),
        (lambda: StickyPicks(max_set=0), "max_set must be an integer of at least 1"),
    ],
)
def test_caller_mistakes_are_clear_errors(call: Any, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        call()


def test_a_host_enforces_the_set_where_the_vendor_has_no_restriction() -> None:
    assert permitted_call(NAMES, {"type": "tool_use", "name": "get_forecast", "input": {}})
    assert permitted_call(NAMES, {"type": "function", "function": {"name": "get_forecast"}})
    assert not permitted_call(NAMES, {"type": "tool_use", "name": "send_email"})
    assert not permitted_call(NAMES, {"type": "tool_use"})


def test_sticky_picks_change_only_when_the_topic_does() -> None:
    picks = StickyPicks().advance(["tool_05", "tool_03", "tool_04"], ORDER)
    assert picks.tool_ids == ("tool_03", "tool_04", "tool_05")
    assert picks.changes == 0
    # Two of three picks on the topic: the set (and the restriction) holds.
    same = picks.advance(["tool_09", "tool_05", "tool_04"], ORDER)
    assert same is picks
    # The best pick and most picks are new: the topic changed.
    moved = same.advance(["tool_20", "tool_21", "tool_03"], ORDER)
    assert moved.tool_ids == ("tool_03", "tool_20", "tool_21")
    assert moved.changes == 1
    # A step that could not judge keeps the set.
    assert moved.advance([], ORDER) is moved


def test_a_topic_is_a_server_and_its_set_is_the_servers_tools() -> None:
    picks = StickyPicks().advance(["w_1", "m_0", "w_0"], SERVED)
    assert picks.tool_ids == ("w_0", "w_1", "w_2")  # weather: best pick's server, two picks
    # A follow-up whose best pick is another server's, but most picks are weather's, stays;
    # so does one whose best pick is weather's among stray picks.
    assert picks.advance(["m_1", "w_2", "w_0"], SERVED) is picks
    assert picks.advance(["w_2", "m_1", "g_0", "plain_0"], SERVED) is picks
    # Most picks and the best one elsewhere: the topic changed.
    assert picks.advance(["g_1", "g_0", "w_0"], SERVED).tool_ids == ("g_0", "g_1", "g_2")
    # A server larger than max_set: the picks themselves.
    small = StickyPicks(max_set=2).advance(["w_1", "m_0", "w_0"], SERVED)
    assert small.tool_ids == ("w_0", "w_1", "m_0")


SERVED = Catalog(
    [Tool(f"{s}_{i}", f"{s}_{i}", server=s) for s in ("w", "m", "g") for i in range(3)]
    + [Tool(f"plain_{i}", f"plain_{i}") for i in range(3)]
)
rankings = st.lists(st.lists(st.sampled_from(SERVED.ids), max_size=6), min_size=1, max_size=25)


@given(rankings, st.floats(min_value=0.05, max_value=1.0), st.integers(1, 5))
def test_the_set_changes_only_off_topic_and_then_holds_the_best_pick(
    steps: list[list[str]], keep: float, max_set: int
) -> None:
    picks = StickyPicks(keep_overlap=keep, max_set=max_set)
    bound = 0
    group = _grouping(SERVED)
    for ranked in steps:
        before = picks
        picks = picks.advance(ranked, SERVED)
        unique = list(dict.fromkeys(ranked))
        changed = picks.tool_ids != before.tool_ids
        assert list(picks.tool_ids) == sorted(picks.tool_ids, key=SERVED.ids.index)
        assert picks.changes == before.changes + (changed and bool(before.tool_ids))
        if not unique:
            assert picks is before
        elif before.tool_ids and same_topic(before.groups, [group(i) for i in unique], keep):
            assert not changed
        else:  # a new topic: its best pick is callable, and its set is bounded
            assert unique[0] in picks.tool_ids
            bound = max(max_set, len(unique))
        assert len(picks.tool_ids) <= bound


@given(st.lists(st.sampled_from(ORDER), unique=True), st.randoms())
def test_stable_order_does_not_depend_on_rank(ids: list[str], random: Any) -> None:
    shuffled = list(ids)
    random.shuffle(shuffled)
    assert (
        stable_order(shuffled, ORDER)
        == stable_order(ids, ORDER)
        == tuple(i for i in ORDER if i in ids)
    )


def test_ids_the_catalogue_lacks_come_last_in_the_order_given() -> None:
    assert stable_order(["zz", "tool_02", "aa", "tool_01"], ORDER) == (
        "tool_01",
        "tool_02",
        "zz",
        "aa",
    )

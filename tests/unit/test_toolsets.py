"""Tool sets: anuma's semantics on the default embedder's measured floors."""

from __future__ import annotations

import pytest

from toolroute import ConfigError
from toolroute._core.select.toolsets import (
    ANCHOR_MIN_SIMILARITY,
    ToolSet,
    activated_sets,
    apply_exclusive,
    expand_additive,
    system_prompts,
)

RESEARCH = ToolSet(
    name="research",
    members=["search_web", "read_url", "parallel_read_url"],
    anchors=["search_web"],
    anchor_min_similarity=0.5,
    system_prompt="Cite the pages you read.",
)
WEATHER = ToolSet(
    name="weather",
    members=["geocode"],
    anchors=["forecast", "air_quality"],
    anchor_min_similarity=0.5,
    system_prompt="Give temperatures in Celsius.",
)
SETS = [RESEARCH, WEATHER]
AVAILABLE = {
    "search_web",
    "read_url",
    "parallel_read_url",
    "geocode",
    "forecast",
    "air_quality",
    "send_email",
}


def test_additive_pulls_in_members_of_a_genuinely_active_set() -> None:
    scores = {"search_web": 0.7, "send_email": 0.4}
    result = expand_additive(["search_web", "send_email"], AVAILABLE, scores, SETS)
    assert result == ["search_web", "send_email", "read_url", "parallel_read_url"]


def test_an_anchor_below_its_floor_activates_nothing_but_matches_stay() -> None:
    scores = {"search_web": 0.49}
    assert expand_additive(["search_web"], AVAILABLE, scores, SETS) == ["search_web"]
    assert activated_sets(scores, SETS) == ()


def test_additive_anchor_need_not_be_matched() -> None:
    assert "geocode" in expand_additive(["send_email"], AVAILABLE, {"forecast": 0.6}, SETS)


def test_forced_sets_activate_without_scores() -> None:
    assert activated_sets({}, SETS, forced={"weather"}) == ("weather",)
    assert expand_additive([], AVAILABLE, {}, SETS, forced={"weather"}) == ["geocode"]


def test_excluded_tools_can_never_anchor_and_are_dropped() -> None:
    scores = {"search_web": 0.9}
    assert activated_sets(scores, SETS, exclude={"search_web"}) == ()
    assert expand_additive(["search_web"], AVAILABLE, scores, SETS, exclude={"search_web"}) == []


def test_unavailable_members_are_not_added() -> None:
    result = expand_additive(["search_web"], {"search_web"}, {"search_web": 0.9}, SETS)
    assert result == ["search_web"]


def test_exclusive_keeps_set_members_and_strong_independents() -> None:
    scores = {"search_web": 0.7, "send_email": 0.65, "forecast": 0.3}
    result = apply_exclusive(
        ["search_web", "send_email", "forecast"], AVAILABLE, scores, SETS, independent_threshold=0.6
    )
    assert result == ["search_web", "read_url", "parallel_read_url", "send_email"]


def test_exclusive_requires_the_anchor_to_be_matched() -> None:
    scores = {"forecast": 0.9, "send_email": 0.2}
    assert apply_exclusive(["send_email"], AVAILABLE, scores, SETS) == ["send_email"]


def test_system_prompts_follow_set_order_without_repeats() -> None:
    twin = ToolSet(
        name="twin", members=["x"], anchors=["x"], system_prompt="Cite the pages you read."
    )
    prompts = system_prompts([*SETS, twin], {"weather", "research", "twin"})
    assert prompts == ["Cite the pages you read.", "Give temperatures in Celsius."]
    assert system_prompts(SETS, set()) == []


def test_default_floor_is_the_measured_one() -> None:
    assert (
        ToolSet(name="s", members=["a"], anchors=["a"]).anchor_min_similarity
        == ANCHOR_MIN_SIMILARITY
    )


def test_a_string_where_a_list_belongs_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="members must be a list"):
        ToolSet(name="s", members="search_web", anchors=["search_web"])


def test_selection_adds_members_of_an_activated_set() -> None:
    from toolroute import Catalog, ToolIndex
    from toolroute.providers import HashingEmbedder

    catalog = Catalog.from_plain(
        [
            {"name": "search_web", "description": "Search the web for pages about a topic"},
            {"name": "read_url", "description": "Download one page as text"},
            {"name": "send_email", "description": "Send an email message"},
            {"name": "get_weather", "description": "Weather forecast for a city"},
        ]
    )
    research = ToolSet(
        name="research",
        members=["search_web", "read_url"],
        anchors=["search_web"],
        anchor_min_similarity=0.3,
    )
    index = ToolIndex(catalog, embedder=HashingEmbedder(), cache=None)
    selection = index.select(
        "search the web for pages about whales", max_tools=1, tool_sets=[research]
    )
    assert selection.tool_ids == ("search_web", "read_url")
    assert selection.sources == ("ranked", "tool_set")
    assert selection.active_sets == ("research",)
    plain = index.select("search the web for pages about whales", max_tools=1)
    assert plain.tool_ids == ("search_web",)
    forced = index.select(
        "weather in Oslo", max_tools=1, tool_sets=[research], forced_sets=["research"]
    )
    assert set(forced.tool_ids) >= {"get_weather", "search_web", "read_url"}
    with pytest.raises(ConfigError, match="unknown tool sets"):
        index.select("x", tool_sets=[research], forced_sets=["nope"])
    with pytest.raises(ConfigError, match="tool set 'bad'"):
        index.select("x", tool_sets=[ToolSet(name="bad", members=["missing"], anchors=["missing"])])

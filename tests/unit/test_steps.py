"""The pure step planner: what a step shows, decided without I/O."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from toolroute import Catalog, Outcome, ToolSet
from toolroute._core.select.selection import Ranking
from toolroute._core.select.steps import (
    StepInput,
    ranked_step,
    ranking_window,
    step_without_ranking,
)

TOOLS = Catalog.from_plain(
    [{"name": f"tool_{i}", "description": f"Tool number {i}"} for i in range(12)]
)
TRAVEL = ToolSet(name="travel", members=["tool_8", "tool_9"], anchors=["tool_8"])


def ranking(ids: list[str], outcome: Outcome = Outcome.APPLIED) -> Ranking:
    scores = tuple(1.0 - i / 100 for i in range(len(ids)))
    return Ranking(tool_ids=tuple(ids), scores=scores, strategy="keyword", outcome=outcome)


def test_no_request_text_shows_always_found_and_forced_members() -> None:
    step = StepInput(
        query="  ",
        page=1,
        forced=("travel",),
        found=("tool_3",),
        always=("tool_0",),
        sets=(TRAVEL,),
    )
    pick = step_without_ranking(step, TOOLS, all_tools_ceiling=100)
    assert pick is not None
    assert pick.tool_ids == ("tool_0", "tool_3", "tool_8", "tool_9")
    assert (pick.outcome, pick.reason, pick.active_sets) == (
        Outcome.SKIPPED,
        "no request text",
        ("travel",),
    )


def test_no_request_text_and_nothing_to_add_shows_every_tool() -> None:
    pick = step_without_ranking(StepInput(query="", page=0), TOOLS, all_tools_ceiling=100)
    assert pick is not None
    assert pick.tool_ids is None


def test_a_request_without_a_word_is_treated_as_no_request_text() -> None:
    pick = step_without_ranking(StepInput(query=" 👍 ", page=0), TOOLS, all_tools_ceiling=100)
    assert pick is not None
    assert (pick.tool_ids, pick.query, pick.outcome, pick.reason) == (
        None,
        "👍",
        Outcome.SKIPPED,
        "no words in the request",
    )
    pinned = step_without_ranking(
        StepInput(query="?!", page=0, always=("tool_0",)), TOOLS, all_tools_ceiling=100
    )
    assert pinned is not None
    assert pinned.tool_ids == ("tool_0",)


def test_two_idle_steps_show_every_tool_within_the_ceiling() -> None:
    step = StepInput(query="book", page=2)
    assert step_without_ranking(step, TOOLS, all_tools_ceiling=12).tool_ids is None  # type: ignore[union-attr]
    assert step_without_ranking(step, TOOLS, all_tools_ceiling=11) is None  # ranked instead
    hidden = StepInput(query="book", page=2, hidden=frozenset({"tool_1"}))
    pick = step_without_ranking(hidden, TOOLS, all_tools_ceiling=11)
    assert pick is not None
    assert pick.tool_ids is not None
    assert "tool_1" not in pick.tool_ids
    assert len(pick.tool_ids) == 11


def test_pages_walk_down_the_ranking() -> None:
    ids = [f"tool_{i}" for i in range(12)]
    for page, expected in ((0, ids[:3]), (1, ids[3:6])):
        step = StepInput(query="x", page=page)
        window = ranking_window(step, max_tools=3, all_tools_ceiling=50)
        assert window.wanted >= window.start + window.count
        pick, activated = ranked_step(step, window, ranking(ids[: window.wanted]), 0.0)
        assert pick.tool_ids == tuple(expected)
        assert activated == ()


def test_hidden_tools_are_never_shown_and_the_window_ranks_past_them() -> None:
    hidden = frozenset({"tool_0", "tool_1"})
    step = StepInput(query="x", page=0, hidden=hidden)
    window = ranking_window(step, max_tools=3, all_tools_ceiling=50)
    assert window.wanted == 3 + len(hidden)
    ids = [f"tool_{i}" for i in range(window.wanted)]
    pick, _ = ranked_step(step, window, ranking(ids), 0.0)
    assert pick.tool_ids == ("tool_2", "tool_3", "tool_4")


@given(st.integers(0, 2), st.integers(1, 8), st.integers(1, 60), st.booleans())
def test_the_window_always_covers_its_page(page: int, size: int, ceiling: int, sets: bool) -> None:
    step = StepInput(query="x", page=page, sets=(TRAVEL,) if sets else ())
    window = ranking_window(step, max_tools=size, all_tools_ceiling=ceiling)
    assert window.wanted >= window.start + window.count or page >= 2
    assert window.start == (0 if page >= 2 else page * size)

"""The selection policy (engine/_policy.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute import Catalog, ConfigError, Policy, Tool
from toolroute._core.select.policy import GAP_RATIO, MIN_ADAPTIVE, Pick, apply_policy, elbow


def ids(picks: list[Pick]) -> list[str]:
    return [p.id for p in picks]


# -- elbow --------------------------------------------------------------------------------------


def test_elbow_cuts_at_the_first_large_gap() -> None:
    ranked = [("a", 1.0), ("b", 0.9), ("c", 0.3), ("d", 0.25)]
    # lead 1.0; gaps 0.1, 0.6, 0.05 -> 0.6 >= 0.4 * 1.0 after "b"
    assert elbow(ranked) == [("a", 1.0), ("b", 0.9)]


def test_elbow_keeps_a_list_without_a_large_gap() -> None:
    ranked = [("a", 1.0), ("b", 0.8), ("c", 0.65), ("d", 0.5)]
    assert elbow(ranked) == ranked


def test_elbow_gap_exactly_at_the_ratio_cuts() -> None:
    ranked = [("a", 1.0), ("b", 1.0), ("c", 1.0 - GAP_RATIO), ("d", 0.0)]
    assert elbow(ranked) == ranked[:2]


def test_elbow_never_cuts_below_two() -> None:
    ranked = [("a", 1.0), ("b", 0.1), ("c", 0.08), ("d", 0.07)]
    # The big drop comes after the first result, which is below MIN_ADAPTIVE: no cut there.
    assert MIN_ADAPTIVE == 2
    assert elbow(ranked) == ranked


def test_elbow_later_gap_still_cuts_after_an_early_one() -> None:
    ranked = [("a", 1.0), ("b", 0.5), ("c", 0.45), ("d", 0.0)]
    assert elbow(ranked) == ranked[:3]


@pytest.mark.parametrize("ranked", [[], [("a", 1.0)], [("a", 1.0), ("b", 0.0)]])
def test_elbow_leaves_two_or_fewer_alone(ranked: list[tuple[str, float]]) -> None:
    assert elbow(ranked) == ranked


def test_elbow_negative_scores_need_a_baseline() -> None:
    ranked = [("a", -0.1), ("b", -0.15), ("c", -0.6), ("d", -0.65)]
    # Against 0 the top score has no lead: nothing to cut.
    assert elbow(ranked) == ranked
    # Against a baseline of -0.7 the lead is 0.6 and the 0.45 drop after "b" is an elbow.
    assert elbow(ranked, baseline=-0.7) == ranked[:2]


def test_elbow_with_top_at_baseline_returns_whole_list() -> None:
    ranked = [("a", 0.2), ("b", 0.1), ("c", -0.5)]
    assert elbow(ranked, baseline=0.2) == ranked


# -- apply_policy ---------------------------------------------------------------------------------


RANKED = [("a", 0.9), ("b", 0.8), ("c", 0.7), ("d", 0.6), ("e", 0.5), ("f", 0.4)]


def test_policy_caps_ranked_picks_at_max_tools() -> None:
    picks = apply_policy(RANKED, Policy(max_tools=3))
    assert ids(picks) == ["a", "b", "c"]
    assert [p.score for p in picks] == [0.9, 0.8, 0.7]
    assert {p.source for p in picks} == {"ranked"}


def test_max_tools_one_gives_one() -> None:
    assert ids(apply_policy(RANKED, Policy(max_tools=1))) == ["a"]
    assert ids(apply_policy(RANKED, Policy(max_tools=1, adaptive=False))) == ["a"]


def test_max_tools_zero_gives_only_always_active() -> None:
    assert ids(apply_policy(RANKED, Policy(max_tools=0, always_active=["f"]))) == ["f"]


def test_adaptive_cut_applies_after_max_tools() -> None:
    ranked = [("a", 1.0), ("b", 0.95), ("c", 0.2), ("d", 0.15)]
    assert ids(apply_policy(ranked, Policy(max_tools=4))) == ["a", "b"]
    assert ids(apply_policy(ranked, Policy(max_tools=4, adaptive=False))) == ["a", "b", "c", "d"]


def test_adaptive_cut_uses_the_baseline() -> None:
    ranked = [("a", -0.1), ("b", -0.15), ("c", -0.6), ("d", -0.65)]
    assert ids(apply_policy(ranked, Policy(max_tools=4))) == ["a", "b", "c", "d"]
    assert ids(apply_policy(ranked, Policy(max_tools=4), baseline=-0.7)) == ["a", "b"]


def test_threshold_drops_low_scores_inclusive() -> None:
    picks = apply_policy(RANKED, Policy(threshold=0.7, adaptive=False))
    assert ids(picks) == ["a", "b", "c"]


def test_threshold_is_skipped_when_told_not_to_use_it() -> None:
    picks = apply_policy(RANKED, Policy(max_tools=3, threshold=5.0), use_threshold=False)
    assert ids(picks) == ["a", "b", "c"]
    assert apply_policy(RANKED, Policy(max_tools=3, threshold=5.0)) == []


def test_always_active_come_first_and_once() -> None:
    policy = Policy(max_tools=3, always_active=["c", "z", "c"], adaptive=False)
    assert policy.always_active == ("c", "z")
    picks = apply_policy(RANKED, policy)
    assert ids(picks) == ["c", "z", "a", "b"]
    assert [p.source for p in picks] == ["always_active", "always_active", "ranked", "ranked"]
    # An always-active tool that was ranked keeps its score; one that was not has none.
    assert [p.score for p in picks] == [0.7, None, 0.9, 0.8]


def test_always_active_rejects_a_bare_string() -> None:
    with pytest.raises(ConfigError, match="always_active must be a list"):
        Policy(always_active="search")  # type: ignore[arg-type]


def test_related_adds_targets_after_ranked_picks() -> None:
    policy = Policy(max_tools=2, adaptive=False, related={"a": ["x", "y"]})
    picks = apply_policy(RANKED, policy)
    assert ids(picks) == ["a", "b", "x", "y"]
    assert [p.source for p in picks] == ["ranked", "ranked", "related", "related"]
    assert [p.score for p in picks][2:] == [None, None]


def test_related_is_one_directional() -> None:
    policy = Policy(max_tools=2, adaptive=False, related={"z": ["a"]})
    # "a" is picked but only "z" lists it: nothing is added.
    assert ids(apply_policy(RANKED, policy)) == ["a", "b"]


def test_related_only_expands_tools_that_survived_the_cut() -> None:
    policy = Policy(max_tools=2, adaptive=False, related={"c": ["x"]})
    assert ids(apply_policy(RANKED, policy)) == ["a", "b"]


def test_related_is_bounded_by_max_related() -> None:
    policy = Policy(
        max_tools=2, adaptive=False, related={"a": ["x", "y", "z"], "b": ["w"]}, max_related=2
    )
    assert ids(apply_policy(RANKED, policy)) == ["a", "b", "x", "y"]
    none = Policy(max_tools=2, adaptive=False, related={"a": ["x"]}, max_related=0)
    assert ids(apply_policy(RANKED, none)) == ["a", "b"]


def test_related_skips_tools_already_shown() -> None:
    policy = Policy(
        max_tools=2, adaptive=False, always_active=["k"], related={"a": ["b", "k", "x"], "b": ["x"]}
    )
    picks = apply_policy(RANKED, policy)
    assert ids(picks) == ["k", "a", "b", "x"]
    assert picks[-1].source == "related"


def test_related_target_ranked_below_the_cut_keeps_its_score() -> None:
    policy = Policy(max_tools=1, related={"a": ["f"]})
    assert apply_policy(RANKED, policy)[-1] == Pick("f", 0.4, "related", "a")


@pytest.mark.parametrize(
    "related", [{"a": "b"}, {"a": [1]}, ["a", "b"]], ids=["string", "non-string", "list"]
)
def test_malformed_related_is_a_config_error(related: object) -> None:
    with pytest.raises(ConfigError, match="related"):
        Policy(related=related)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["max_tools", "max_related"])
def test_negative_limits_are_rejected(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Policy(**{field: -1})  # type: ignore[arg-type]


# -- check_ids ----------------------------------------------------------------------------------


CATALOG = Catalog([Tool("a", "a"), Tool("b", "b"), Tool("c", "c")])


def test_check_ids_accepts_known_ids() -> None:
    Policy(always_active=["a"], related={"b": ["c"]}).check_ids(CATALOG)
    Policy(always_active=["a"]).check_ids(["a", "b"])


def test_unknown_always_active_ids_are_named() -> None:
    with pytest.raises(ConfigError, match=r"always_active .*'nope', 'gone'"):
        Policy(always_active=["a", "nope", "gone"]).check_ids(CATALOG)


def test_unknown_related_key_is_named() -> None:
    with pytest.raises(ConfigError, match=r"related\['ghost'\] .*'ghost'"):
        Policy(related={"ghost": ["a"]}).check_ids(CATALOG)


def test_unknown_related_target_is_named() -> None:
    with pytest.raises(ConfigError, match=r"related\['a'\] .*'missing'"):
        Policy(related={"a": ["b", "missing"]}).check_ids(CATALOG)


# -- properties ---------------------------------------------------------------------------------

TOOL_IDS = [f"t{i}" for i in range(12)]


@st.composite
def ranked_lists(draw: st.DrawFn) -> list[tuple[str, float]]:
    chosen = draw(st.lists(st.sampled_from(TOOL_IDS), unique=True, max_size=len(TOOL_IDS)))
    scores = draw(
        st.lists(st.floats(-2, 3, allow_nan=False), min_size=len(chosen), max_size=len(chosen))
    )
    return list(zip(chosen, sorted(scores, reverse=True), strict=True))


policies = st.builds(
    Policy,
    max_tools=st.integers(0, 8),
    threshold=st.none() | st.floats(-2, 3, allow_nan=False),
    adaptive=st.booleans(),
    always_active=st.lists(st.sampled_from(TOOL_IDS), max_size=4),
    max_related=st.integers(0, 4),
)


@settings(max_examples=200, deadline=None)
@given(ranked_lists(), policies, st.floats(-2, 3, allow_nan=False), st.booleans())
def test_policy_picks_only_ranked_or_always_active_within_budget(
    ranked: list[tuple[str, float]], policy: Policy, baseline: float, use_threshold: bool
) -> None:
    picks = apply_policy(ranked, policy, baseline=baseline, use_threshold=use_threshold)
    chosen = ids(picks)
    assert set(chosen) <= {i for i, _ in ranked} | set(policy.always_active)
    assert len(chosen) <= policy.max_tools + len(policy.always_active)
    assert len(chosen) == len(set(chosen))
    assert chosen[: len(policy.always_active)] == list(policy.always_active)
    ranked_picks = [p.id for p in picks if p.source == "ranked"]
    order = [i for i, _ in ranked]
    assert ranked_picks == sorted(ranked_picks, key=order.index)


@settings(max_examples=200, deadline=None)
@given(
    ranked_lists(),
    policies,
    st.dictionaries(
        st.sampled_from(TOOL_IDS), st.lists(st.sampled_from([*TOOL_IDS, "x1", "x2"]), max_size=4)
    ),
    st.floats(-2, 3, allow_nan=False),
)
def test_policy_is_deterministic_and_duplicate_free_with_related(
    ranked: list[tuple[str, float]],
    policy: Policy,
    related: dict[str, list[str]],
    baseline: float,
) -> None:
    policy = Policy(
        max_tools=policy.max_tools,
        threshold=policy.threshold,
        adaptive=policy.adaptive,
        always_active=policy.always_active,
        related=related,
        max_related=policy.max_related,
    )
    first = apply_policy(ranked, policy, baseline=baseline)
    assert apply_policy(list(ranked), policy, baseline=baseline) == first
    chosen = ids(first)
    assert len(chosen) == len(set(chosen))
    added = [p for p in first if p.source == "related"]
    assert len(added) <= policy.max_related
    assert len(chosen) <= policy.max_tools + len(policy.always_active) + policy.max_related
    # Related tools come from a tool shown for another reason (ranked, or always-active and
    # ranked), never from another related tool.
    shown = {p.id for p in first if p.source != "related"}
    for pick in added:
        assert any(pick.id in related.get(source, ()) for source in shown)

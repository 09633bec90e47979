"""Explanations: every shown tool says why, every asked-about hidden tool says which rule."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute import Catalog, ConfigError, Explanation, ToolIndex, ToolSet
from toolroute._core.outcome import Outcome
from toolroute._core.select.explain import (
    HIDDEN_REASONS,
    SHOWN_REASONS,
    ExplainRequest,
    explain_ask,
)
from toolroute._core.select.plan import RequestVector
from toolroute._core.select.policy import Policy, select
from toolroute._core.select.selection import Ranking, Strategy
from toolroute._core.text import keyword_document
from toolroute.providers import HashingEmbedder

CATALOG = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Current weather and forecast for a city"},
        {"name": "send_email", "description": "Send an email message to a recipient"},
        {"name": "create_issue", "description": "Open a new issue in a GitHub repository"},
        {"name": "book_flight", "description": "Book a flight ticket to a city"},
        {"name": "read_file", "description": "Read a file from disk"},
    ]
)
KEYWORD = ToolIndex(CATALOG, embedder=None, cache=None)
COMBINED = ToolIndex(CATALOG, embedder=HashingEmbedder(), cache=None)


def ranking(*pairs: tuple[str, float], outcome: Outcome = Outcome.APPLIED) -> Ranking:
    return Ranking(
        tool_ids=tuple(i for i, _ in pairs),
        scores=tuple(s for _, s in pairs),
        strategy="semantic",
        outcome=outcome,
    )


def explain(*ask: str, query: str = "weather") -> ExplainRequest:
    return ExplainRequest(ask=ask, index=KEYWORD, query=query)


def reasons(selection: object) -> dict[str, str]:
    return {e.tool_id: e.reason for e in selection.explanations}  # type: ignore[attr-defined]


def test_each_cut_names_itself() -> None:
    ranked = ranking(
        ("get_weather", 0.9),
        ("book_flight", 0.85),
        ("send_email", 0.4),  # elbow: 0.45 gap of a 0.9 lead
        ("create_issue", 0.35),  # past max_tools
        ("read_file", 0.1),  # below the threshold
    )
    policy = Policy(max_tools=3, threshold=0.2, adaptive=True)
    selection = select(
        ranked, policy, 0.0, explain=explain("send_email", "create_issue", "read_file")
    )
    assert selection.tool_ids == ("get_weather", "book_flight")
    assert reasons(selection) == {
        "get_weather": "ranked",
        "book_flight": "ranked",
        "send_email": "adaptive",
        "create_issue": "max_tools",
        "read_file": "threshold",
    }
    hidden = selection.explanation("read_file")
    assert hidden is not None
    assert (hidden.shown, hidden.rank, hidden.score, hidden.cosine) == (False, 5, 0.1, 0.1)


def test_rule_added_tools_name_the_rule_and_what_pulled_them_in() -> None:
    sets = (ToolSet(name="travel", members=["book_flight"], anchors=["get_weather"]),)
    policy = Policy(
        max_tools=1,
        always_active=["read_file"],
        related={"get_weather": ["send_email"]},
        tool_sets=sets,
        forced_sets=["travel"],
    )
    selection = select(ranking(("get_weather", 0.9)), policy, 0.0, explain=explain())
    by_id = {e.tool_id: e for e in selection.explanations}
    assert [e.tool_id for e in selection.explanations] == list(selection.tool_ids)
    assert by_id["read_file"].reason == "always_active"
    assert by_id["send_email"].reason == "related"
    assert by_id["send_email"].related_to == "get_weather"
    assert by_id["book_flight"].reason == "tool_set"
    assert by_id["book_flight"].tool_set == "travel"
    assert by_id["get_weather"].matched_words == ("weather",)


def test_never_ranked_is_not_recalled_and_an_empty_request_is_skipped() -> None:
    selection = select(ranking(("get_weather", 0.9)), Policy(), 0.0, explain=explain("read_file"))
    assert reasons(selection)["read_file"] == "not_recalled"
    empty = Ranking(tool_ids=(), scores=(), strategy="semantic", outcome=Outcome.SKIPPED)
    skipped = select(empty, Policy(), 0.0, explain=explain("read_file", query=""))
    assert reasons(skipped) == {"read_file": "skipped"}


def test_off_by_default_and_nothing_recorded() -> None:
    assert KEYWORD.select("weather").explanations == ()
    assert KEYWORD.select("weather", explain=False).explanations == ()


def test_tool_index_explains_with_the_tier_and_the_cosine_under_the_fused_score() -> None:
    selection = COMBINED.select("weather forecast", explain=True)
    top = selection.explanations[0]
    assert top.tool_id == "get_weather"
    assert top.tier == "full"
    assert top.cosine is not None
    assert top.score is not None
    assert top.cosine <= top.score  # fused = cosine + non-negative keyword boosts
    keyword = KEYWORD.select("weather forecast", explain=True).explanations[0]
    assert (keyword.tier, keyword.cosine) == ("keyword", None)


def test_degraded_recall_explains_as_keyword_tier() -> None:
    broken = ToolIndex(CATALOG, embedder=HashingEmbedder(), cache=None).without_vectors("down")
    selection = broken.select("weather", strategy="combined", explain=True)
    assert selection.outcome is Outcome.DEGRADED
    assert {e.tier for e in selection.explanations} == {"keyword"}


@pytest.mark.parametrize("wrong", [3, {"a": 1}, [1, 2], b"get_weather"])
def test_a_wrong_explain_argument_is_a_clear_error(wrong: object) -> None:
    with pytest.raises(ConfigError, match="explain must be True, False or a list of tool ids"):
        KEYWORD.select("weather", explain=wrong)  # type: ignore[arg-type]


def test_explaining_an_unknown_tool_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="explain names tools not in the catalogue: 'nope'"):
        KEYWORD.select("weather", explain=["nope"])


def test_explain_ask_reads_true_false_and_ids() -> None:
    assert explain_ask(False) is None
    assert explain_ask(None) is None
    assert explain_ask(True) == ()
    assert explain_ask("a") == ("a",)
    assert explain_ask(["a", "b", "a"]) == ("a", "b")


WORDS = st.text(alphabet=st.characters(codec="utf-8", categories=("L", "N", "Zs")), max_size=60)


@settings(max_examples=60, deadline=None)
@given(query=WORDS, secret=st.sampled_from(["zebracorn", "hunter2pass", "xylophonic"]))
def test_no_request_text_in_an_explanation(query: str, secret: str) -> None:
    """Only the tool's own tokens are stored: a request word no tool has never appears."""
    request = f"{query} {secret} weather"
    selection = COMBINED.select(request, explain=[t.id for t in CATALOG])
    assert len(selection.explanations) == len(CATALOG)
    for explanation in selection.explanations:
        text = json.dumps(explanation.to_json(), ensure_ascii=False)
        assert secret not in text
        own = set(keyword_document(CATALOG[explanation.tool_id]))
        assert set(explanation.matched_words) <= own
        reasons_known = SHOWN_REASONS if explanation.shown else HIDDEN_REASONS
        assert explanation.reason in reasons_known


def test_to_json_is_a_fixed_shape_that_round_trips() -> None:
    explanation = COMBINED.select("weather", explain=True).explanations[0]
    data = json.loads(json.dumps(explanation.to_json()))
    assert set(data) == {
        "tool_id",
        "shown",
        "reason",
        "rank",
        "score",
        "cosine",
        "tier",
        "matched_words",
        "tool_set",
        "related_to",
        "server",
        "routing",
        "duplicate_of",
    }
    assert Explanation(**{**data, "matched_words": tuple(data["matched_words"])}) == explanation


def _fast_explanations(request: RequestVector, vector: Any) -> Ranking:
    """``request`` ranked for "weather forecast"; asserts every explanation says ``fast``
    and reports the vector's own cosine, whichever weights fused it."""
    index = COMBINED.recall
    query = "weather forecast"
    ranked = COMBINED.ranked(query, request, 5, Strategy.COMBINED)
    selection = select(
        ranked, Policy(adaptive=False), 0.0, explain=ExplainRequest(ask=(), index=index, query=query)
    )
    assert index.vectors is not None
    for record in selection.explanations:
        assert record.tier == "fast"
        exact = float(index.vectors.matrix[CATALOG.position(record.tool_id)] @ vector)
        assert record.cosine == pytest.approx(exact, abs=1e-5)
    return ranked


def test_a_fast_tier_ranking_explains_the_cosine_under_its_own_fusion_weights() -> None:
    # The fast tier's rougher vectors are fused with heavier keyword weights; the cosine an
    # explanation reports is still the vector's own, whichever weights the ranking used.
    vector = HashingEmbedder().embed(["weather forecast"])[0]
    request = RequestVector.stepped_down(vector, "fast tier: full model busy")
    ranked = _fast_explanations(request, vector)
    assert ranked.scores[0] > 4.0  # fused: 0.74 + 4 (the request's words) + 0.33 (its name)


def test_a_fast_ranking_that_stood_explains_its_tier_and_cosine_under_the_models_weights() -> None:
    # The cascade: the fast tier's vector, sure enough to stand, is fused with the model's
    # weights (its floor was chosen with them) and the answer is applied, not degraded.
    vector = HashingEmbedder().embed(["weather forecast"])[0]
    ranked = _fast_explanations(RequestVector.sure(vector), vector)
    assert (ranked.outcome, ranked.reason, ranked.tier) == (Outcome.APPLIED, "", "fast")
    assert ranked.scores[0] < 2.0  # the model's weights: 0.4 and 0.1, not 4 and 0.33


def test_every_ranking_names_the_tier_of_its_vector() -> None:
    query = "weather forecast"
    vector = HashingEmbedder().embed([query])[0]
    by = {
        "full": RequestVector.full(vector),
        "fast": RequestVector.stepped_down(vector, "fast tier: full model busy"),
        "keyword": RequestVector.missing("embedder failed"),
    }
    for tier, request in by.items():
        assert COMBINED.ranked(query, request, 5, Strategy.COMBINED).tier == tier
    assert COMBINED.ranked(query, None, 5, Strategy.KEYWORD).tier == "keyword"

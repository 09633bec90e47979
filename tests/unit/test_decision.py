"""Decision types, readers, the boolean gate, the state estimator and the strict wire reader."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute import ConfigError, DecisionError
from toolroute._core.decide.limits import ModelLimits, check_request, estimate_tokens
from toolroute._core.decide.types import (
    answered_reason,
    decision_key,
    merge_results,
    reply_outcome,
    split_questions,
)
from toolroute._core.decide.wire import (
    MalformedAnswer,
    Misaligned,
    read_answer,
    read_answers,
    read_usage,
)
from toolroute.decisions import (
    BooleanAnswer,
    BooleanGate,
    BooleanQuestion,
    ChoiceAnswer,
    ChoiceQuestion,
    DecisionLimits,
    DecisionRequest,
    DecisionResult,
    ScoreAnswer,
    ScoreQuestion,
    Usage,
    boolean_confidence,
    estimate_state_tokens,
    gate_boolean,
    read_boolean,
    read_choice,
    read_score,
)

YES = BooleanQuestion("The request needs billing.")
TEAM = ChoiceQuestion("Which team?", {"billing": "money", "technical": None, "sales": None})
MOOD = ScoreQuestion("How upset?", ["calm", "annoyed", "furious"])


@pytest.mark.parametrize(("p", "confidence"), [(0.5, 0.0), (0.0, 1.0), (1.0, 1.0), (0.75, 0.5)])
def test_boolean_confidence_matches_the_reference_values(p: float, confidence: float) -> None:
    assert boolean_confidence(p) == pytest.approx(confidence)


@given(st.floats(0.0, 1.0))
def test_default_gate_abstains_exactly_inside_point_three_to_point_seven(p: float) -> None:
    verdict = gate_boolean({"a": BooleanAnswer(p)}, "a")
    if 0.3 < p < 0.7:
        assert verdict is None
    else:
        assert verdict is (p >= 0.5)


def test_gate_reads_missing_and_other_types_as_no_judgement() -> None:
    answers = {"c": ChoiceAnswer("billing", {"billing": 1.0}, 1.0)}
    assert gate_boolean(answers, "missing") is None
    assert gate_boolean(answers, "c") is None
    assert read_boolean(answers, "c") is None
    strict = BooleanGate(min_confidence=0.6)
    assert gate_boolean({"a": BooleanAnswer(0.2)}, "a", strict) is False
    assert gate_boolean({"a": BooleanAnswer(0.25)}, "a", strict) is None


def test_read_choice_ranks_stably_and_read_score_checks_type() -> None:
    answers = {
        "t": ChoiceAnswer("a", {"a": 0.4, "b": 0.2, "c": 0.4}, 0.3),
        "s": ScoreAnswer(1.2, {"0": "calm", "1": "x"}, {"0": 0.4, "1": 0.6}, 0.5),
    }
    reading = read_choice(answers, "t")
    assert reading is not None
    assert reading.ranked == (("a", 0.4), ("c", 0.4), ("b", 0.2))
    assert read_choice(answers, "s") is None
    assert read_score(answers, "s") == answers["s"]
    assert read_score(answers, "t") is None


def test_questions_validate_their_shape() -> None:
    with pytest.raises(ConfigError, match="at least 2 named options"):
        ChoiceQuestion("x", {"only": None})
    with pytest.raises(ConfigError, match="at least 2 levels"):
        ScoreQuestion("x", ["one"])
    with pytest.raises(ConfigError, match="non-empty string"):
        BooleanQuestion("  ")
    with pytest.raises(ConfigError, match="question 'q' must be"):
        DecisionRequest(state="s", questions={"q": "is it?"})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="timeout_s"):
        DecisionRequest(state="s", questions={"q": YES}, timeout_s=0)


def test_split_keeps_order_and_merge_follows_the_rules() -> None:
    questions = {decision_key("server", i): YES for i in range(5)}
    assert decision_key("server", 3) == "server__3"
    chunks = split_questions(questions, 2)
    assert [list(c) for c in chunks] == [
        ["server__0", "server__1"],
        ["server__2", "server__3"],
        ["server__4"],
    ]
    assert split_questions(questions, None) == [questions]
    first = DecisionResult(
        model="jev-1",
        provider="typesafe",
        answers={"a": BooleanAnswer(0.1)},
        usage=Usage(input_tokens=3, output_tokens=1),
        request_id="r1",
        latency_ms=10,
        upstream_ms=5,
        media_bytes=7,
    )
    second = DecisionResult(
        model="jev-2",
        provider="typesafe",
        answers={"b": BooleanAnswer(0.9)},
        usage=Usage(input_tokens=4, output_tokens=0),
        request_id="r2",
        latency_ms=30,
        media_bytes=1,
    )
    merged = merge_results([first, second])
    assert list(merged.answers) == ["a", "b"]
    assert merged.usage == Usage(input_tokens=7, output_tokens=1)
    assert (merged.request_id, merged.latency_ms, merged.upstream_ms) == ("r1,r2", 30, 5)
    assert (merged.model, merged.media_bytes) == ("jev-1", 8)


def test_base_estimate_is_a_token_per_four_characters_plus_five_percent() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd" * 100) == math.ceil(100 * 1.05)
    assert estimate_state_tokens("abcd" * 100, DecisionLimits()) == 105
    # A JSON state is counted as its JSON text.
    assert estimate_state_tokens({"a": 1}, DecisionLimits()) == estimate_tokens('{"a": 1}')


def test_per_class_rates_follow_the_first_matching_class() -> None:
    clef = DecisionLimits(non_ascii_rate=1.5, digit_rate=1, symbol_rate=0.75, astral_rate=3)
    # 4 letters + 1 space (rest), 3 digits, 2 symbols, 2 non-ASCII, 1 astral.
    text = "ab cd123!?éé😀"
    expected = estimate_tokens("ab cd") + 3 + math.ceil(2 * 0.75) + 3 + math.ceil(2 * 1.5)
    assert estimate_state_tokens(text, clef) == expected
    # Inside a JSON state, non-ASCII is escaped on the wire: 2 per astral character.
    xor = DecisionLimits(non_ascii_rate=1, structured_non_ascii_rate=5)
    assert estimate_state_tokens(["é😀"], xor) == estimate_tokens('[""]') + math.ceil(3 * 5)
    assert estimate_state_tokens("é😀", xor) == 2


def test_check_request_refuses_over_the_caps_before_any_call() -> None:
    limits = DecisionLimits(
        max_state_tokens=10,
        max_questions=2,
        non_ascii_rate=1.0,
        models={"big": ModelLimits(max_state_tokens=1000)},
    )
    many = DecisionRequest(state="s", questions={str(i): YES for i in range(3)})
    with pytest.raises(DecisionError, match="at most 2 questions") as caught:
        check_request(many, limits, vendor="V", model="m")
    assert caught.value.kind == "max_tokens_exceeded"
    assert not caught.value.retryable
    long = DecisionRequest(state="x" * 100, questions={"a": YES})
    with pytest.raises(DecisionError, match=r"~27 tokens; V's 'm' model reads at most 10"):
        check_request(long, limits, vendor="V", model="m")
    assert check_request(long, limits, vendor="V", model="big") == 27
    advisory = DecisionLimits(max_state_tokens=1, advisory=True)
    assert check_request(long, advisory, vendor="V", model="m") == 27


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "noul", "noul": "no"},
        {"type": "noul", "noul": True},
        {"type": "noul", "noul": 1.7},
        {"type": "noul", "noul": -0.1},
        {"type": "noul", "noul": float("nan")},
        {"type": "noul"},
        {"type": "choice", "choice": "x", "probabilities": {"x": 1.0}},
        "0.9",
        None,
    ],
)
def test_strict_reader_refuses_what_is_not_a_probability(raw: object) -> None:
    with pytest.raises(MalformedAnswer):
        read_answer(raw, YES)


def test_strict_reader_reads_every_vocabulary_and_fills_confidence() -> None:
    assert read_answer({"type": "noul", "noul": 0.95}, YES) == BooleanAnswer(0.95)
    assert read_answer({"type": "boolean", "probability": 0}, YES) == BooleanAnswer(0.0)
    assert read_answer({"type": "predicate", "probability": 1}, YES) == BooleanAnswer(1.0)
    choice = {
        "type": "choice",
        "choice": "billing",
        "probabilities": {"billing": 0.8, "sales": 0.2},
    }
    assert read_answer(choice, TEAM).confidence == 0.8  # max(p) only as the last resort
    assert read_answer(choice, TEAM, confidence=0.3).confidence == 0.3
    assert read_answer({**choice, "confidence": 0.6}, TEAM, confidence=0.3).confidence == 0.6
    with pytest.raises(MalformedAnswer):
        read_answer({**choice, "probabilities": {"billing": "0.8"}}, TEAM)
    score = {
        "type": "score",
        "score": 1.4,
        "legend": {"0": "calm", "1": "annoyed"},
        "probabilities": {"0": 0.6, "1": 0.4},
        "confidence": 0.7,
    }
    assert read_answer(score, MOOD) == ScoreAnswer(
        1.4, {"0": "calm", "1": "annoyed"}, {"0": 0.6, "1": 0.4}, 0.7
    )
    with pytest.raises(MalformedAnswer):
        read_answer({**score, "legend": {"0": 1}}, MOOD)


def test_read_answers_drops_malformed_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = {"a": {"type": "noul", "noul": "yes"}, "b": {"type": "noul", "noul": 0.1}}
    with caplog.at_level("WARNING", logger="toolroute.decisions"):
        answers = read_answers(raw, {"a": YES, "b": YES, "c": YES}, vendor="V", redact=str)
    assert answers == {"b": BooleanAnswer(0.1)}  # "c" missing: unanswered, not fatal
    assert "V: dropped the answer to question 'a'" in caplog.text


def test_read_answers_refuses_a_reply_with_an_unasked_id() -> None:
    raw = {"a": {"type": "noul", "noul": 0.9}, "b": {"type": "noul", "noul": 0.1}, "z": {}}
    with pytest.raises(Misaligned, match="1 answers under ids that were not asked: 'z'"):
        read_answers(raw, {"a": YES, "b": YES}, vendor="V")
    assert read_usage({"inputTokens": 5, "output_tokens": 2}) == Usage(
        input_tokens=5, output_tokens=2
    )
    assert read_usage({"input_tokens": "5"}) == Usage(input_tokens=0, output_tokens=0)


@pytest.mark.parametrize(
    ("asked", "answered", "outcome"),
    [(6, 6, "applied"), (6, 5, "degraded"), (6, 1, "degraded"), (6, 0, "failed_open")],
)
def test_one_rule_for_how_a_reply_went(asked: int, answered: int, outcome: str) -> None:
    assert reply_outcome(asked, answered) == outcome
    assert answered_reason(asked, answered) == f"{answered} of {asked} answered"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_state_with_a_non_finite_number_is_an_invalid_request(bad: float) -> None:
    request = DecisionRequest(state={"n": [1, bad]}, questions={"q": YES})
    with pytest.raises(DecisionError, match="NaN or an infinite number") as caught:
        check_request(request, DecisionLimits(), vendor="V", model="m")
    assert caught.value.kind == "invalid_request"


def test_a_state_that_is_not_json_is_an_invalid_request() -> None:
    loop: list[object] = []
    loop.append(loop)
    for state in ({"when": object()}, loop):
        with pytest.raises(DecisionError) as caught:
            check_request(
                DecisionRequest(state=state, questions={"q": YES}),
                DecisionLimits(max_state_tokens=10),
                vendor="V",
                model="m",
            )
        assert caught.value.kind == "invalid_request"

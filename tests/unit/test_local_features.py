"""What the local decider reads from a request, and its calibration file (no trio)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute import ConfigError
from toolroute.decisions import BooleanQuestion, ChoiceQuestion
from toolroute.providers import Calibration, HashingEmbedder
from toolroute.providers._deciders.local_features import (
    FEATURES,
    Subject,
    boolean_subject,
    coverage,
    entry_text,
    option_subjects,
    request_text,
    subject_features,
    usage_shifts,
)

STATE = {
    "request": "send an email to Bob",
    "available_servers": [
        {"name": "mail_server", "does": "sends and reads email"},
        {"name": "weather", "does": "forecasts the weather"},
    ],
}


def test_indexed_question_is_about_that_entry() -> None:
    question = BooleanQuestion("Does it need this? Read available_servers[1].does.")
    subject = boolean_subject(question, STATE)
    assert subject.kind == "one"
    assert subject.texts == ("weather: forecasts the weather",)


def test_named_list_without_index_is_any_of_its_entries() -> None:
    subject = boolean_subject(BooleanQuestion("Needs one of available_servers."), STATE)
    assert subject.kind == "any"
    assert subject.texts == ("mail server: sends and reads email", "weather: forecasts the weather")


def test_statement_is_its_own_subject_and_a_bad_index_falls_back_to_it() -> None:
    plain = boolean_subject(BooleanQuestion("It asks for email.", true="an email"), STATE)
    assert plain.texts == ("It asks for email. an email",)
    past_end = boolean_subject(BooleanQuestion("Read available_servers[7]."), STATE)
    assert past_end.kind == "one"
    assert past_end.texts == ("Read available_servers[7].",)


def test_request_text_reads_the_request_field_or_the_whole_state() -> None:
    assert request_text(STATE) == "send an email to Bob"
    assert request_text("plain") == "plain"
    assert request_text({"query": "q"}) == "q"
    assert request_text([1, 2]) == "[1, 2]"
    assert len(request_text("x" * 100_000)) <= 2_000


def test_choice_options_become_single_subjects() -> None:
    question = ChoiceQuestion("Which?", options={"get_weather": "the forecast", "b": None})
    found = option_subjects(question)
    assert [name for name, _ in found] == ["get_weather", "b"]
    assert found[0][1].texts == ("get weather: the forecast",)
    assert entry_text({"name": "b"}) == "b"


def test_gap_is_measured_against_the_best_other_sibling() -> None:
    embedder = HashingEmbedder(dim=256)
    request = "send an email to Bob"
    subjects = [
        boolean_subject(BooleanQuestion(f"Read available_servers[{i}]."), STATE) for i in (0, 1)
    ]
    texts = [request, *(t for s in subjects for t in s.texts)]
    vectors = dict(zip(texts, embedder.embed(texts).astype(np.float64), strict=True))
    rows = subject_features(subjects, vectors[request], vectors, request)
    assert [len(r) for r in rows] == [len(FEATURES["one"])] * 2
    # The two gaps are opposite: each is measured against the other.
    assert rows[0][2] == pytest.approx(-rows[1][2])
    assert rows[0][2] == pytest.approx(rows[0][0] - rows[1][0])


@given(
    request=st.text(max_size=300),
    items=st.lists(st.text(max_size=200), min_size=1, max_size=6),
)
def test_features_are_finite_and_in_range_for_any_text(request: str, items: list[str]) -> None:
    embedder = HashingEmbedder(dim=64)
    state = {
        "request": request,
        "available_tools": [{"name": "t", "description": d} for d in items],
    }
    subjects = [
        boolean_subject(BooleanQuestion("Needs one of available_tools."), state),
        boolean_subject(BooleanQuestion("Read available_tools[0]."), state),
    ]
    texts = list(dict.fromkeys([request_text(state), *(t for s in subjects for t in s.texts)]))
    vectors = dict(zip(texts, embedder.embed(texts).astype(np.float64), strict=True))
    rows = subject_features(subjects, vectors[request_text(state)], vectors, request_text(state))
    for row in rows:
        assert np.isfinite(row).all()
        assert -1.0 - 1e-9 <= row[0] <= 1.0 + 1e-9
        assert 0.0 <= row[1] <= 1.0


def test_coverage_counts_the_requests_distinct_words() -> None:
    assert coverage(frozenset(), "anything") == 0.0
    assert coverage(frozenset({"email", "bob"}), "email tools") == 0.5


def test_bundled_calibration_reads_and_round_trips() -> None:
    bundled = Calibration.bundled()
    assert bundled.one.features == FEATURES["one"]
    assert bundled.any.features == FEATURES["any"]
    assert Calibration.from_mapping(json.loads(json.dumps(bundled.to_mapping()))) == bundled


def test_malformed_calibration_says_what_was_expected() -> None:
    good = Calibration.bundled().to_mapping()
    with pytest.raises(ConfigError, match="one weight per feature"):
        Calibration.from_mapping({**good, "one": {**good["one"], "weights": [1.0]}})
    with pytest.raises(ConfigError, match="must use the features"):
        Calibration.from_mapping(
            {**good, "any": {**good["any"], "features": ["cosine"], "weights": [1.0]}}
        )
    with pytest.raises(ConfigError, match="reading it failed"):
        Calibration.from_mapping({"embedder": "x"})
    with pytest.raises(ConfigError, match="finite"):
        Calibration.from_mapping({**good, "one": {**good["one"], "bias": float("nan")}})


def counted(used: int, of: int = 20) -> Subject:
    return Subject("one", ("a server",), (used, of))


def test_usage_shift_is_zero_for_an_average_server_and_signed_around_it() -> None:
    shifts = usage_shifts([counted(10), counted(5), counted(0)], pseudo=20.0)
    often, average, unused = shifts  # the mean share is 5 of 20
    assert often is not None
    assert unused is not None
    assert often > average == 0.0 > unused
    assert usage_shifts([counted(5), counted(5)], pseudo=20.0) == [0.0, 0.0]


def test_usage_shift_shrinks_few_requests_toward_the_average() -> None:
    few = usage_shifts([counted(2, 2), counted(0, 2)], pseudo=20.0)[0]
    many = usage_shifts([counted(20, 20), counted(0, 20)], pseudo=20.0)[0]
    assert few is not None
    assert many is not None
    assert 0 < few < many


def test_usage_shift_needs_counts_and_a_used_sibling() -> None:
    plain = Subject("one", ("a server",))
    assert usage_shifts([plain, plain], pseudo=20.0) == [None, None]
    assert usage_shifts([counted(0), counted(0), plain], pseudo=20.0) == [0.0, 0.0, None]


COUNTED_STATE = {
    **STATE,
    "similar_requests": 20,
    "available_servers": [
        {**STATE["available_servers"][0], "similar_uses": 7},
        {**STATE["available_servers"][1], "similar_uses": 0},
    ],
}


def test_a_server_question_carries_its_counts_by_index_or_by_quoted_name() -> None:
    indexed = BooleanQuestion("Needed? Read available_servers[0].does.")
    assert boolean_subject(indexed, COUNTED_STATE).uses == (7, 20)
    # The measured wording names the server in quotes; a quoted name later in the text
    # (in the description) is not the subject.
    measured = BooleanQuestion('The request needs the "weather" server, like "mail_server".')
    subject = boolean_subject(measured, COUNTED_STATE)
    assert subject.uses == (0, 20)
    assert subject.texts[0].startswith("The request needs")
    assert boolean_subject(BooleanQuestion("Is it raining?"), COUNTED_STATE).uses is None


@pytest.mark.parametrize(
    ("used", "of"), [(21, 20), (-1, 20), (True, 20), (3, 0), ("3", 20), (3, None)]
)
def test_malformed_counts_are_not_read(used: object, of: object) -> None:
    state = {
        **STATE,
        "similar_requests": of,
        "available_servers": [{**STATE["available_servers"][0], "similar_uses": used}],
    }
    question = BooleanQuestion("Needed? Read available_servers[0].does.")
    assert boolean_subject(question, state).uses is None


def test_calibration_with_a_usage_model_round_trips_and_checks_it() -> None:
    bundled = Calibration.bundled()
    assert bundled.usage is not None
    data = bundled.to_mapping()
    assert Calibration.from_mapping(json.loads(json.dumps(data))) == bundled
    assert Calibration.from_mapping({**data, "usage": None}).usage is None
    with pytest.raises(ConfigError, match="pseudo > 0"):
        Calibration.from_mapping({**data, "usage": {**data["usage"], "pseudo": 0}})
    with pytest.raises(ConfigError, match="reading it failed"):
        Calibration.from_mapping({**data, "usage": {"weight": 1.0}})

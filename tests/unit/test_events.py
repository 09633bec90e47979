"""Events are frozen, tagged, and survive a JSON round trip; queries stay hidden."""

from __future__ import annotations

import json
import typing
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute import ConfigError, Outcome
from toolroute._core.events import (
    CatalogUpdated,
    DecisionFinished,
    Event,
    EventsDropped,
    FailOpen,
    RoutingFinished,
    SelectionFinished,
    ServiceRestarted,
    StepFinished,
    SubscriptionStarted,
    WarmupFinished,
    WarmupProgress,
    from_json,
    new_query_key,
    query_hash,
    to_json,
)

TAGS: dict[type[Any], str] = {
    WarmupProgress: "warmup.progress",
    WarmupFinished: "warmup.finished",
    SelectionFinished: "selection.finished",
    StepFinished: "step.finished",
    RoutingFinished: "routing.finished",
    DecisionFinished: "decision.finished",
    FailOpen: "fail_open",
    ServiceRestarted: "service.restarted",
    CatalogUpdated: "catalog.updated",
    SubscriptionStarted: "subscription.started",
    EventsDropped: "events.dropped",
}
KEY = b"k" * 32

# Strict JSON has no NaN or infinity, so every float an event carries is finite.
finite = st.floats(allow_nan=False, allow_infinity=False)


def _strategy_for(tp: Any) -> st.SearchStrategy[Any]:
    """``st.from_type``, except that floats are finite wherever they appear."""
    if tp is float:
        return finite
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return st.lists(_strategy_for(args[0]), max_size=5).map(tuple)
    if origin in (typing.Union, type(int | None)):
        return st.one_of(*(_strategy_for(arg) for arg in args))
    return st.from_type(tp)


def events_of(cls: type[Any]) -> st.SearchStrategy[Any]:
    """Every field generated, defaulted ones included, so new fields are covered too."""
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{f.name: _strategy_for(hints[f.name]) for f in attrs.fields(cls)})


any_event = st.one_of(*(events_of(cls) for cls in TAGS))


def test_every_event_type_is_in_the_union() -> None:
    assert set(typing.get_args(Event)) == set(TAGS)


@pytest.mark.parametrize(("cls", "tag"), TAGS.items())
def test_tags_are_the_documented_names(cls: type[Any], tag: str) -> None:
    assert cls.type == tag
    assert "type" not in attrs.fields_dict(cls)


@given(any_event)
def test_json_round_trip(event: Event) -> None:
    text = to_json(event)
    assert json.loads(text)["type"] == type(event).type
    assert from_json(text) == event


@given(any_event)
def test_events_are_frozen(event: Event) -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        event.time = 0.0  # type: ignore[misc]


def test_time_defaults_to_wall_clock() -> None:
    import time

    before = time.time()
    event = FailOpen(operation="select", what_failed="embedder", reason="deadline")
    assert before <= event.time <= time.time()


def test_outcome_round_trips_as_its_value() -> None:
    event = DecisionFinished(
        provider="p", questions=3, answered=2, batches=1, outcome=Outcome.DEGRADED, latency_ms=1.5
    )
    assert json.loads(to_json(event))["outcome"] == "degraded"
    assert from_json(to_json(event)).outcome is Outcome.DEGRADED  # type: ignore[union-attr]


def test_step_with_all_tools_round_trips_as_null() -> None:
    event = StepFinished(
        session=None,
        query_hash="00",
        page=2,
        tool_ids=None,
        outcome=Outcome.APPLIED,
        latency_ms=0.1,
    )
    assert json.loads(to_json(event))["tool_ids"] is None
    assert from_json(to_json(event)) == event


def test_non_finite_floats_are_refused_rather_than_written_as_invalid_json() -> None:
    event = WarmupFinished(tools=1, embedded=0, from_cache=0, seconds=float("nan"))
    with pytest.raises(ValueError, match="Out of range float"):
        to_json(event)


def test_unknown_fields_are_ignored_so_newer_writers_can_be_read() -> None:
    data = json.loads(to_json(WarmupProgress(done=1, total=2, time=5.0)))
    data["added_later"] = [1, 2]
    assert from_json(json.dumps(data)) == WarmupProgress(done=1, total=2, time=5.0)


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        '{"done": 1, "total": 2}',
        '{"type": "warmup.nope", "done": 1, "total": 2}',
        '{"type": "warmup.progress", "done": 1}',
        '{"type": "warmup.progress", "done": "1", "total": 2}',
        '{"type": "warmup.finished", "tools": 1, "embedded": 1, "from_cache": 0,'
        ' "seconds": 1.0, "degraded": "no"}',
        '{"type": "warmup.progress", "done": true, "total": 2}',
    ],
)
def test_malformed_text_is_a_value_error_not_a_coerced_event(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - every malformation maps to one type
        from_json(text)


@given(st.text().map(lambda text: "\N{SNOWMAN}" + text))
def test_query_is_not_serialised_unless_passed(query: str) -> None:
    # The snowman keeps the query from equalling a field name or a fixed value by chance.
    event = SelectionFinished(
        query_hash=query_hash(query, KEY),
        tool_ids=("a",),
        scores=(0.5,),
        strategy="semantic",
        outcome=Outcome.APPLIED,
        degraded=False,
        latency_ms=1.0,
    )
    data = json.loads(to_json(event))
    assert data["query"] is None
    assert not any(query in text for text in _strings_in(data))


def test_query_appears_only_when_passed_explicitly() -> None:
    secret = "book a flight to Lisbon for Ada Lovelace"
    hidden = SelectionFinished(
        query_hash=query_hash(secret, KEY),
        tool_ids=(),
        scores=(),
        strategy="keyword",
        outcome=Outcome.DEGRADED,
        degraded=True,
        latency_ms=1.0,
    )
    assert "Lisbon" not in to_json(hidden)
    shown = attrs.evolve(hidden, query=secret)
    assert json.loads(to_json(shown))["query"] == secret


def _strings_in(value: object) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(*(_strings_in(v) for v in value.values()), set(value))
    if isinstance(value, list):
        return set().union(*(_strings_in(v) for v in value))
    return set()


@given(st.text(), st.text())
def test_query_hash_is_stable_and_distinguishes_queries(a: str, b: str) -> None:
    assert query_hash(a, KEY) == query_hash(a, KEY)
    assert len(query_hash(a, KEY)) == 32
    assert int(query_hash(a, KEY), 16) >= 0
    if a != b:
        assert query_hash(a, KEY) != query_hash(b, KEY)


def test_query_hash_depends_on_the_key() -> None:
    assert query_hash("weather", new_query_key()) != query_hash("weather", new_query_key())


def test_query_hash_is_hmac_sha256_truncated_to_16_bytes() -> None:
    import hashlib
    import hmac

    expected = hmac.new(KEY, b"weather", hashlib.sha256).hexdigest()[:32]
    assert query_hash("weather", KEY) == expected


def test_short_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="at least 16 bytes"):
        query_hash("weather", b"short")

"""What the shared stores write to Redis reads back as written, and what they cannot read
with certainty (another version's record, garbage) reads as nothing, never as a wrong state."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("coredis", reason="the Redis stores need the redis extra (coredis)")

from toolroute._core.outcome import Outcome
from toolroute._core.stores import SessionState
from toolroute._routing.questions import RoutingOutcome
from toolroute._stores.redis.codec import AttrsCodec
from toolroute._stores.redis.sessions import ROUTING_PER_SESSION, _decode, _encode

names = st.text(min_size=1, max_size=12)
states = st.builds(
    SessionState,
    idle_steps=st.integers(0, 1000),
    activated=st.lists(names, max_size=5).map(tuple),
    forced_sets=st.lists(names, max_size=5).map(tuple),
    sticky_sets=st.dictionaries(names, st.integers(1, 9), max_size=4),
    sticky_servers=st.dictionaries(names, st.integers(1, 9), max_size=4),
)
ids = st.lists(names, max_size=4).map(tuple)
outcomes = st.builds(
    RoutingOutcome,
    selected=ids,
    excluded=ids,
    excluded_tools=ids,
    strategy=st.sampled_from(["none", "embedding", "decision", "generative"]),
    outcome=st.sampled_from(list(Outcome)),
    reason=st.text(max_size=20),
    latency_ms=st.floats(0, 1e6, allow_nan=False),
    answered=st.integers(0, 100),
    hallucinated=ids,
    routable=st.integers(0, 100),
    model=st.none() | names,
    cache_hit=st.booleans(),
)


@given(states, st.integers(0, 10**9), st.dictionaries(names, names, max_size=40))
def test_a_session_record_reads_back_as_written(
    state: SessionState, version: int, routing: dict[str, str]
) -> None:
    later = time.time() + 3600
    entries = {q: (later, v) for q, v in routing.items()}
    decoded = _decode(_encode(state, version, entries).encode())
    assert decoded is not None
    read, read_version, read_routing = decoded
    fields = ("idle_steps", "activated", "forced_sets", "sticky_sets", "sticky_servers")
    assert all(getattr(read, f) == getattr(state, f) for f in fields)
    assert read_version == version
    # Only the newest entries are kept per session.
    assert list(read_routing) == list(entries)[-ROUTING_PER_SESSION:]


def test_expired_routing_entries_are_not_written() -> None:
    entries = {"old": (time.time() - 1, "{}"), "new": (time.time() + 60, "{}")}
    decoded = _decode(_encode(SessionState(), 1, entries).encode())
    assert decoded is not None
    assert list(decoded[2]) == ["new"]


@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_an_unreadable_session_record_reads_as_nothing(record: bytes) -> None:
    decoded = _decode(record)
    assert decoded is None or isinstance(decoded[0], SessionState)


@pytest.mark.parametrize(
    "record",
    [b"{}", b'{"v": 1}', b'{"v": "x", "idle_steps": 0}', b"[1, 2]", b'{"routing": 5}'],
)
def test_a_record_of_another_shape_reads_as_nothing(record: bytes) -> None:
    assert _decode(record) is None


@given(outcomes)
def test_a_routing_outcome_travels_between_nodes_unchanged(outcome: RoutingOutcome) -> None:
    codec = AttrsCodec(RoutingOutcome)
    text = codec.encode(outcome)
    assert text is not None
    assert codec.decode(text) == outcome


@pytest.mark.parametrize(
    "text", ["", "null", "{}", '{"selected": 5}', '{"selected": [], "extra": 1}', "[]"]
)
def test_a_routing_record_that_does_not_fit_is_a_miss(text: str) -> None:
    assert AttrsCodec(RoutingOutcome).decode(text) is None


def test_the_codec_writes_only_its_own_class() -> None:
    codec = AttrsCodec(RoutingOutcome)
    assert codec.encode({"selected": []}) is None
    with pytest.raises(TypeError, match="expected an attrs class"):
        AttrsCodec(dict)

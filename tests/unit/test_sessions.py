"""The session store stays within its bounds whatever the order of use."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute import ConfigError
from toolroute._stores.sessions import MemorySessionStore as SessionStore


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_state_persists_between_uses() -> None:
    store = SessionStore(clock=Clock())
    store.get("a").idle_steps = 2
    assert store.get("a").idle_steps == 2


def test_least_recently_used_goes_first() -> None:
    store = SessionStore(max_sessions=2, clock=Clock())
    store.get("a")
    store.get("b")
    store.get("a")
    store.get("c")
    assert "a" in store
    assert "b" not in store
    assert len(store) == 2


class _CountingMap(OrderedDict[str, object]):
    """An ordered map counting the entries its ``items()`` walks hand out."""

    visited = 0

    def items(self) -> Iterator[tuple[str, object]]:  # type: ignore[override]
        for item in super().items():
            self.visited += 1
            yield item


def test_a_full_store_evicts_without_walking_every_session() -> None:
    # At the bound every new session evicts one; walking all max_sessions entries for it
    # made each step of a busy server cost O(max_sessions).
    store = SessionStore(max_sessions=5_000, clock=Clock())
    for i in range(5_000):
        store.get(f"s{i}")
    counting = _CountingMap(store._sessions)
    store._sessions = counting  # type: ignore[assignment]
    store.get("new")
    assert "s0" not in store
    assert "s1" in store
    assert "new" in store
    assert len(store) == 5_000
    assert counting.visited < 10


def test_idle_sessions_expire() -> None:
    clock = Clock()
    store = SessionStore(idle_s=10, clock=clock)
    store.get("a").idle_steps = 1
    clock.now = 9.9
    assert store.get("a").idle_steps == 1
    clock.now = 20.0
    assert store.get("a").idle_steps == 0  # expired: fresh state


@pytest.mark.parametrize(
    ("options", "word"), [({"max_sessions": 0}, "max_sessions"), ({"idle_s": 0}, "idle_s")]
)
def test_bounds_must_be_positive(options: dict[str, float], word: str) -> None:
    with pytest.raises(ConfigError, match=word):
        SessionStore(**options)  # type: ignore[arg-type]


@given(
    st.lists(st.tuples(st.sampled_from("abcdefgh"), st.floats(0, 5)), max_size=60),
    st.integers(1, 5),
)
def test_never_more_than_max_and_never_stale(ops: list[tuple[str, float]], limit: int) -> None:
    clock = Clock()
    store = SessionStore(max_sessions=limit, idle_s=8, clock=clock)
    for session, step in ops:
        clock.now += step
        store.get(session)
        assert len(store) <= limit
        assert all(clock.now - s.state.last_seen < 8 for s in store._sessions.values())

"""Admission to a decision provider: the pure bookkeeping the decision actor carries out."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute._decisions.admission import Admission, Drop, Start, Ticket


def ticket(name: str, batches: int, window: int = 4, deadline: float = 10.0) -> Ticket[str]:
    return Ticket(name, batches=batches, window=window, deadline=deadline)


def started(actions: list[Start[str] | Drop[str]]) -> list[tuple[str, int]]:
    return [(a.ticket.job, a.index) for a in actions if isinstance(a, Start)]


def test_jobs_share_the_slots_round_robin_in_arrival_order() -> None:
    admission: Admission[str] = Admission(3)
    a, b = ticket("a", 4), ticket("b", 2)
    admission.enqueue(a)
    admission.enqueue(b)
    assert started(admission.plan(0.0, lambda _: True)) == [("a", 0), ("b", 0), ("a", 1)]
    admission.finish(a)
    assert started(admission.plan(0.0, lambda _: True)) == [("b", 1)]
    assert admission.busy == 3


def test_a_job_never_has_more_than_its_window_in_flight() -> None:
    admission: Admission[str] = Admission(10)
    job = ticket("a", 5, window=2)
    admission.enqueue(job)
    assert started(admission.plan(0.0, lambda _: True)) == [("a", 0), ("a", 1)]
    admission.finish(job)
    assert started(admission.plan(0.0, lambda _: True)) == [("a", 2)]


def test_a_job_past_its_deadline_is_dropped_before_it_starts() -> None:
    admission: Admission[str] = Admission(1)
    first, late = ticket("first", 1), ticket("late", 1, deadline=5.0)
    admission.enqueue(first)
    admission.enqueue(late)
    assert started(admission.plan(0.0, lambda _: True)) == [("first", 0)]
    admission.finish(first)
    actions = admission.plan(5.0, lambda _: True)
    assert actions == [Drop(late, "deadline")]
    assert late.closed
    assert late.started == 0
    assert admission.idle


def test_a_job_whose_caller_has_gone_is_dropped_and_the_next_starts() -> None:
    admission: Admission[str] = Admission(1)
    gone, kept = ticket("gone", 3), ticket("kept", 1)
    admission.enqueue(gone)
    admission.enqueue(kept)
    actions = admission.plan(0.0, lambda job: job != "gone")
    assert actions == [Drop(gone, "caller gone"), Start(kept, 0)]


def test_a_closed_job_leaves_the_queue_without_starting() -> None:
    admission: Admission[str] = Admission(1)
    busy, answered = ticket("busy", 1), ticket("answered", 2)
    admission.enqueue(busy)
    admission.enqueue(answered)
    admission.plan(0.0, lambda _: True)
    admission.close(answered)
    admission.finish(busy)
    assert admission.plan(0.0, lambda _: True) == []
    assert admission.idle


def test_finish_without_a_batch_in_flight_is_refused() -> None:
    admission: Admission[str] = Admission(1)
    with pytest.raises(ValueError, match="without a batch in flight"):
        admission.finish(ticket("a", 1))
    with pytest.raises(ValueError, match="slots must be at least 1"):
        Admission(0)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5), st.data())
def test_admission_invariants_under_random_operations(slots: int, data: st.DataObject) -> None:
    """Whatever arrives, finishes, expires or is abandoned: never more than ``slots`` in
    flight, never past a job's window, batches of a job start once each and in order, a dead
    job never starts, and no free slot is left idle while a live job could use it."""
    admission: Admission[str] = Admission(slots)
    tickets: list[Ticket[str]] = []
    gone: set[str] = set()
    seen: dict[str, list[int]] = {}
    now = 0.0
    for step in range(data.draw(st.integers(1, 40))):
        op = data.draw(st.sampled_from(["arrive", "finish", "tick", "leave", "close"]))
        if op == "arrive":
            new = ticket(
                f"j{step}",
                data.draw(st.integers(0, 6)),
                window=data.draw(st.integers(1, 4)),
                deadline=now + data.draw(st.floats(0.0, 5.0)),
            )
            tickets.append(new)
            admission.enqueue(new)
        elif op == "finish":
            running = [t for t in tickets if t.running]
            if running:
                admission.finish(data.draw(st.sampled_from(running)))
        elif op == "tick":
            now += data.draw(st.floats(0.0, 2.0))
        elif op == "leave" and tickets:
            gone.add(data.draw(st.sampled_from(tickets)).job)
        elif op == "close" and tickets:
            admission.close(data.draw(st.sampled_from(tickets)))
        for action in admission.plan(now, lambda job: job not in gone):
            if isinstance(action, Start):
                job = action.ticket
                assert now < job.deadline
                assert job.job not in gone
                seen.setdefault(job.job, []).append(action.index)
            else:
                assert action.ticket.closed
        assert admission.busy == sum(t.running for t in tickets) <= slots
        assert all(t.running <= t.window for t in tickets)
        if admission.busy < slots:
            # Every job that could use a slot now is one that plan() would have dropped.
            assert not [
                t for t in tickets if t.wants_slot and now < t.deadline and t.job not in gone
            ]
    for name, indices in seen.items():
        assert indices == list(range(len(indices))), name

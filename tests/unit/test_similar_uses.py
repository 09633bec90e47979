"""What routing learns from use: the servers similar learned requests used (no trio)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from toolroute import RoutingConfig, Server
from toolroute._core.decide.limits import estimate_state_tokens
from toolroute._core.routing.usage import SimilarUses, UseLog
from toolroute._core.stores import LearnedExample
from toolroute._routing.questions import Candidate, routing_parts, routing_request
from toolroute.decisions import DecisionLimits

SERVERS = [
    Server("files", "read and write files", ("files__read", "files__write")),
    Server("web", "search the web", ("web__search",)),
    Server("mail", "send email", ("mail__send",)),
]


def unit(*values: float) -> np.ndarray:
    v = np.array(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def used(digest: str, vector: np.ndarray, source: str = "use") -> LearnedExample:
    return LearnedExample(digest=digest, vector=vector, source=source)


def test_a_book_without_uses_has_no_log() -> None:
    assert UseLog.from_book({}) is None
    assert UseLog.from_book({"mail__send": ()}) is None
    assert UseLog.from_book({"mail__send": (used("a", unit(1, 0), "example"),)}) is None


def test_a_request_counts_once_per_server_among_the_nearest() -> None:
    near, far = unit(1, 0), unit(0, 1)
    book = {
        # One request used two tools of one server: it counts once for "files".
        "files__read": (used("r1", near),),
        "files__write": (used("r1", near), used("r2", far)),
        "web__search": (used("r3", near), used("ex", near, "example")),
    }
    log = UseLog.from_book(book)
    assert log is not None
    assert log.dim == 2
    assert len(log.tools) == 3  # r1, r2, r3; the example is not a use
    every = log.similar(unit(1, 0.1), SERVERS)
    assert every == SimilarUses(requests=3, counts={"files": 2, "web": 1})
    nearest = log.similar(unit(1, 0.1), SERVERS, limit=2)
    assert nearest == SimilarUses(requests=2, counts={"files": 1, "web": 1})


def test_tools_of_servers_not_routed_are_not_counted() -> None:
    log = UseLog.from_book({"gone__tool": (used("r", unit(1, 0)),)})
    assert log is not None
    assert log.similar(unit(1, 0), SERVERS) == SimilarUses(requests=1, counts={})


def test_the_state_carries_counts_only_when_given() -> None:
    entries = [Candidate(s, s.tool_ids) for s in SERVERS]
    plain = routing_request("send the file", entries, RoutingConfig())
    assert "similar_requests" not in plain.state
    assert all("similar_uses" not in e for e in plain.state["available_servers"])
    similar = SimilarUses(requests=20, counts={"files": 7})
    counted = routing_request("send the file", entries, RoutingConfig(), similar=similar)
    assert counted.state["similar_requests"] == 20
    assert [e["similar_uses"] for e in counted.state["available_servers"]] == [7, 0, 0]


def test_split_parts_each_carry_the_counts() -> None:
    entries = [Candidate(Server(f"s{i}", "a server " * 20), ()) for i in range(30)]
    similar = SimilarUses(requests=20, counts={"s3": 4})
    limits = DecisionLimits(max_state_tokens=400)
    parts = routing_parts("a request", entries, RoutingConfig(), limits, similar=similar)
    assert len(parts) > 1
    for part in parts:
        assert part.state["similar_requests"] == 20
        assert estimate_state_tokens(part.state, limits) <= 400
    listed = [e for part in parts for e in part.state["available_servers"]]
    assert [e["similar_uses"] for e in listed] == [4 if i == 3 else 0 for i in range(30)]


@given(
    requests=st.lists(
        st.tuples(
            st.lists(st.floats(-1, 1), min_size=3, max_size=3).filter(
                lambda v: np.linalg.norm(v) > 0.1
            ),
            st.sets(st.sampled_from(["files__read", "files__write", "web__search", "x"])),
        ),
        min_size=1,
        max_size=30,
    ),
    limit=st.integers(1, 40),
)
def test_counts_never_exceed_the_requests_looked_at(
    requests: list[tuple[list[float], set[str]]], limit: int
) -> None:
    book: dict[str, tuple[LearnedExample, ...]] = {}
    for n, (vector, tools) in enumerate(requests):
        for tool in tools:
            book[tool] = (*book.get(tool, ()), used(str(n), unit(*vector)))
    log = UseLog.from_book(book)
    if log is None:
        assert not any(tools for _, tools in requests)
        return
    found = log.similar(unit(1, 0, 0), SERVERS, limit)
    assert found.requests == min(limit, len(log.tools))
    assert all(0 < count <= found.requests for count in found.counts.values())
    assert set(found.counts) <= {"files", "web"}

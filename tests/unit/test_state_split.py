"""Token estimates counted in C and the linear state split: the same figures as the
character loop and the grow-and-re-price split they replace, at a fraction of the cost."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute import RoutingConfig, Server
from toolroute._core.decide.limits import (
    DecisionLimits,
    estimate_state_tokens,
    estimate_tokens,
    fitting_runs,
)
from toolroute._core.decide.types import JSON
from toolroute._routing.questions import Candidate, routing_parts, routing_request
from toolroute.providers import LayaDecider

_SYMBOLS = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def reference_estimate(state: JSON, limits: DecisionLimits) -> int:
    """The character-by-character estimate, as it was written first."""
    is_string = isinstance(state, str)
    text = state if isinstance(state, str) else json.dumps(state, ensure_ascii=False)
    rated = (
        limits.non_ascii_rate,
        limits.structured_non_ascii_rate,
        limits.digit_rate,
        limits.symbol_rate,
        limits.astral_rate,
    )
    if all(rate is None for rate in rated):
        return estimate_tokens(text)
    escapes = astrals = non_ascii = digits = symbols = 0
    rest: list[str] = []
    for char in text:
        code = ord(char)
        if code > 0x7F and not is_string and limits.structured_non_ascii_rate is not None:
            escapes += 2 if code > 0xFFFF else 1
        elif code > 0xFFFF and limits.astral_rate is not None:
            astrals += 1
        elif code > 0x7F:
            non_ascii += 1
        elif limits.digit_rate is not None and "0" <= char <= "9":
            digits += 1
        elif limits.symbol_rate is not None and char in _SYMBOLS:
            symbols += 1
        else:
            rest.append(char)
    return (
        estimate_tokens("".join(rest))
        + math.ceil(digits * (limits.digit_rate or 0.0))
        + math.ceil(symbols * (limits.symbol_rate or 0.0))
        + math.ceil(astrals * (limits.astral_rate or 0.0))
        + math.ceil(non_ascii * (limits.non_ascii_rate or 0.25))
        + math.ceil(escapes * (limits.structured_non_ascii_rate or 0.0))
    )


def reference_parts(
    query: str, entries: list[Candidate], config: RoutingConfig, limits: DecisionLimits
) -> list[list[str]]:
    """The split that re-priced every grown run (quadratic), as server ids per part."""
    window = limits.max_state_tokens
    assert window is not None
    whole = routing_request(query, entries, config)
    if estimate_state_tokens(whole.state, limits) <= window:
        return [[e.server.id for e in entries]]
    parts: list[list[str]] = []
    start = 0
    while start < len(entries):
        end = start + 1
        while end < len(entries):
            grown = routing_request(query, entries[start : end + 1], config, first=start)
            if estimate_state_tokens(grown.state, limits) > window:
                break
            end += 1
        parts.append([e.server.id for e in entries[start:end]])
        start = end
    return parts


rates = st.one_of(st.none(), st.floats(0.05, 3.0))
limits_strategy = st.builds(
    DecisionLimits,
    non_ascii_rate=rates,
    structured_non_ascii_rate=rates,
    digit_rate=rates,
    symbol_rate=rates,
    astral_rate=rates,
)
texts = st.text(
    st.one_of(
        st.characters(max_codepoint=0x7F),
        st.characters(min_codepoint=0x80, max_codepoint=0xFFFF),
        st.characters(min_codepoint=0x10000),
        st.sampled_from("0123456789!{}[]\"',.:;"),
    ),
    max_size=80,
)
json_states: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), texts),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(json_states, limits_strategy)
def test_the_estimate_equals_the_character_loop(state: Any, limits: DecisionLimits) -> None:
    assert estimate_state_tokens(state, limits) == reference_estimate(state, limits)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(texts, texts), min_size=0, max_size=40),
    texts,
    st.integers(20, 400),
    limits_strategy,
)
def test_routing_parts_equal_the_quadratic_split(
    rows: list[tuple[str, str]], query: str, window: int, limits: DecisionLimits
) -> None:
    limits = DecisionLimits(
        max_state_tokens=window,
        non_ascii_rate=limits.non_ascii_rate,
        structured_non_ascii_rate=limits.structured_non_ascii_rate,
        digit_rate=limits.digit_rate,
        symbol_rate=limits.symbol_rate,
        astral_rate=limits.astral_rate,
    )
    entries = [
        Candidate(Server(f"s{i}{name}", description), ())
        for i, (name, description) in enumerate(rows)
    ]
    if not entries:
        return
    config = RoutingConfig()
    parts = routing_parts(query or "q", entries, config, limits)
    found = [[s["name"] for s in p.state["available_servers"]] for p in parts]  # type: ignore[index]
    assert found == reference_parts(query or "q", entries, config, limits)


def test_fitting_runs_keeps_an_oversized_piece_alone() -> None:
    limits = DecisionLimits()
    runs = fitting_runs(
        ["x" * 10, "y" * 400, "z" * 10, "w" * 10],
        head="[",
        tail="]",
        separator=", ",
        window=20,
        limits=limits,
    )
    assert runs == [range(0, 1), range(1, 2), range(2, 4)]


def test_splitting_200_servers_for_laya_keeps_every_part_in_its_window() -> None:
    entries = [
        Candidate(Server(f"server_{i}", f"Reads and writes the records of region {i}."), ())
        for i in range(200)
    ]
    limits = LayaDecider.limits.for_model("typed-decisions")
    parts = routing_parts(
        "open an issue", entries, RoutingConfig(), LayaDecider.limits, "typed-decisions"
    )
    assert len(parts) > 1
    assert all(estimate_state_tokens(p.state, limits) <= 768 for p in parts)
    asked = [k for p in parts for k in p.questions]
    assert asked == [f"server__{i}" for i in range(200)]

"""Learned evidence in recall: the lift, its guard, the bound per tool, recorded calls."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from toolroute import Catalog, CatalogError, ConfigError, Tool, ToolIndex
from toolroute._core.recall.fusion import fuse
from toolroute._core.recall.index import RecallIndex
from toolroute._core.recall.learned import (
    calls_since_request,
    learned_scores,
    merged,
    request_digest,
)
from toolroute._core.select.conversation import read_turns
from toolroute._core.stores import LearnedExample
from toolroute.providers import HashingEmbedder

DIM = 8

floats = st.floats(-1.0, 1.0, width=32) | st.sampled_from([np.nan, np.inf, 0.0])


def unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    return np.where(norms > 0, rows / np.where(norms > 0, norms, 1), 0).astype(np.float32)


def entry(digest: str, source: str = "use") -> LearnedExample:
    return LearnedExample(digest=digest, vector=np.ones(DIM, np.float32), source=source)


@given(
    tools=hnp.arrays(np.float32, (6, DIM), elements=floats),
    examples=hnp.arrays(np.float32, (6, 3, DIM), elements=floats),
    with_evidence=st.lists(st.booleans(), min_size=6, max_size=6),
    query=hnp.arrays(np.float32, DIM, elements=st.floats(-1, 1, width=32)),
    coverage=hnp.arrays(np.float32, 6, elements=st.floats(0, 1, width=32)),
    names=hnp.arrays(np.float32, 6, elements=st.floats(0, 1, width=32)),
)
def test_learned_evidence_never_lifts_a_tool_without_evidence_past_a_word_matching_one(
    tools: np.ndarray,
    examples: np.ndarray,
    with_evidence: list[bool],
    query: np.ndarray,
    coverage: np.ndarray,
    names: np.ndarray,
) -> None:
    # NaN, infinite and zero rows included: a broken vector is no evidence, never a lift.
    if not np.linalg.norm(query):
        query = np.ones(DIM, np.float32)
    query = unit(query)
    ids = [f"t{i}" for i in range(6)]
    index = RecallIndex.build(Catalog.from_plain([{"name": i} for i in ids])).with_vectors(tools)
    assert index.vectors is not None
    evidence = {ids[i]: examples[i] for i in range(6) if with_evidence[i]}
    scorer = learned_scores(ids, index.vectors.matrix, evidence)
    cosine = index.vectors.scores(query)
    lifted = cosine if scorer is None else scorer.semantic(cosine, query)
    before, after = fuse(cosine, coverage, names), fuse(lifted, coverage, names)
    has = np.zeros(6, dtype=bool)
    if scorer is not None:
        has[scorer.rows] = True
    # A tool without evidence keeps its score exactly; a tool with evidence never loses.
    assert np.array_equal(after[~has], before[~has])
    finite = np.isfinite(before) & has
    assert (after[finite] >= before[finite]).all()
    # So no tool without evidence passes one that matches the request's words.
    for t in np.flatnonzero(~has):
        for w in np.flatnonzero(coverage > 0):
            if before[t] < before[w]:
                assert after[t] < after[w]


def test_a_tool_whose_examples_match_the_request_rises_to_the_top() -> None:
    tools = unit(np.eye(3, DIM, dtype=np.float32))
    query = unit(np.array([0.6, 0.1, 0, 0.8, 0, 0, 0, 0], np.float32))
    example = unit(np.array([0.0, 0.1, 0, 1.0, 0, 0, 0, 0], np.float32))
    index = RecallIndex.build(Catalog.from_plain([{"name": n} for n in "abc"])).with_vectors(tools)
    assert index.rank("", query, 3, strategy="semantic").tool_ids == ()  # empty: skipped
    assert index.rank("q", query, 1, strategy="semantic").tool_ids == ("a",)
    learned = index.with_learned(learned_scores(index.ids, tools, {"b": example[None, :]}))
    assert learned.rank("q", query, 1, strategy="semantic").tool_ids == ("b",)
    # New tool vectors drop evidence aligned with the old ones.
    assert learned.with_vectors(tools).learned is None


def test_evidence_of_another_width_or_an_unknown_tool_is_ignored() -> None:
    tools = unit(np.eye(2, DIM, dtype=np.float32))
    assert learned_scores(["a", "b"], tools, {"a": np.ones((2, DIM + 1), np.float32)}) is None
    assert learned_scores(["a", "b"], tools, {"gone": np.ones((1, DIM), np.float32)}) is None
    assert learned_scores(["a", "b"], tools, {"a": np.zeros((3, DIM), np.float32)}) is None


@given(
    st.lists(st.tuples(st.integers(0, 40), st.sampled_from(["use", "example"])), max_size=120),
    st.integers(1, 16),
)
def test_merged_evidence_is_bounded_and_keeps_one_entry_per_request(
    added: list[tuple[int, str]], bound: int
) -> None:
    kept: tuple[LearnedExample, ...] = ()
    for number, source in added:
        kept = merged(kept, [entry(str(number), source)], bound)
        assert len(kept) <= bound
        assert len({e.digest for e in kept}) == len(kept)
        # The newest is kept, unless it was learned and examples fill every place.
        examples_fill = source == "use" and all(e.source == "example" for e in kept)
        assert kept[-1].digest == str(number) or examples_fill


def test_past_the_bound_learned_entries_go_before_examples() -> None:
    kept = merged([entry("e1", "example"), entry("u1"), entry("e2", "example")], [entry("u2")], 3)
    assert [e.digest for e in kept] == ["e1", "e2", "u2"]
    kept = merged([entry("e1", "example"), entry("e2", "example")], [entry("e3", "example")], 2)
    assert [e.digest for e in kept] == ["e2", "e3"]


def test_a_request_is_identified_by_a_hash_not_its_text() -> None:
    digest = request_digest("book a  flight\nto Paris")
    assert digest == request_digest("book a flight to Paris")
    assert "Paris" not in digest
    assert len(digest) == 64


def test_the_calls_since_the_latest_request_are_what_the_agent_used() -> None:
    messages = [
        {"role": "user", "content": "what is the weather in Paris"},
        {"role": "assistant", "content": None, "tool_calls": [_call("get_weather")]},
        {"role": "tool", "tool_call_id": "1", "content": "sunny"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("send_email"), _call("get_weather")],
        },
    ]
    assert calls_since_request(read_turns(messages)) == (
        "what is the weather in Paris",
        ("get_weather", "send_email"),
    )
    assert calls_since_request(read_turns(messages[:1])) == ("", ())
    later = [*messages, {"role": "user", "content": "thanks, now read my notes"}]
    assert calls_since_request(read_turns(later)) == ("", ())


def _call(name: str) -> dict[str, object]:
    return {"id": "1", "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_tool_examples_are_keyword_only_strings_kept_in_order_without_repeats() -> None:
    tool = Tool("a", "a", examples=["book a flight", " book a flight ", "", "fly to Rome"])
    assert tool.examples == ("book a flight", "fly to Rome")
    assert Tool("b", "b").examples == ()
    with pytest.raises(TypeError):
        Tool("c", "c", "", {}, None, {}, None, ("x",))  # type: ignore[call-arg,misc]
    with pytest.raises(ConfigError, match="not the string 'fly'"):
        Tool("d", "d", examples="fly")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="an item of type int"):
        Tool("e", "e", examples=["fly", 3])  # type: ignore[list-item]


def test_a_tool_index_ranks_with_the_catalogues_example_requests() -> None:
    tools = [
        {"name": "alpha", "description": "alpha"},
        {"name": "beta", "description": "beta", "examples": ["zebra crossing lights"]},
    ]
    embedder = HashingEmbedder(dim=64)
    plain = ToolIndex(
        Catalog.from_plain([*tools[:1], {"name": "beta", "description": "beta"}]),
        embedder=embedder,
        cache=None,
    )
    taught = ToolIndex(Catalog.from_plain(tools), embedder=embedder, cache=None)
    assert plain.recall.learned is None
    assert taught.recall.learned is not None
    before = plain.select("zebra crossing", strategy="semantic", adaptive=False)
    after = taught.select("zebra crossing", strategy="semantic", adaptive=False)
    assert after.tool_ids[0] == "beta"
    assert dict(zip(after.tool_ids, after.scores, strict=True))["beta"] > dict(
        zip(before.tool_ids, before.scores, strict=True)
    ).get("beta", -1.0)


@pytest.mark.parametrize(
    "document",
    [
        [{"type": "function", "function": {"name": "fly", "examples": ["book a flight"]}}],
        [{"name": "fly", "input_schema": {"type": "object"}, "examples": ["book a flight"]}],
        {"function_declarations": [{"name": "fly", "examples": ["book a flight"]}]},
        {"tools": [{"name": "fly", "inputSchema": {}, "_meta": {"examples": ["book a flight"]}}]},
        {"servers": [{"name": "air", "tools": [{"name": "fly", "examples": ["book a flight"]}]}]},
        [{"name": "fly", "examples": ["book a flight"], "_meta": {"examples": ["fly me out"]}}],
    ],
    ids=["openai", "anthropic", "gemini", "mcp-meta", "mcp-servers", "plain-both"],
)
def test_every_reader_takes_example_requests(document: object) -> None:
    (tool,) = Catalog.from_data(document).tools
    assert tool.examples[0] == "book a flight"


def test_anthropic_input_examples_are_arguments_not_requests() -> None:
    document = [{"name": "fly", "input_schema": {}, "input_examples": [{"to": "Rome"}]}]
    assert Catalog.from_data(document).tools[0].examples == ()


@pytest.mark.parametrize(
    ("tool", "field"),
    [
        ({"name": "fly", "examples": "book a flight"}, "'examples'"),
        ({"name": "fly", "_meta": {"examples": [1]}}, "'_meta.examples'"),
    ],
)
def test_malformed_examples_are_a_catalog_error_naming_the_tool_and_field(
    tool: dict[str, object], field: str
) -> None:
    with pytest.raises(CatalogError, match=rf"tool 0 \('fly'\): field {field}"):
        Catalog.from_plain([tool])

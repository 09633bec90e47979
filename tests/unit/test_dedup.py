"""Tool dedup (engine/_dedup.py): NeuroLink's edge cases, the providers map, and join == naive."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute._core.catalog.catalog import Catalog, Tool
from toolroute._core.catalog.dedup import (
    DedupResult,
    Removed,
    _leaders_join,
    _leaders_naive,
    dedupe_tools,
    jaccard,
    signature,
    signature_tokens,
)
from toolroute._core.errors import CatalogError, ConfigError
from toolroute._core.text import embedding_text
from toolroute.testing import ScriptedEmbedder

QUERY = {"type": "object", "properties": {"query": {"type": "string"}}}


def tool(name: str, description: str = "", parameters: Mapping[str, Any] | None = None) -> Tool:
    return Tool(id=name, name=name, description=description, parameters=parameters or {})


def ids(result: DedupResult) -> list[str]:
    return [t.id for t in result.tools]


# Signature --------------------------------------------------------------------------------


def test_signature_matches_the_upstream_example() -> None:
    assert signature(tool("search_v1", "Search for documents", QUERY)) == (
        "search_v1|search for documents|query:string"
    )


def test_signature_ignores_parameter_key_order() -> None:
    a = {"properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}
    b = {"properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    assert signature(tool("t", "x", a)) == signature(tool("t", "x", b)) == "t|x|a:string,b:integer"


def test_signature_differs_on_name_description_or_parameters() -> None:
    base = signature(tool("t", "find things", QUERY))
    assert signature(tool("u", "find things", QUERY)) != base
    assert signature(tool("t", "find other things", QUERY)) != base
    assert signature(tool("t", "find things", {"properties": {"q": {"type": "string"}}})) != base


def test_signature_normalises_description_whitespace_and_case_but_keeps_punctuation() -> None:
    assert signature(tool("t", "  Search\n\tFOR   documents. ")) == "t|search for documents.|"
    assert signature(tool("t", "documents.")) != signature(tool("t", "documents"))


def test_signature_handles_missing_schema_and_reads_the_json_schema_wrapper() -> None:
    assert signature(tool("t", "d")) == "t|d|"
    wrapped = {"jsonSchema": QUERY}
    assert signature(tool("t", "d", wrapped)) == signature(tool("t", "d", QUERY))


def test_signature_property_without_string_type_is_the_bare_name() -> None:
    params = {"properties": {"a": {"type": ["string", "null"]}, "b": True, "c": {}}}
    assert signature(tool("t", "", params)) == "t||a,b,c"


def test_tokens_split_on_whitespace_pipe_and_comma_but_not_underscore() -> None:
    tokens = signature_tokens(tool("get_user", "Get the user, by id", QUERY))
    assert tokens == {"get_user", "get", "the", "user", "by", "id", "query:string"}


def test_content_mode_drops_the_name() -> None:
    assert signature(tool("t", "Find it", QUERY), mode="content") == "find it|query:string"


def test_jaccard_of_empty_sets() -> None:
    assert jaccard(frozenset(), frozenset()) == 1.0
    assert jaccard(frozenset({"a"}), frozenset()) == 0.0


# Disabled and degenerate inputs ------------------------------------------------------------


@pytest.mark.parametrize("container", [list, tuple, Catalog])
def test_disabled_returns_the_same_object(container: Any) -> None:
    tools = container([tool("a", "same"), tool("b", "same")])
    result = dedupe_tools(tools, enabled=False, threshold=0.0)
    assert result.tools is tools
    assert result.removed == ()
    assert dict(result.providers) == {}


@pytest.mark.parametrize("tools", [(), (tool("only", "one"),)])
def test_empty_and_single_tool_inputs_are_no_ops(tools: tuple[Tool, ...]) -> None:
    result = dedupe_tools(tools, threshold=0.0)
    assert result.tools is tools
    assert result.removed == ()


def test_catalog_with_nothing_removed_comes_back_as_the_same_object() -> None:
    catalog = Catalog([tool("a", "read a file"), tool("b", "send an email")])
    assert dedupe_tools(catalog).tools is catalog


def test_list_input_comes_back_as_a_tuple() -> None:
    tools = [tool("a", "read a file"), tool("b", "send an email")]
    result = dedupe_tools(tools)
    assert result.tools == tuple(tools)


# Thresholds and collapse -------------------------------------------------------------------


@pytest.mark.parametrize("threshold", [0.5, 0.6, 0.7])
def test_same_description_other_name_collapses_into_the_first(threshold: float) -> None:
    # 7 shared tokens out of 9 (the names differ): Jaccard 7/9.
    first = tool("search_v1", "Search for documents in the index", QUERY)
    second = tool("search_v2", "Search for documents in the index", QUERY)
    result = dedupe_tools([first, second], threshold=threshold)
    assert result.tools == (first,)
    assert result.removed == (Removed(name="search_v2", duplicate_of="search_v1", similarity=7 / 9),)


def test_unrelated_tools_are_kept_at_the_default_threshold() -> None:
    tools = [tool("read_file", "Read a file", QUERY), tool("send_mail", "Send an email")]
    assert dedupe_tools(tools).removed == ()


def test_threshold_one_keeps_tools_whose_names_differ() -> None:
    tools = [tool("a", "same words here", QUERY), tool("b", "same words here", QUERY)]
    assert dedupe_tools(tools, threshold=1.0).removed == ()


def test_threshold_one_collapses_identical_signatures() -> None:
    twins = [
        Tool(id="s1__fetch", name="fetch", description="Fetch a URL", server="s1"),
        Tool(id="s2__fetch", name="fetch", description="fetch  a url", server="s2"),
    ]
    result = dedupe_tools(twins, threshold=1.0)
    assert result.removed == (Removed(name="s2__fetch", duplicate_of="s1__fetch", similarity=1.0),)


def test_similarity_equal_to_the_threshold_collapses() -> None:
    # {"a", "x", "y", "z"} vs {"b", "x", "y", "z"}: 3 / 5 = 0.6 exactly.
    tools = [tool("a", "x y z"), tool("b", "x y z")]
    assert jaccard(signature_tokens(tools[0]), signature_tokens(tools[1])) == 0.6
    assert len(dedupe_tools(tools, threshold=0.6).removed) == 1
    assert dedupe_tools(tools, threshold=0.6000001).removed == ()


def test_threshold_below_zero_clamps_to_zero_and_collapses_everything() -> None:
    tools = [tool("a", "one"), tool("b", "two"), tool("c", "")]
    result = dedupe_tools(tools, threshold=-1)
    assert ids(result) == ["a"]
    assert [r.duplicate_of for r in result.removed] == ["a", "a"]


def test_threshold_above_one_clamps_to_one() -> None:
    tools = [tool("a", "same"), tool("a2", "same"), tool("a", "same")]
    result = dedupe_tools(tools, threshold=2)
    assert result.removed == (Removed(name="a", duplicate_of="a", similarity=1.0),)
    assert len(result.tools) == 2


def test_nan_threshold_collapses_nothing() -> None:
    tools = [tool("a", "same"), tool("a", "same")]
    assert dedupe_tools(tools, threshold=float("nan")).removed == ()


def test_none_threshold_means_the_default() -> None:
    tools = [tool("a", "same"), tool("b", "same")]  # Jaccard 1/3
    assert dedupe_tools(tools, threshold=None).removed == ()


def test_three_identical_tools_collapse_into_the_first() -> None:
    tools = [tool(name, "identical description of a tool", QUERY) for name in ("x", "y", "z")]
    result = dedupe_tools(tools, threshold=0.6)
    assert ids(result) == ["x"]
    assert [(r.name, r.duplicate_of) for r in result.removed] == [("y", "x"), ("z", "x")]


def test_leader_clustering_never_chains() -> None:
    # Same name "n": A~B 4/6, B~C 4/6, A vs C 3/7. B joins A; C is compared only with the
    # kept A, so it stays even though it is similar to the removed B.
    a = Tool(id="A", name="n", description="p q r s")
    b = Tool(id="B", name="n", description="q r s t")
    c = Tool(id="C", name="n", description="r s t u")
    threshold = 0.6
    assert jaccard(signature_tokens(a), signature_tokens(b)) >= threshold
    assert jaccard(signature_tokens(b), signature_tokens(c)) >= threshold
    assert jaccard(signature_tokens(a), signature_tokens(c)) < threshold
    result = dedupe_tools([a, b, c], threshold=threshold)
    assert ids(result) == ["A", "C"]
    assert [(r.name, r.duplicate_of) for r in result.removed] == [("B", "A")]


def test_content_mode_collapses_tools_that_differ_only_in_name() -> None:
    tools = [tool("search_v1", "Search docs", QUERY), tool("search_v2", "Search docs", QUERY)]
    assert dedupe_tools(tools, threshold=1.0).removed == ()
    result = dedupe_tools(tools, threshold=1.0, mode="content")
    assert result.removed == (Removed(name="search_v2", duplicate_of="search_v1", similarity=1.0),)


def test_unknown_mode_raises() -> None:
    with pytest.raises(ConfigError, match="embedding"):
        dedupe_tools([], mode="embedding")  # type: ignore[arg-type]


# Catalogues and providers ------------------------------------------------------------------


def test_providers_map_each_leader_to_the_tools_it_stands_for() -> None:
    catalog = Catalog(
        [
            Tool(id="s1__fetch", name="fetch", description="Fetch a URL", server="s1"),
            Tool(id="s1__read", name="read", description="Read a file", server="s1"),
            Tool(id="s2__fetch", name="fetch", description="Fetch a URL", server="s2"),
            Tool(id="s3__fetch", name="fetch", description="Fetch a URL", server="s3"),
        ],
        server_descriptions={"s1": "first", "s2": "second"},
    )
    result = dedupe_tools(catalog, threshold=1.0)
    assert isinstance(result.tools, Catalog)
    assert result.tools.ids == ("s1__fetch", "s1__read")
    assert result.tools.servers[0].description == "first"
    assert dict(result.providers) == {"s1__fetch": ("s1__fetch", "s2__fetch", "s3__fetch")}
    with pytest.raises(TypeError):
        result.providers["x"] = ()  # type: ignore[index]


# Fail-open ---------------------------------------------------------------------------------


class ExplodingSchema(Mapping[str, Any]):
    """A schema that raises when dedup reads it (and only then)."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("boom")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("boom")

    def __len__(self) -> int:
        return 1


@pytest.mark.parametrize("container", [list, Catalog])
def test_an_error_inside_dedup_returns_the_original_set(container: Any) -> None:
    # Three tools, so the failure happens past the single-tool fast path, in the real pass.
    tools = container([tool("a", "same"), tool("b", "same"), tool("c", "x", ExplodingSchema())])
    result = dedupe_tools(tools, threshold=0.0)
    assert result.tools is tools
    assert result.removed == ()


def test_garbage_entries_are_a_clear_error_not_a_fail_open() -> None:
    # A caller's mistake: fail-open would hide it behind "nothing was a duplicate".
    tools = [tool("a", "same"), object(), tool("b", "same")]
    with pytest.raises(CatalogError, match=r"tool 1: expected a Tool like tool 0, got object"):
        dedupe_tools(tools, threshold=0.0)  # type: ignore[arg-type]


# Plain tool definitions --------------------------------------------------------------------

TWINS = [
    ("search_v1", "Search for documents in the index"),
    ("search_v2", "Search for documents in the index"),
]


@pytest.mark.parametrize(
    "definitions",
    [
        [
            {"type": "function", "function": {"name": n, "description": d, "parameters": QUERY}}
            for n, d in TWINS
        ],
        [{"type": "function", "name": n, "description": d, "parameters": QUERY} for n, d in TWINS],
        [{"name": n, "description": d, "input_schema": QUERY} for n, d in TWINS],
        [
            {
                "functionDeclarations": [
                    {"name": n, "description": d, "parameters": QUERY} for n, d in TWINS
                ]
            }
        ],
        {"tools": [{"name": n, "description": d, "inputSchema": QUERY} for n, d in TWINS]},
        [{"name": n, "description": d, "parameters": QUERY} for n, d in TWINS],
    ],
    ids=["openai-chat", "openai-responses", "anthropic", "gemini", "mcp", "plain"],
)
def test_plain_tool_definitions_are_read_and_deduplicated(definitions: Any) -> None:
    result = dedupe_tools(definitions, threshold=0.7)
    assert result.removed == (Removed(name="search_v2", duplicate_of="search_v1", similarity=7 / 9),)
    assert isinstance(result.tools, Catalog)
    assert result.tools.ids == ("search_v1",)


def test_plain_definitions_with_nothing_removed_come_back_read() -> None:
    definitions = [
        {"name": "read_file", "description": "Read a file"},
        {"name": "send", "description": "Send mail"},
    ]
    for enabled in (True, False):
        result = dedupe_tools(definitions, enabled=enabled)
        assert isinstance(result.tools, Catalog)
        assert result.tools.ids == ("read_file", "send")


@pytest.mark.parametrize("enabled", [True, False])
def test_a_malformed_definition_is_a_catalog_error_even_when_disabled(enabled: bool) -> None:
    definitions = [{"name": "ok", "description": "fine"}, {"name": "bad", "description": 5}]
    with pytest.raises(
        CatalogError, match=r"tool 1 \('bad'\): field 'description' must be a string"
    ):
        dedupe_tools(definitions, enabled=enabled)


@pytest.mark.parametrize(("bad", "got"), [(5, "int"), ("search", "str"), (None, "NoneType")])
def test_something_other_than_tools_is_a_catalog_error(bad: object, got: str) -> None:
    with pytest.raises(
        CatalogError, match=rf"expected a Catalog, a list of Tool objects .* got {got}"
    ):
        dedupe_tools(bad)  # type: ignore[arg-type]


def test_a_one_shot_iterator_of_tools_is_read_once() -> None:
    first, second = tool("a", "same words here", QUERY), tool("b", "same words here", QUERY)
    result = dedupe_tools(iter([first, second]), threshold=0.5)
    assert result.tools == (first,)


# Properties --------------------------------------------------------------------------------

WORDS = [f"w{i}" for i in range(12)]


@st.composite
def near_duplicate_sets(draw: st.DrawFn) -> list[frozenset[str]]:
    """Token sets where most are small edits of a few seeds, plus a few empty ones."""
    seeds = draw(
        st.lists(st.frozensets(st.sampled_from(WORDS), max_size=10), min_size=1, max_size=4)
    )
    sets = []
    for _ in range(draw(st.integers(0, 25))):
        base = set(draw(st.sampled_from(seeds)))
        base -= draw(st.frozensets(st.sampled_from(WORDS), max_size=2))
        base |= draw(st.frozensets(st.sampled_from(WORDS), max_size=2))
        sets.append(frozenset(base))
    return sets


@given(near_duplicate_sets(), st.floats(0.5, 1.0))
def test_join_equals_the_naive_pass(sets: list[frozenset[str]], threshold: float) -> None:
    assert _leaders_join(sets, threshold) == _leaders_naive(sets, threshold)


@given(near_duplicate_sets(), st.sampled_from([0.5, 0.6, 2 / 3, 0.7, 0.75, 0.8, 0.9, 1.0]))
def test_join_equals_the_naive_pass_at_round_thresholds(
    sets: list[frozenset[str]], threshold: float
) -> None:
    # Round thresholds hit exact-equality similarities (3/5 = 0.6 …) that random floats miss.
    assert _leaders_join(sets, threshold) == _leaders_naive(sets, threshold)


@st.composite
def catalogues(draw: st.DrawFn) -> list[Tool]:
    names = ["a", "b", "c"]
    tools = []
    for i, tokens in enumerate(draw(near_duplicate_sets())):
        name = draw(st.sampled_from(names))
        tools.append(Tool(id=str(i), name=name, description=" ".join(sorted(tokens))))
    return tools


@given(catalogues(), st.floats(0.0, 1.0), st.sampled_from(["signature", "content"]))
def test_dedup_properties(tools: list[Tool], threshold: float, mode: Any) -> None:
    result = dedupe_tools(tools, threshold=threshold, mode=mode)
    kept = list(result.tools)
    # Output is the input minus the removed tools, in input order.
    removed_ids = {r.name for r in result.removed}
    assert kept == [t for t in tools if t.id not in removed_ids]
    # Every removed tool points to a kept one, similar enough, and the providers agree.
    kept_ids = {t.id for t in kept}
    for record in result.removed:
        assert record.duplicate_of in kept_ids
        assert record.similarity >= threshold
        assert record.name in result.providers[record.duplicate_of]
    # Kept tools are pairwise below the threshold, so a second pass removes nothing.
    assert dedupe_tools(kept, threshold=threshold, mode=mode).removed == ()


@given(catalogues())
def test_threshold_one_removes_only_identical_signatures(tools: list[Tool]) -> None:
    by_id = {t.id: t for t in tools}
    for record in dedupe_tools(tools, threshold=1.0).removed:
        original, leader = by_id[record.name], by_id[record.duplicate_of]
        assert signature_tokens(original) == signature_tokens(leader)


def _fixed_embedder(vectors: dict[str, tuple[float, float]]) -> ScriptedEmbedder:
    """Unit vectors chosen per tool name, to state cosine similarities exactly."""
    return ScriptedEmbedder(
        dim=2, vectors={embedding_text(tool): vectors[tool.id] for tool in _named(*vectors)}
    )


def _named(*names: str) -> list[Tool]:
    return [Tool(n, n, "") for n in names]


def test_embedding_mode_collapses_by_cosine_without_chaining() -> None:
    import math as m

    angle = m.radians(20)  # cos 20° = 0.94: a~b and b~c, but a and c are 40° apart (0.77)
    embedder = _fixed_embedder(
        {"a": (1, 0), "b": (m.cos(angle), m.sin(angle)), "c": (m.cos(2 * angle), m.sin(2 * angle))}
    )
    result = dedupe_tools(_named("a", "b", "c"), mode="embedding", embedder=embedder, threshold=0.9)
    assert [t.id for t in result.tools] == ["a", "c"]
    assert result.removed[0].name == "b"
    assert result.removed[0].duplicate_of == "a"
    assert abs(result.removed[0].similarity - m.cos(angle)) < 1e-5


def test_embedding_mode_needs_an_embedder() -> None:
    with pytest.raises(ConfigError, match="embedder"):
        dedupe_tools(_named("a", "b"), mode="embedding")


def test_embedding_mode_fails_open_when_the_embedder_fails() -> None:
    broken = ScriptedEmbedder(dim=2, fail=True, error=RuntimeError("model down"))
    tools = _named("a", "b")
    result = dedupe_tools(tools, mode="embedding", embedder=broken)
    assert result.tools is tools
    assert result.removed == ()


class _ExactEmbedder:
    """Returns the given rows as they are, so dot products are exact in float32."""

    identity, dim, max_batch = "exact", 2, 8

    def __init__(self, rows: dict[str, tuple[float, float]]) -> None:
        self.rows = rows

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        return np.array([self.rows[t.split(":")[0]] for t in texts], dtype=np.float32)


def _at_cosine(cosine: float) -> _ExactEmbedder:
    # [1, 0] · [c, s] is exactly c: 1·c + 0·s, with c representable in float32.
    import numpy as np

    c = float(np.float32(cosine))
    assert c == cosine
    return _ExactEmbedder({"a": (1.0, 0.0), "b": (c, float(np.sqrt(np.float32(1 - c * c))))})


def test_embedding_mode_collapses_at_exactly_the_threshold() -> None:
    # ">=": a cosine equal to the threshold collapses (">" would keep both tools).
    result = dedupe_tools(
        _named("a", "b"), mode="embedding", embedder=_at_cosine(0.75), threshold=0.75
    )
    assert result.removed == (Removed(name="b", duplicate_of="a", similarity=0.75),)


def test_embedding_mode_keeps_a_tool_just_below_the_threshold() -> None:
    import numpy as np

    below = float(np.nextafter(np.float32(0.75), np.float32(0)))  # 0.74999994
    result = dedupe_tools(
        _named("a", "b"), mode="embedding", embedder=_at_cosine(below), threshold=0.75
    )
    assert result.removed == ()

"""ToolIndex without the model: keyword-only, failing embedders, and a hashing embedder."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute import Catalog, ConfigError, Outcome, Ranking, Selection, ToolIndex
from toolroute._core.recall.index import RecallIndex
from toolroute._core.recall.vectors import numpy_int8_product
from toolroute._core.text import embedding_text
from toolroute.providers import Embedder, HashingEmbedder
from toolroute.testing import ScriptedEmbedder

CATALOG = Catalog.from_plain(
    [
        {
            "name": "send_email",
            "description": "Send an email message to a recipient",
            "parameters": {"type": "object", "properties": {"recipient": {}, "subject": {}}},
        },
        {"name": "read_file", "description": "Read the contents of a file from disk"},
        {"name": "get_weather", "description": "Current weather forecast for a city"},
        {"name": "search_web", "description": "Search the web for pages matching a query"},
        {"name": "create_calendar_event", "description": "Create an event in the calendar"},
        {"name": "list_directory", "description": "List the files in a directory"},
    ]
)
IDS = set(CATALOG.ids)


def keyword_index() -> ToolIndex:
    return ToolIndex(CATALOG, embedder=None, cache=None)


def hashing_index(catalog: Catalog = CATALOG, **kwargs: object) -> ToolIndex:
    return ToolIndex(catalog, embedder=HashingEmbedder(dim=512), cache=None, **kwargs)  # type: ignore[arg-type]


def failing_embedder() -> ScriptedEmbedder:
    """Implements the Embedder protocol; every ``embed`` call raises."""
    return ScriptedEmbedder(dim=16, fail=True, error=RuntimeError("model offline"))


class FailsOnQueries:
    """A hashing embedder that works while the index is built, then fails."""

    max_batch = 64

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=256)
        self.identity = "fails-on-queries:1"
        self.dim = self.inner.dim
        self.built = False

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self.built:
            raise RuntimeError("quota exceeded")
        return self.inner.embed(texts)


class ShapeAfterBuild:
    """Correct vectors while building; ``shape_of(texts)`` shaped output for queries."""

    max_batch = 64

    def __init__(self, bad: npt.NDArray[np.float32] | list[float]) -> None:
        self.inner = HashingEmbedder(dim=64)
        self.identity = "shape-after-build:1"
        self.dim = self.inner.dim
        self.built = False
        self.bad = bad

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self.built:
            return np.asarray(self.bad, dtype=np.float32)
        return self.inner.embed(texts)


class BrokenRows:
    """A hashing embedder that returns NaN or zero vectors for chosen texts."""

    max_batch = 64

    def __init__(self, nan_texts: set[str], zero_texts: set[str]) -> None:
        self.inner = HashingEmbedder(dim=512)
        self.identity = "broken-rows:1"
        self.dim = self.inner.dim
        self.nan_texts = nan_texts
        self.zero_texts = zero_texts

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = self.inner.embed(texts)
        for row, text in enumerate(texts):
            if text in self.nan_texts:
                out[row] = np.nan
            elif text in self.zero_texts:
                out[row] = 0.0
        return out


def test_test_embedders_satisfy_the_protocol() -> None:
    for embedder in (
        failing_embedder(),
        FailsOnQueries(),
        ShapeAfterBuild([]),
        BrokenRows(set(), set()),
    ):
        assert isinstance(embedder, Embedder)


# -- keyword-only -------------------------------------------------------------------------------


def test_keyword_only_select_applies_and_ranks_by_bm25() -> None:
    index = keyword_index()
    assert index.strategy == "keyword"
    assert index.vectors is None
    selection = index.select("send an email to my boss")
    assert isinstance(selection, Selection)
    assert selection.outcome is Outcome.APPLIED
    assert selection.reason == ""
    assert selection.strategy == "keyword"
    assert selection.tool_ids[0] == "send_email"
    assert set(selection.tool_ids) <= IDS
    assert all(s is not None and s > 0 for s in selection.scores)
    assert set(selection.sources) == {"ranked"}
    assert len(selection) == len(selection.tool_ids) == len(selection.scores)
    assert selection.latency_ms >= 0


def test_keyword_only_query_with_no_known_words_selects_nothing() -> None:
    selection = keyword_index().select("zebra quantum")
    assert selection.outcome is Outcome.APPLIED
    assert selection.tool_ids == ()


def test_keyword_only_respects_the_policy() -> None:
    index = keyword_index()
    selection = index.select(
        "read a file from the directory",
        max_tools=1,
        always_active=["get_weather"],
        related={"read_file": ["list_directory"]},
    )
    assert selection.tool_ids == ("get_weather", "read_file", "list_directory")
    assert selection.sources == ("always_active", "ranked", "related")
    assert selection.scores[0] is None


def test_keyword_only_threshold_is_applied() -> None:
    index = keyword_index()
    assert index.select("send an email", threshold=1e6).tool_ids == ()


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_empty_query_is_skipped_with_only_always_active(query: str) -> None:
    index = keyword_index()
    selection = index.select(query, always_active=["read_file"])
    assert selection.outcome is Outcome.SKIPPED
    assert selection.reason == "empty query"
    assert selection.tool_ids == ("read_file",)
    assert selection.sources == ("always_active",)
    assert index.search(query).outcome is Outcome.SKIPPED


def test_unknown_strategy_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"unknown strategy 'fuzzy'"):
        ToolIndex(CATALOG, embedder=None, cache=None, strategy="fuzzy")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"unknown strategy 'fuzzy'"):
        keyword_index().select("email", strategy="fuzzy")  # type: ignore[arg-type]


@pytest.mark.parametrize("strategy", ["semantic", "combined"])
def test_semantic_without_an_embedder_is_a_config_error(strategy: str) -> None:
    with pytest.raises(ConfigError, match=rf"strategy '{strategy}' needs an embedder"):
        ToolIndex(CATALOG, embedder=None, cache=None, strategy=strategy)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs an embedder"):
        keyword_index().select("email", strategy=strategy)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs an embedder"):
        keyword_index().search("email", strategy=strategy)  # type: ignore[arg-type]


def test_unknown_tool_ids_in_options_are_config_errors() -> None:
    index = keyword_index()
    with pytest.raises(ConfigError, match="'nope'"):
        index.select("email", always_active=["nope"])
    with pytest.raises(ConfigError, match=r"related\['send_email'\].*'ghost'"):
        index.select("email", related={"send_email": ["ghost"]})


def test_out_of_range_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="max_tools"):
        keyword_index().select("email", max_tools=-1)


def test_index_needs_a_catalog() -> None:
    with pytest.raises(ConfigError, match="catalog must be a Catalog"):
        ToolIndex([{"name": "x"}], embedder=None, cache=None)  # type: ignore[arg-type]


def test_bad_cache_argument_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cache must be"):
        ToolIndex(CATALOG, embedder=HashingEmbedder(dim=32), cache=42)


# -- an embedder that always fails ------------------------------------------------------------


def test_failing_embedder_build_succeeds_and_selections_degrade() -> None:
    embedder = failing_embedder()
    index = ToolIndex(CATALOG, embedder=embedder, cache=None)
    assert len(embedder.calls) == 1
    assert index.vectors is None
    assert index.strategy == "combined"
    assert "embedder failed while indexing: RuntimeError: model offline" in index.degraded_reason
    for strategy in ("combined", "semantic", None):
        selection = index.select("send an email", strategy=strategy)  # type: ignore[arg-type]
        assert selection.outcome is Outcome.DEGRADED
        assert selection.strategy == "keyword"
        assert "RuntimeError: model offline" in selection.reason
        assert selection.tool_ids[0] == "send_email"
    assert len(embedder.calls) == 1  # no query is sent to an embedder that failed at build


def test_degraded_selection_does_not_apply_the_threshold() -> None:
    index = ToolIndex(CATALOG, embedder=failing_embedder(), cache=None)
    # A cosine-scale threshold means nothing on the BM25 scale: it is ignored.
    selection = index.select("send an email", threshold=0.99)
    assert selection.outcome is Outcome.DEGRADED
    assert "send_email" in selection.tool_ids


def test_failing_embedder_keyword_strategy_is_applied() -> None:
    index = ToolIndex(CATALOG, embedder=failing_embedder(), cache=None)
    selection = index.select("send an email", strategy="keyword")
    assert selection.outcome is Outcome.APPLIED
    assert selection.reason == ""


def test_failing_embedder_empty_query_is_still_skipped() -> None:
    index = ToolIndex(CATALOG, embedder=failing_embedder(), cache=None)
    assert index.select(" ").outcome is Outcome.SKIPPED


# -- an embedder that fails only on queries ----------------------------------------------------


def test_embedder_failing_on_queries_degrades_each_query() -> None:
    embedder = FailsOnQueries()
    index = ToolIndex(CATALOG, embedder=embedder, cache=None)
    assert index.vectors is not None
    assert index.degraded_reason == ""
    embedder.built = True
    for query in ("send an email", "weather in Paris"):
        selection = index.select(query, threshold=0.99)
        assert selection.outcome is Outcome.DEGRADED
        assert selection.strategy == "keyword"
        assert selection.reason == "embedder failed on the query: RuntimeError: quota exceeded"
        assert selection.tool_ids  # threshold ignored
    embedder.built = False
    assert index.select("send an email").outcome is Outcome.APPLIED  # recovers per query


def test_embedder_failing_on_a_batch_degrades_every_query() -> None:
    embedder = FailsOnQueries()
    index = ToolIndex(CATALOG, embedder=embedder, cache=None)
    embedder.built = True
    rankings = index.search_many(["send an email", "read a file", ""])
    assert [r.outcome for r in rankings] == [Outcome.DEGRADED, Outcome.DEGRADED, Outcome.SKIPPED]
    assert rankings[0].reason == "embedder failed on the queries: RuntimeError: quota exceeded"
    assert rankings[0].tool_ids[0] == "send_email"
    assert rankings[1].tool_ids[0] == "read_file"


# -- an embedder returning the wrong shape -----------------------------------------------------


class WrongRowsAtBuild:
    identity = "wrong-rows:1"
    dim = 8
    max_batch = 64

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.ones((len(texts) + 1, self.dim), dtype=np.float32)


class WrongWidthAtBuild:
    identity = "wrong-width:1"
    dim = 8
    max_batch = 64

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.ones((len(texts), self.dim + 3), dtype=np.float32)


@pytest.mark.parametrize(
    "embedder", [WrongRowsAtBuild(), WrongWidthAtBuild()], ids=["rows", "width"]
)
def test_wrong_shape_at_build_degrades(embedder: object) -> None:
    index = ToolIndex(CATALOG, embedder=embedder, cache=None)
    assert index.vectors is None
    assert index.degraded_reason.startswith("embedder failed while indexing")
    selection = index.select("send an email")
    assert selection.outcome is Outcome.DEGRADED
    assert selection.tool_ids[0] == "send_email"


@pytest.mark.parametrize(
    "bad",
    [
        np.ones(64, dtype=np.float32),  # 1-d
        np.ones((2, 64), dtype=np.float32),  # two rows for one query
        np.ones((0, 64), dtype=np.float32),  # no rows
    ],
    ids=["1d", "extra-row", "no-rows"],
)
def test_wrong_row_shape_for_a_query_degrades(bad: npt.NDArray[np.float32]) -> None:
    embedder = ShapeAfterBuild(bad)
    index = ToolIndex(CATALOG, embedder=embedder, cache=None)
    embedder.built = True
    selection = index.select("send an email")
    assert selection.outcome is Outcome.DEGRADED
    assert "embedder returned shape" in selection.reason
    assert selection.tool_ids[0] == "send_email"


def test_wrong_width_for_a_query_degrades() -> None:
    # One row, as asked, but 128 wide against an index of 64-wide vectors.
    embedder = ShapeAfterBuild(np.ones((1, 128), dtype=np.float32))
    index = ToolIndex(CATALOG, embedder=embedder, cache=None)
    embedder.built = True
    selection = index.select("send an email")  # must not raise
    assert selection.outcome is Outcome.DEGRADED
    assert selection.tool_ids[0] == "send_email"


def test_wrong_width_for_a_query_batch_degrades() -> None:
    embedder = ShapeAfterBuild(np.ones((2, 128), dtype=np.float32))
    index = ToolIndex(CATALOG, embedder=embedder, cache=None)
    embedder.built = True
    rankings = index.search_many(["send an email", "read a file"])  # must not raise
    assert [r.outcome for r in rankings] == [Outcome.DEGRADED, Outcome.DEGRADED]


# -- a working (hashing) embedder --------------------------------------------------------------


def test_hashing_embedder_defaults_to_combined_and_applies() -> None:
    index = hashing_index()
    assert index.strategy == "combined"
    assert index.vectors is not None
    assert len(index.vectors) == len(CATALOG)
    selection = index.select("send an email message")
    assert selection.outcome is Outcome.APPLIED
    assert selection.strategy == "combined"
    assert selection.tool_ids[0] == "send_email"


@pytest.mark.parametrize(
    ("query", "best"),
    [
        ("weather forecast for Paris", "get_weather"),
        ("list files in a directory", "list_directory"),
    ],
)
@pytest.mark.parametrize("strategy", ["semantic", "combined", "keyword"])
def test_every_strategy_finds_the_obvious_tool(query: str, best: str, strategy: str) -> None:
    ranking = hashing_index().search(query, 3, strategy=strategy)  # type: ignore[arg-type]
    assert isinstance(ranking, Ranking)
    assert ranking.outcome is Outcome.APPLIED
    assert ranking.strategy == strategy
    assert ranking.tool_ids[0] == best
    assert list(ranking.scores) == sorted(ranking.scores, reverse=True)


def test_semantic_threshold_applies_on_the_cosine_scale() -> None:
    index = hashing_index()
    assert index.select("send an email", strategy="semantic", threshold=1.01).tool_ids == ()
    kept = index.select("send an email", strategy="semantic", threshold=0.0, adaptive=False)
    assert kept.tool_ids
    assert all(s is not None and s >= 0.0 for s in kept.scores)


def test_search_many_matches_search() -> None:
    index = hashing_index()
    queries = ["send an email", "read a file", "", "calendar event tomorrow"]
    batch = index.search_many(queries, 4)
    for query, ranking in zip(queries, batch, strict=True):
        single = index.search(query, 4)
        assert ranking.tool_ids == single.tool_ids
        assert ranking.outcome is single.outcome
        assert ranking.scores == pytest.approx(single.scores, abs=1e-6)


def test_selection_is_deterministic() -> None:
    index = hashing_index()
    first = index.select("search the web for news")
    again = index.select("search the web for news")
    assert (first.tool_ids, first.scores) == (again.tool_ids, again.scores)


def test_progress_reports_embedding() -> None:
    calls: list[tuple[int, int]] = []
    hashing_index(progress=lambda done, total: calls.append((done, total)))
    assert calls[0] == (0, len(CATALOG))
    assert calls[-1] == (len(CATALOG), len(CATALOG))


BROKEN = Catalog.from_plain(
    [
        *({"name": t.name, "description": t.description} for t in CATALOG),
        {"name": "email_nan", "description": "Send an email message to a recipient now"},
        {"name": "email_zero", "description": "Send an email message to a recipient today"},
        {"name": "+++", "description": ""},  # no words: the hashing embedder's zero row
    ]
)


def broken_index() -> ToolIndex:
    embedder = BrokenRows(
        nan_texts={embedding_text(BROKEN["email_nan"])},
        zero_texts={embedding_text(BROKEN["email_zero"])},
    )
    return ToolIndex(BROKEN, embedder=embedder, cache=None)


def test_nan_and_zero_tool_vectors_are_marked_invalid() -> None:
    index = broken_index()
    assert index.vectors is not None
    valid = dict(zip(BROKEN.ids, index.vectors.valid.tolist(), strict=True))
    assert valid["email_nan"] is False
    assert valid["email_zero"] is False
    assert valid["+++"] is False
    assert valid["send_email"] is True


@pytest.mark.parametrize("query", ["send an email message to a recipient", "+++", "weather"])
def test_nan_and_zero_tool_vectors_never_appear_in_semantic_results(query: str) -> None:
    ranking = broken_index().search(query, len(BROKEN), strategy="semantic")
    if ranking.strategy == "keyword":  # "+++" has no request vector: keyword recall, unjudged
        assert ranking.outcome is Outcome.DEGRADED
    else:
        assert not {"email_nan", "email_zero", "+++"} & set(ranking.tool_ids)
    assert all(np.isfinite(ranking.scores))


def test_nan_and_zero_tool_vectors_never_win_combined() -> None:
    index = broken_index()
    ranking = index.search("send an email message to a recipient", len(BROKEN))
    assert ranking.strategy == "combined"
    assert ranking.tool_ids[0] == "send_email"
    assert all(np.isfinite(ranking.scores))
    selection = index.select("send an email message to a recipient")
    assert selection.tool_ids[0] == "send_email"


def test_with_vectors_upgrades_a_keyword_index_without_touching_it() -> None:
    catalog = Catalog.from_plain(
        [
            {"name": "get_weather", "description": "Weather forecast for a city"},
            {"name": "send_email", "description": "Send an email message"},
        ]
    )
    keyword_only = ToolIndex(catalog, embedder=None, cache=None)
    embedder = HashingEmbedder()
    vectors = embedder.embed([t.description for t in catalog])
    upgraded = keyword_only.with_vectors(embedder, vectors)
    assert keyword_only.vectors is None
    assert keyword_only.strategy == "keyword"
    assert upgraded.strategy == "combined"
    assert upgraded.keyword is keyword_only.keyword
    assert upgraded.select("forecast for Paris").tool_ids[0] == "get_weather"
    with pytest.raises(ConfigError, match="one vector per tool"):
        keyword_only.with_vectors(embedder, vectors[:1])


def test_rank_with_an_outside_vector_matches_search() -> None:
    catalog = Catalog.from_plain(
        [
            {"name": "get_weather", "description": "Weather forecast for a city"},
            {"name": "send_email", "description": "Send an email message"},
        ]
    )
    embedder = HashingEmbedder()
    index = ToolIndex(catalog, embedder=embedder, cache=None)
    query = "email my manager"
    vector = embedder.embed([query])[0]
    assert index.rank(query, vector, 2) == index.search(query, 2)
    degraded = index.rank(query, None, 2, reason="embedding late")
    assert degraded.outcome == "degraded"
    assert degraded.reason == "embedding late"
    assert degraded.strategy == "keyword"


# -- the core's index loads nothing; ToolIndex adds the default cache ---------------------------


def test_the_core_index_ranks_given_vectors_and_loads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLROUTE_CACHE_DIR", str(tmp_path))
    embedder = ScriptedEmbedder(dim=32)
    keyword_only = RecallIndex.build(CATALOG)
    index = keyword_only.with_vectors(embedder.embed(keyword_only.embedding_texts()))
    assert index.vectors is not None
    assert keyword_only.vectors is None  # frozen: a copy has the vectors
    assert embedder.calls == [len(CATALOG)]
    vector = embedder.embed(["send an email"])[0]
    assert index.select("send an email", vector).tool_ids[0] == "send_email"
    assert embedder.calls == [len(CATALOG), 1]  # only the calls made here
    assert list(tmp_path.iterdir()) == []  # nothing written: the core has no cache
    # No vectors: no model is loaded, and the default ranks by keyword.
    assert keyword_only.rank("send an email", None).strategy == "keyword"
    assert not hasattr(index, "embedder")


def test_tool_index_keeps_the_default_cache_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLROUTE_CACHE_DIR", str(tmp_path))
    first = ScriptedEmbedder(dim=32)
    ToolIndex(CATALOG, embedder=first)
    assert first.calls == [len(CATALOG)]
    assert ".emb" in {p.suffix for p in tmp_path.iterdir()}
    again = ScriptedEmbedder(dim=32)
    index = ToolIndex(CATALOG, embedder=again)  # same identity: vectors from the cache
    assert again.calls == []
    assert isinstance(index.recall, RecallIndex)  # the core's index, vectors handed over
    assert index.vectors is not None


def test_query_vectors_are_checked_by_the_public_call() -> None:
    index = ToolIndex(CATALOG, embedder=ScriptedEmbedder(dim=32, faults=["ok", "nan"]), cache=None)
    with pytest.raises(ValueError, match="NaN"):
        index.query_vectors(["weather"])
    assert index.query_vectors(["weather"]).shape == (1, 32)


# -- int8 scoring of large catalogues, forced on small ones (int8_from) --------------------------

WORDS = ["send", "email", "file", "read", "weather", "city", "search", "web", "event", "list"]


@st.composite
def word_catalogues(draw: st.DrawFn) -> Catalog:
    """Catalogues whose texts share a small vocabulary: keyword evidence and near-ties."""
    count = draw(st.integers(1, 90))
    tools = []
    for i in range(count):
        words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6))
        tools.append({"name": f"tool_{i}_{words[0]}", "description": " ".join(words)})
    return Catalog.from_plain(tools)


@settings(max_examples=60, deadline=None)
@given(
    catalog=word_catalogues(),
    query=st.lists(st.sampled_from([*WORDS, "unknown"]), min_size=1, max_size=5).map(" ".join),
    strategy=st.sampled_from(["semantic", "combined"]),
    k=st.integers(1, 12),
)
def test_int8_recall_ranks_as_fp32(catalog: Catalog, query: str, strategy: str, k: int) -> None:
    embedder = HashingEmbedder(dim=64)
    fp32 = ToolIndex(catalog, embedder=embedder, cache=None, int8_product=None)
    int8 = ToolIndex(
        catalog, embedder=embedder, cache=None, int8_product=numpy_int8_product, int8_from=0
    )
    assert int8.int8 is not None
    assert fp32.int8 is None
    int8.int8.rescore_factor, int8.int8.rescore_min = 1, 2  # the error bound decides
    got = int8.search(query, k, strategy=strategy)  # type: ignore[arg-type]
    want = fp32.search(query, k, strategy=strategy)  # type: ignore[arg-type]
    np.testing.assert_allclose(got.scores, want.scores, rtol=0, atol=1e-5)
    assert got.baseline == pytest.approx(want.baseline, abs=1e-5)
    assert (got.strategy, got.outcome) == (want.strategy, want.outcome)
    if len(set(want.scores)) == len(want.scores):  # no ties: the very same tools
        assert got.tool_ids == want.tool_ids


def test_tool_index_scores_from_onnx_int8_from_its_threshold() -> None:
    index = ToolIndex(CATALOG, embedder=HashingEmbedder(dim=64), cache=None, int8_from=0)
    assert index.int8 is not None
    assert hashing_index().int8 is None  # below INT8_FROM: fp32
    fp32 = ToolIndex(CATALOG, embedder=HashingEmbedder(dim=64), cache=None, int8_product=None)
    for query in ["send an email", "weather in a city", "files in a directory"]:
        assert index.select(query).tool_ids == fp32.select(query).tool_ids
    assert index.int8.failures == 0


def test_warm_up_copy_builds_the_int8_index_too() -> None:
    keyword_only = ToolIndex(CATALOG, embedder=None, cache=None, int8_from=0)
    embedder = HashingEmbedder(dim=64)
    warmed = keyword_only.with_vectors(embedder, embedder.embed(keyword_only.embedding_texts()))
    assert warmed.int8 is not None
    assert warmed.without_vectors("gone").int8 is None


def _crashing_product(rows: npt.NDArray[np.int8]) -> Callable[[object], npt.NDArray[np.int32]]:
    def product(query: object) -> npt.NDArray[np.int32]:
        raise RuntimeError("int8 kernel crashed")

    return product


def _unavailable_product(rows: npt.NDArray[np.int8]) -> Callable[[object], npt.NDArray[np.int32]]:
    raise ImportError("no onnxruntime")


@pytest.mark.parametrize("factory", [_crashing_product, _unavailable_product])
@pytest.mark.parametrize("strategy", ["semantic", "combined"])
def test_int8_failure_falls_back_to_fp32_and_never_raises(
    factory: Callable[..., object], strategy: str
) -> None:
    embedder = HashingEmbedder(dim=64)
    fp32 = ToolIndex(CATALOG, embedder=embedder, cache=None, int8_product=None)
    failing = ToolIndex(CATALOG, embedder=embedder, cache=None, int8_product=factory, int8_from=0)
    for query in ["send an email", "weather in a city", "read a file from disk"]:
        got = failing.select(query, strategy=strategy)  # type: ignore[arg-type]
        want = fp32.select(query, strategy=strategy)  # type: ignore[arg-type]
        assert got.tool_ids == want.tool_ids
        assert got.outcome is Outcome.APPLIED
    if failing.int8 is not None:
        assert failing.int8.failures == 3
        assert "int8 kernel crashed" in failing.int8.last_failure

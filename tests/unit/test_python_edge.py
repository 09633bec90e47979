"""The Python edge as strict as the command line's: a caller's wrong argument is one
``ConfigError`` naming the argument, what was expected and what came — never an
``AttributeError`` from inside, a numpy message, or a silent empty answer."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute import Catalog, ConfigError, Policy, ToolIndex, dedupe_tools
from toolroute.providers import HashingEmbedder

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message"},
        {"name": "read_file", "description": "Read a file from disk"},
    ]
)
INDEX = ToolIndex(TOOLS, embedder=None, cache=None)


@pytest.mark.parametrize("query", [123, None, b"weather", ["weather"], {"query": "x"}])
def test_a_query_that_is_not_a_string_is_refused(query: object) -> None:
    with pytest.raises(ConfigError, match=r"query must be a string.*, got"):
        INDEX.select(query)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"query must be a string"):
        INDEX.search(query)  # type: ignore[arg-type]


def test_search_many_names_the_query_that_is_not_a_string() -> None:
    with pytest.raises(ConfigError, match=r"queries\[1\] must be a string.*got int 5"):
        INDEX.search_many(["weather", 5])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("max_tools", 2.5, r"max_tools must be an integer of at least 0, got 2\.5"),
        ("max_tools", True, r"max_tools must be an integer of at least 0, got True"),
        ("max_tools", -1, r"max_tools must be an integer of at least 0, got -1"),
        ("max_tools", "3", r"max_tools must be an integer of at least 0, got '3'"),
        ("threshold", math.nan, r"threshold must be a finite number or None, got nan"),
        ("threshold", math.inf, r"threshold must be a finite number or None, got inf"),
        ("threshold", "0.3", r"threshold must be a finite number or None, got '0\.3'"),
        ("adaptive", "yes", r"adaptive must be True or False, got 'yes'"),
        ("max_related", 1.5, r"max_related must be an integer of at least 0, got 1\.5"),
    ],
)
def test_a_policy_option_out_of_its_range_is_named(option: str, value: object, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        INDEX.select("weather", **{option: value})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=says):
        Policy(**{option: value})  # type: ignore[arg-type]


def test_the_k_of_search_is_a_positive_integer() -> None:
    with pytest.raises(ConfigError, match=r"k must be an integer of at least 0, got 2\.5"):
        INDEX.search("weather", 2.5)  # type: ignore[arg-type]


def test_an_empty_catalogue_is_refused_with_the_fix() -> None:
    with pytest.raises(
        ConfigError, match=r"catalog holds no tools: nothing could ever be selected"
    ):
        ToolIndex(Catalog([]), embedder=None, cache=None)


def test_a_catalog_of_the_wrong_type_names_the_readers() -> None:
    with pytest.raises(
        ConfigError, match=r"catalog must be a Catalog.*Catalog\.from_tools.*got list"
    ):
        ToolIndex([{"name": "x"}], embedder=None, cache=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("embedder", "says"),
    [
        ("hashing", r"got str 'hashing'; a name is not an Embedder: use .*HashingEmbedder\(\)"),
        ("minilm", r"got str 'minilm'.*pass toolroute\.providers\.default_embedder\(\)"),
        (5, r"got int 5; for the bundled model pass .*default_embedder\(\)"),
        (HashingEmbedder, r"got type .*\(it has no identity, dim\)"),  # the class, not one
    ],
)
def test_an_embedder_that_is_not_one_is_refused_at_once(embedder: object, says: str) -> None:
    """Not indexed keyword-only with a reason from deep inside (``'str' object has no
    attribute 'dim'``): the caller's mistake, named."""
    expected = r"embedder must be an Embedder \(an object with identity, dim, max_batch, embed\(\)\)"
    with pytest.raises(ConfigError, match=expected + r" or None, " + says):
        ToolIndex(TOOLS, embedder=embedder, cache=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=expected):
        dedupe_tools(TOOLS, mode="embedding", embedder=embedder)  # type: ignore[arg-type]


def test_an_object_with_what_an_embedder_needs_is_one() -> None:
    index = ToolIndex(TOOLS, embedder=HashingEmbedder(), cache=None)
    assert index.select("weather forecast").outcome == "applied"


@given(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-3, 40),
        st.booleans(),
        st.text(max_size=3),
        st.none(),
    ),
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True), st.none(), st.integers(-5, 5), st.text()
    ),
)
def test_any_option_value_either_selects_or_is_a_config_error(
    max_tools: object, threshold: object
) -> None:
    """Whatever the caller passes, the answer is a selection or a ``ConfigError``: never
    another exception, and never a silent empty selection for a threshold that means nothing."""
    try:
        selection = INDEX.select("weather forecast", max_tools=max_tools, threshold=threshold)  # type: ignore[arg-type]
    except ConfigError:
        return
    assert isinstance(max_tools, int)
    assert not isinstance(max_tools, bool)
    assert max_tools >= 0
    assert threshold is None or (
        isinstance(threshold, int | float)
        and not isinstance(threshold, bool)
        and math.isfinite(threshold)
    )
    assert len(selection.tool_ids) <= max_tools

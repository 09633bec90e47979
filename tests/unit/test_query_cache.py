"""The query-embedding cache and the load section of the config."""

from __future__ import annotations

import numpy as np
import pytest

from toolroute import EngineConfig
from toolroute._core.errors import ConfigError
from toolroute._runtime.batcher import BatcherLoad
from toolroute._runtime.query_cache import QueryCache
from toolroute.config import LoadConfig

OWNER = ("minilm:abc", 4)


def vector(value: float) -> np.ndarray:
    return np.full(4, value, dtype=np.float32)


def test_keeps_at_most_its_size_dropping_the_least_recently_used() -> None:
    cache = QueryCache(2)
    cache.put("a", vector(1), OWNER)
    cache.put("b", vector(2), OWNER)
    assert cache.get("a", OWNER) is not None  # "a" is now the most recent
    cache.put("c", vector(3), OWNER)
    assert len(cache) == 2
    assert cache.get("b", OWNER) is None
    assert cache.get("c", OWNER) is not None
    assert (cache.hits, cache.misses) == (2, 1)
    assert cache.hit_rate == pytest.approx(2 / 3)


def test_vectors_of_another_embedder_or_width_are_never_served() -> None:
    cache = QueryCache(8)
    cache.put("a", vector(1), OWNER)
    assert cache.get("a", ("other-model", 4)) is None
    assert cache.get("a", OWNER) is None  # cleared when the owner changed
    cache.put("a", vector(1), OWNER)
    assert cache.get("a", ("minilm:abc", 8)) is None


def test_cached_vectors_are_copies_nobody_can_change() -> None:
    cache = QueryCache(8)
    original = vector(1)
    cache.put("a", original, OWNER)
    original[:] = 5
    kept = cache.get("a", OWNER)
    assert kept is not None
    assert kept.tolist() == [1.0] * 4
    with pytest.raises(ValueError, match="read-only"):
        kept[0] = 2


def test_size_zero_keeps_nothing() -> None:
    cache = QueryCache(0)
    cache.put("a", vector(1), OWNER)
    assert cache.get("a", OWNER) is None
    assert len(cache) == 0


def test_predicted_wait_is_texts_ahead_times_measured_model_time() -> None:
    load = BatcherLoad()
    assert load.predicted_wait() == 0.0  # nothing measured: no prediction
    load.measured(0.2, 4)
    assert load.seconds_per_text == pytest.approx(0.05)
    load.outstanding = 5
    assert load.predicted_wait() == pytest.approx(0.3)
    load.measured(0.1, 1)  # one slow call moves the average part of the way
    assert 0.05 < load.seconds_per_text < 0.1


def test_load_config_defaults_and_mapping() -> None:
    config = EngineConfig.from_mapping({"load": {"query_cache": 16, "budget_s": 0.1}})
    assert config.load == LoadConfig(query_cache=16, budget_s=0.1)
    assert EngineConfig().load.fast_tier
    assert EngineConfig().load.budget_s is None


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("query_cache", -1, "at least 0"),
        ("fast_tier", "yes", "true or false"),
        ("learn", 1, "true or false"),
        ("budget_s", 0, "positive or None"),
        ("min_served", 1.5, "at least 0"),
        ("learn_buffer", 0, "at least 1"),
        ("refit_every", 0, "at least 1"),
    ],
)
def test_load_config_names_what_it_expected(field: str, value: object, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        LoadConfig(**{field: value})  # type: ignore[arg-type]


def test_a_mapping_where_the_load_section_belongs_is_named() -> None:
    with pytest.raises(ConfigError, match="load must be a LoadConfig"):
        EngineConfig(load={"query_cache": 1})  # type: ignore[arg-type]

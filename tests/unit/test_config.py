"""Every config section is checked when it is built; mistakes name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from toolroute import ConfigError
from toolroute.config import (
    Deadlines,
    DedupConfig,
    EngineConfig,
    EventConfig,
    RestartPolicy,
    RoutingConfig,
    SelectionDefaults,
    WarmupConfig,
)

SECTIONS = [f.name for f in attrs.fields(EngineConfig) if attrs.has(f.type)]


def test_every_section_is_a_checked_field() -> None:
    assert len(SECTIONS) == 14
    assert "learning" in SECTIONS
    assert "routing" in SECTIONS
    assert "load" in SECTIONS
    assert "restarts" in SECTIONS


def test_a_dict_where_a_section_belongs_is_a_config_error_naming_it() -> None:
    with pytest.raises(
        ConfigError, match=r"deadlines must be a Deadlines, got dict .*from_mapping"
    ):
        EngineConfig(deadlines={"embed_s": 1})  # type: ignore[arg-type]


@pytest.mark.parametrize("section", SECTIONS)
@pytest.mark.parametrize("wrong", [{}, None, "fast", 3, Deadlines()])
def test_any_wrong_type_in_any_section_is_refused(section: str, wrong: Any) -> None:
    if section == "deadlines" and isinstance(wrong, Deadlines):
        return  # that one is right
    with pytest.raises(ConfigError, match=rf"^{section} must be a "):
        EngineConfig(**{section: wrong})


def test_from_mapping_still_builds_sections_from_mappings() -> None:
    config = EngineConfig.from_mapping(
        {
            "deadlines": {"embed_s": 0.1},
            "routing": {"embedding_weights": [0.5, 0.5]},
            "restarts": {"max_restarts": 2},
            "cache_dir": "/tmp/toolroute-cache",
        }
    )
    assert config.deadlines == Deadlines(embed_s=0.1)
    assert config.routing == RoutingConfig(embedding_weights=(0.5, 0.5))
    assert config.restarts == RestartPolicy(max_restarts=2)
    assert config.cache_dir == "/tmp/toolroute-cache"


def test_from_mapping_names_a_wrong_section_value() -> None:
    with pytest.raises(ConfigError, match="deadlines"):
        EngineConfig.from_mapping({"deadlines": 5})
    with pytest.raises(ConfigError, match="embed_s"):
        EngineConfig.from_mapping({"deadlines": {"embed_s": -1}})


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # An operator's JSON file: what the constructor refuses, from_mapping refuses too,
        # instead of converting it (2.5 sessions were 2, true was 1, a string a letter list).
        ({"sessions": {"max_sessions": 2.5}}, "max_sessions .* got 2.5 @ \\$.sessions"),
        ({"sessions": {"max_sessions": True}}, "max_sessions .* got True"),
        ({"selection": {"max_tools": "5"}}, "max_tools .* got '5'"),
        ({"deadlines": {"embed_s": "0.1"}}, "embed_s .* got '0.1'"),
        ({"cache_dir": 5}, "cache_dir .* got 5"),
        ({"selection": {"always_active": "search"}}, "always_active must be a list"),
    ],
)
def test_from_mapping_refuses_what_the_constructor_refuses(
    data: dict[str, object], expected: str
) -> None:
    with pytest.raises(ConfigError, match=expected):
        EngineConfig.from_mapping(data)


def test_from_mapping_keeps_plain_numbers_and_lists() -> None:
    config = EngineConfig.from_mapping(
        {"deadlines": {"embed_s": 1}, "selection": {"always_active": ["a", "b"], "max_tools": 3}}
    )
    assert config.deadlines.embed_s == 1
    assert config.selection.always_active == ("a", "b")
    assert config.selection.max_tools == 3


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: SelectionDefaults(max_tools="5"), "max_tools"),
        (lambda: SelectionDefaults(threshold="high"), "threshold"),
        (lambda: SelectionDefaults(threshold=float("nan")), "threshold"),
        (lambda: SelectionDefaults(adaptive="yes"), "adaptive"),
        (lambda: SelectionDefaults(always_active="search"), "always_active"),
        (lambda: SelectionDefaults(always_active=[1]), "always_active"),
        (lambda: Deadlines(embed_s="1"), "embed_s"),
        (lambda: WarmupConfig(wait=1), "wait"),
        (lambda: WarmupConfig(batch=2.5), "batch"),
        (lambda: EventConfig(include_queries="no"), "include_queries"),
        (lambda: DedupConfig(enabled="false"), "enabled"),
        (lambda: RestartPolicy(max_restarts=-1), "max_restarts"),
        (lambda: RestartPolicy(window_s=0), "window_s"),
        (lambda: RestartPolicy(backoff_s=float("inf")), "backoff_s"),
        (lambda: RestartPolicy(max_backoff_s="5"), "max_backoff_s"),
        (lambda: EngineConfig(cache_dir=5), "cache_dir"),
        (lambda: EngineConfig(cache_dir=""), "cache_dir"),
    ],
)
def test_fields_are_checked_with_a_config_error_naming_them(build: Any, field: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{field} must be"):
        build()


def test_cache_dir_accepts_a_path_and_keeps_it_as_text(tmp_path: Path) -> None:
    assert EngineConfig(cache_dir=tmp_path).cache_dir == str(tmp_path)
    assert EngineConfig().cache_dir is None

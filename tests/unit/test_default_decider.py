"""default_decider: which vendors the environment picks implicitly, and by name."""

from __future__ import annotations

import pytest

from toolroute import ConfigError
from toolroute.providers import (
    LogprobDecider,
    OpenAIDecisionsDecider,
    ScaleDownDecider,
    default_decider,
)
from toolroute.providers._deciders.default import IMPLICIT


def test_new_providers_are_explicit_only() -> None:
    env = {
        "OPENAI_API_KEY": "sk-abc",
        "SCALEDOWN_API_KEY": "sd",
        "TOOLROUTE_LOGPROB_BASE_URL": "http://localhost:8000/v1",
        "TOOLROUTE_LOGPROB_MODEL": "m",
    }
    assert default_decider(env=env) is None
    assert {name for name, _build in IMPLICIT}.isdisjoint(
        {"openai-decisions", "scaledown", "logprob"}
    )


def test_default_decider_builds_them_by_name() -> None:
    chosen = default_decider(
        "openai-decisions",
        env={"OPENAI_API_KEY": "sk-abc", "OPENAI_DECISIONS_MODEL": "luna-mini"},
    )
    assert isinstance(chosen, OpenAIDecisionsDecider)
    assert chosen.model == "luna-mini"
    via_env = default_decider(
        env={"TOOLROUTE_DECISION_PROVIDER": "scaledown", "SCALEDOWN_API_KEY": "sd"}
    )
    assert isinstance(via_env, ScaleDownDecider)
    local = default_decider(
        "logprob",
        env={
            "TOOLROUTE_LOGPROB_BASE_URL": "http://localhost:8000/v1",
            "TOOLROUTE_LOGPROB_MODEL": "m",
        },
    )
    assert isinstance(local, LogprobDecider)
    assert local.model == "m"


@pytest.mark.parametrize(
    ("provider", "env", "says"),
    [
        ("openai-decisions", {}, "'openai-decisions' is not configured: set OPENAI_API_KEY$"),
        ("scaledown", {"SCALEDOWN_API_KEY": " "}, "set SCALEDOWN_API_KEY$"),  # blank: unset
        (
            "logprob",
            {},
            "'logprob' is not configured: set TOOLROUTE_LOGPROB_BASE_URL and"
            " TOOLROUTE_LOGPROB_MODEL$",
        ),
        ("logprob", {"TOOLROUTE_LOGPROB_MODEL": "m"}, "set TOOLROUTE_LOGPROB_BASE_URL$"),
        (
            "logprob",
            {"TOOLROUTE_LOGPROB_BASE_URL": "http://localhost"},
            "set TOOLROUTE_LOGPROB_MODEL$",
        ),
        (
            "Typesafe",
            {},
            "'Typesafe' is not configured: set TYPESAFE_API_KEY or AI_GATEWAY_API_KEY$",
        ),
        ("laya", {"LAYA_API_KEY": "k"}, "set LAYA_BASE_URL$"),
        (
            None,
            {"TOOLROUTE_DECISION_PROVIDER": "openai-decisions"},
            r"'openai-decisions' \(from TOOLROUTE_DECISION_PROVIDER\) is not configured: set"
            " OPENAI_API_KEY$",
        ),
    ],
)
def test_a_provider_named_without_its_settings_is_an_error_naming_them(
    provider: str | None, env: dict[str, str], says: str
) -> None:
    """Asked for by name, a provider is never silently replaced by none (every server kept)."""
    with pytest.raises(ConfigError, match=says):
        default_decider(provider, env=env)


def test_with_no_provider_named_nothing_configured_is_none() -> None:
    assert default_decider(env={}) is None
    assert default_decider(env={"TOOLROUTE_DECISION_PROVIDER": " ", "LAYA_API_KEY": "k"}) is None


def test_an_unknown_provider_in_the_variable_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="'bogus' in TOOLROUTE_DECISION_PROVIDER; expected"):
        default_decider(env={"TOOLROUTE_DECISION_PROVIDER": "bogus"})


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        (
            {
                "TOOLROUTE_DECISION_PROVIDER": "logprob",
                "TOOLROUTE_LOGPROB_MODEL": "m",
                "TOOLROUTE_LOGPROB_BASE_URL": "ftp://host",
            },
            "TOOLROUTE_LOGPROB_BASE_URL",
        ),
        (
            {"LAYA_API_KEY": "k", "LAYA_BASE_URL": "http://example.com/v1"},
            "LAYA_BASE_URL",
        ),
        ({"TYPESAFE_API_KEY": "k", "TYPESAFE_TRANSPORT": "bogus"}, "TYPESAFE_TRANSPORT"),
        ({"TYPESAFE_API_KEY": "k", "TYPESAFE_BASE_URL": "not a url"}, "TYPESAFE_BASE_URL"),
    ],
)
def test_a_bad_value_from_the_environment_names_its_variable(
    env: dict[str, str], variable: str
) -> None:
    with pytest.raises(ConfigError, match=rf"\(from {variable}\)$") as caught:
        default_decider(env=env)
    assert env[variable] not in str(caught.value) or variable == "TYPESAFE_TRANSPORT"

"""default_decider: which vendors the environment picks implicitly, and by name."""

from __future__ import annotations

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
    assert default_decider("openai-decisions", env={}) is None
    via_env = default_decider(
        env={"TOOLROUTE_DECISION_PROVIDER": "scaledown", "SCALEDOWN_API_KEY": "sd"}
    )
    assert isinstance(via_env, ScaleDownDecider)
    assert default_decider("scaledown", env={"SCALEDOWN_API_KEY": " "}) is None
    local = default_decider(
        "logprob",
        env={
            "TOOLROUTE_LOGPROB_BASE_URL": "http://localhost:8000/v1",
            "TOOLROUTE_LOGPROB_MODEL": "m",
        },
    )
    assert isinstance(local, LogprobDecider)
    assert local.model == "m"
    assert default_decider("logprob", env={"TOOLROUTE_LOGPROB_MODEL": "m"}) is None
    assert (
        default_decider("logprob", env={"TOOLROUTE_LOGPROB_BASE_URL": "http://localhost"}) is None
    )

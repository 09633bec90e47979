"""The routing example and ``toolroute route`` end to end, against a loopback TypeSafe server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from loopback.decision_vendors import KEY, Asked, serve_vendor

EXAMPLE = Path(__file__).parents[2] / "examples" / "route_servers.py"


def loopback_env(base_url: str) -> dict[str, str]:
    """This environment without decision keys, pointing TypeSafe at the loopback server."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith(("_API_KEY", "_BASE_URL")) and k != "TOOLROUTE_DECISION_PROVIDER"
    }
    return env | {"TYPESAFE_API_KEY": KEY, "TYPESAFE_BASE_URL": base_url}


def unneeded(_question_id: str, question: Asked) -> float:
    # The request is about GitHub: every other server gets a confident "no".
    return 0.95 if '"github"' in question.instructions else 0.05


def test_route_servers_example_drops_what_the_decision_model_rules_out() -> None:
    with serve_vendor("typesafe") as server:
        server.answer = unneeded
        env = loopback_env(server.base_url)
        done = subprocess.run(
            [sys.executable, str(EXAMPLE), "open an issue about the login crash"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    assert "provider: typesafe" in done.stdout
    assert "kept:     github\n" in done.stdout
    assert "dropped:  slack, weather, maps, calendar" in done.stdout
    assert len(server.requests) == 1


def test_route_command_reads_the_provider_from_the_environment() -> None:
    with serve_vendor("typesafe") as server:
        server.answer = unneeded
        env = loopback_env(server.base_url)
        done = subprocess.run(
            [sys.executable, "-m", "toolroute", "route", "--json", "open an issue", "hi"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["query"] for line in lines] == ["open an issue", "hi"]
    assert all(line["selected"] == ["github"] for line in lines)
    assert all(line["outcome"] == "applied" for line in lines)
    assert len(lines[0]["excluded"]) == 7

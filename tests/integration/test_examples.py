"""The routing example end to end, against a loopback TypeSafe server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from loopback.decision_vendors import KEY, Asked, serve_vendor

EXAMPLE = Path(__file__).parents[2] / "examples" / "route_servers.py"


def unneeded(_question_id: str, question: Asked) -> float:
    # The request is about GitHub: every other server gets a confident "no".
    return 0.95 if '"github"' in question.instructions else 0.05


def test_route_servers_example_drops_what_the_decision_model_rules_out() -> None:
    with serve_vendor("typesafe") as server:
        server.answer = unneeded
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.endswith(("_API_KEY", "_BASE_URL")) and k != "TOOLROUTE_DECISION_PROVIDER"
        }
        env |= {"TYPESAFE_API_KEY": KEY, "TYPESAFE_BASE_URL": server.base_url}
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

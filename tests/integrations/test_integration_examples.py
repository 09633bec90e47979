"""The three framework examples run offline, as a user runs them, and show what they claim:
each model call saw a short list, and the call to a hidden tool was refused, not run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[2] / "examples" / "integrations"
FRAMEWORKS = {
    "pydantic_ai_agent.py": "pydantic_ai",
    "openai_agents_agent.py": "agents",
    "langchain_agent.py": "langchain.agents",
}
REFUSED = "The tool 'send_email' is not available on this step, so it was not run."


@pytest.mark.slow  # each loads the embedded model
def test_every_framework_example_runs_offline_and_refuses_the_hidden_call(tmp_path: Path) -> None:
    for module in FRAMEWORKS.values():
        pytest.importorskip(module)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["HOME"] = str(tmp_path)  # an empty home: nothing cached, nothing downloaded
    # Side by side: each spends most of its time importing its framework and the model.
    running = {
        name: subprocess.Popen(
            [sys.executable, str(EXAMPLES / name)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in FRAMEWORKS
    }
    for name, process in running.items():
        out, err = process.communicate(timeout=240)
        assert process.returncode == 0, f"{name} failed:\n{err}"
        lines = out.splitlines()
        assert lines[0] == "> what is the weather forecast in Oslo tomorrow?", name
        seen = [line for line in lines if " saw [" in line]
        assert len(seen) == 6, (name, out)  # two model calls per request
        assert "'get_weather'" in seen[0], (name, out)
        assert all(line.count("'") <= 6 for line in seen), (name, out)  # at most 3 of 5 tools
        assert REFUSED in out, (name, out)
        assert "sent to ann@example.com" not in out, (name, out)  # never run silently

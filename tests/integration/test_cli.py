"""The ``toolroute`` command end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from toolroute._cli.main import main

TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather and forecast for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {
        "name": "send_email",
        "description": "Send an email message to a recipient.",
        "parameters": {"type": "object", "properties": {"to": {"type": "string"}}},
    },
    {
        "name": "create_issue",
        "description": "Open a new issue in a GitHub repository.",
        "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
    },
]


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(TOOLS))
    return path


@pytest.fixture
def queries_file(tmp_path: Path) -> Path:
    path = tmp_path / "queries.json"
    path.write_text(
        json.dumps(
            [
                {"query": "weather in Paris", "expected": "get_weather"},
                {"query": "email my boss", "expected": ["send_email"]},
                {"query": "file a bug on github", "expected": ["create_issue"]},
                {"query": "hello there", "expected": []},
            ]
        )
    )
    return path


def test_select_json_keyword(tools_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "select",
            "--tools",
            str(tools_file),
            "--embedder",
            "none",
            "--json",
            "weather in Paris",
            "send an email",
        ]
    )
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["tool_ids"][0] == "get_weather"
    assert lines[1]["tool_ids"][0] == "send_email"
    assert lines[0]["strategy"] == "keyword"
    assert lines[0]["outcome"] == "applied"


def test_select_text_output_names_tools(
    tools_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                "select",
                "--tools",
                str(tools_file),
                "--embedder",
                "hashing",
                "--no-cache",
                "--max-tools",
                "1",
                "weather in Paris",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "get_weather" in out
    assert "send_email" not in out


def test_eval_json_has_the_contract_keys(
    tools_file: Path, queries_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                "eval",
                "--tools",
                str(tools_file),
                "--queries",
                str(queries_file),
                "--embedder",
                "none",
                "--json",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    for key in (
        "n",
        "top1",
        "hit@1",
        "hit@3",
        "hit@5",
        "recall@5",
        "completeness@5",
        "mrr",
        "latency_ms",
        "build_s",
        "misses",
    ):
        assert key in report, key
    assert set(report["latency_ms"]) >= {"p50", "p95"}
    assert report["n"] == 3
    assert report["n_no_tool"] == 1
    assert (
        report["hit@5"] == 2 / 3
    )  # "email my boss" shares the word "email"; the bug query no word


def test_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('[{"name": "x", "description": 5}]')
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolroute",
            "select",
            "--tools",
            str(bad),
            "--embedder",
            "none",
            "hello",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "description" in result.stderr
    assert "tool 0" in result.stderr


def test_missing_file_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["select", "--tools", str(tmp_path / "nope.json"), "--embedder", "none", "x"]) == 2
    assert "cannot read tool file" in capsys.readouterr().err


def test_console_script_is_installed() -> None:
    result = subprocess.run(["toolroute", "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert "select" in result.stdout
    assert "demo" in result.stdout


def test_demo_runs_twice_second_from_cache(tmp_path: Path) -> None:
    command = ["toolroute", "demo", "--cache-dir", str(tmp_path)]
    first = subprocess.run(command, capture_output=True, text=True, check=True)
    assert "embedding tools:" in first.stderr
    assert "embedded 50 tools" in first.stdout
    second = subprocess.run(command, capture_output=True, text=True, check=True)
    assert "from the cache" in second.stdout
    assert "expected tools shown" in second.stdout


def test_demo_streams_agent_events_as_json_lines(tmp_path: Path) -> None:
    result = subprocess.run(
        ["toolroute", "demo", "--embedder", "hashing", "--cache-dir", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    steps = [e for e in events if e["type"] == "step.finished"]
    assert [s["page"] for s in steps] == [0, 0, 1, 2]
    assert steps[-1]["tool_ids"] is None  # every tool after two idle steps
    assert all(s["query"] is None for s in steps)  # requests stay out of events

"""``toolroute bench`` runs end to end on a tiny dataset and writes its report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolroute._cli.main import main

TOOLS = [
    {"name": "createLinearIssue", "description": "Create a new issue in Linear", "parameters": {}},
    {
        "name": "sendSlackMessage",
        "description": "Send a message to a Slack channel",
        "parameters": {},
    },
    {"name": "getWeather", "description": "Current weather for a city", "parameters": {}},
]
QUERIES = [
    {"query": "open a linear issue for the crash", "expected": ["createLinearIssue"]},
    {"query": "post in the slack channel", "expected": ["sendSlackMessage"]},
    {"query": "weather in Rome", "expected": ["getWeather"]},
    {"query": "is it sunny in Oslo", "expected": ["getWeather"]},
]


@pytest.mark.slow
def test_bench_writes_markdown_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "datasets" / "toolpick-saas"
    data.mkdir(parents=True)
    (data / "tools.json").write_text(json.dumps(TOOLS))
    (data / "keyword_queries.json").write_text(json.dumps(QUERIES))
    out = tmp_path / "out"
    code = main(
        [
            "bench",
            "--datasets",
            str(tmp_path / "datasets"),
            "--out",
            str(out),
            "--only",
            "toolpick-saas",
            "--systems",
            "toolroute keyword",
            "--scale",
            "",
        ]
    )
    assert code == 0
    report = json.loads((out / "results.json").read_text())
    row = report["datasets"]["toolpick-saas"]["systems"]["toolroute keyword"]
    assert row["all"]["n"] == 4
    assert row["all"]["hit@5"] >= 0.75  # three of the four share a word with their tool
    assert "toolroute keyword" in (out / "results.md").read_text()
    assert "toolroute" in report["versions"]


def test_bench_without_datasets_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--datasets", str(tmp_path / "missing")]) == 2
    assert "no datasets" in capsys.readouterr().err

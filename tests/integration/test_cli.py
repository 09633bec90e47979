"""The ``toolroute`` command end to end."""

from __future__ import annotations

import json
import os
import re
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


def test_select_text_output_escapes_control_characters_in_tool_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A tool file comes from MCP servers one may not trust: a name holding a terminal escape
    # sequence or a right-to-left override must not rewrite what the terminal shows.
    tools = tmp_path / "tools.json"
    evil = "weather\x1b[2J\x1b[31mRED\u202egnp.exe\x07"
    tools.write_text(json.dumps([{"name": evil, "description": "Weather", "server": "w\x1b]0;x"}]))
    args = ["select", "--tools", str(tools), "--embedder", "none", "--explain", "weather"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert not {"\x1b", "\x07", "\u202e"} & set(out)
    assert "weather\\x1b[2J\\x1b[31mRED\\u202egnp.exe\\x07" in out
    assert "[w\\x1b]0;x]" in out


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
    assert [s["page"] for s in steps] == [0, 0, 0, 1, 2]
    assert steps[-1]["tool_ids"] is None  # every tool after two idle steps
    assert all(s["query"] is None for s in steps)  # requests stay out of events


# -- caller mistakes: one clear line, exit status 2 ------------------------------------------


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.mark.parametrize("empty", [[], {}, {"tools": []}])
@pytest.mark.parametrize("command", ["select", "eval", "route"])
def test_an_empty_catalogue_is_refused(
    empty: object, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = write(tmp_path, "tools.json", empty)
    queries = write(tmp_path, "q.json", [{"query": "weather", "expected": "get_weather"}])
    argv = {
        "select": ["select", "--tools", str(tools), "--embedder", "none", "weather"],
        "eval": ["eval", "--tools", str(tools), "--queries", str(queries), "--embedder", "none"],
        "route": ["route", "--tools", str(tools), "weather"],
    }[command]
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert line == f"toolroute: error: tool file {str(tools)!r} holds no tools: {json.dumps(empty)}"
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("argv", "env", "says"),
    [
        (
            ["route", "--provider", "logprob", "x"],
            {},
            "decision provider 'logprob' is not configured: set TOOLROUTE_LOGPROB_BASE_URL and"
            " TOOLROUTE_LOGPROB_MODEL",
        ),
        (
            ["route", "x"],
            {"TOOLROUTE_DECISION_PROVIDER": "openai-decisions"},
            "decision provider 'openai-decisions' (from TOOLROUTE_DECISION_PROVIDER) is not"
            " configured: set OPENAI_API_KEY",
        ),
    ],
)
def test_route_with_a_named_provider_not_configured_is_one_error_line(
    argv: list[str],
    env: dict[str, str],
    says: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Not "decision provider: none configured (every server is kept)" and exit 0."""
    for name in (
        "TOOLROUTE_DECISION_PROVIDER",
        "TOOLROUTE_LOGPROB_BASE_URL",
        "TOOLROUTE_LOGPROB_MODEL",
        "OPENAI_API_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(argv) == 2
    assert one_error_line(capsys) == f"toolroute: error: {says}"
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "1e999"])
def test_threshold_must_be_a_finite_number(
    value: str, tools_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["select", "--tools", str(tools_file), "--embedder", "none", f"--threshold={value}", "x"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith(
        "toolroute select: error: argument --threshold: expected a finite number"
    )
    assert line.endswith("(see 'toolroute select --help')")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["eval", "--sample", "0"],
            "argument --sample: expected an integer of at least 1, got '0'",
        ),
        (["eval", "--sample", "-3"], "argument --sample: expected an integer of at least 1"),
        (["route", "--deadline", "0", "x"], "argument --deadline: expected a number above 0"),
        (["route", "--deadline", "nan", "x"], "argument --deadline: expected a finite number"),
    ],
)
def test_out_of_range_options_are_one_line(
    argv: list[str],
    says: str,
    tools_file: Path,
    queries_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if argv[0] == "eval":
        argv = [*argv, "--tools", str(tools_file), "--queries", str(queries_file)]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert says in one_error_line(capsys)


@pytest.mark.parametrize(
    ("queries", "extra", "says"),
    [
        ([], [], "no queries to score in '{q}'"),
        (
            [{"query": "hello", "expected": []}, {"query": "hi there", "expected": []}],
            [],
            "none of the 2 queries in '{q}' names an expected tool: nothing to score",
        ),
        # sha1 puts "weather in Rome" in the dev split, so the test split is empty
        (
            [{"query": "weather in Rome", "expected": "get_weather"}],
            ["--split", "test"],
            "no queries to score in '{q}' (test split)",
        ),
    ],
)
def test_eval_with_nothing_to_score_is_refused(
    queries: object,
    extra: list[str],
    says: str,
    tools_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = write(tmp_path, "q.json", queries)
    argv = [
        "eval",
        "--tools",
        str(tools_file),
        "--queries",
        str(path),
        "--embedder",
        "none",
        *extra,
    ]
    assert main(argv) == 2
    assert one_error_line(capsys) == "toolroute: error: " + says.format(q=path)
    assert capsys.readouterr().out == ""


def test_expected_ids_outside_the_catalogue_are_named(
    tools_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queries = [
        {"query": "weather in Paris", "expected": "get_weather"},
        {"query": "email my boss", "expected": ["sendEmail"]},
        {"query": "a bug", "expected_groups": [["create_issue", "open_ticket"]]},
        {"query": "mail again", "expected": ["sendEmail"]},
    ]
    path = write(tmp_path, "q.json", queries)
    assert (
        main(["eval", "--tools", str(tools_file), "--queries", str(path), "--embedder", "none"])
        == 2
    )
    assert one_error_line(capsys) == (
        f"toolroute: error: {path}: 2 expected tool id(s) are not in the catalogue: "
        "'sendEmail' (item 1, 3), 'open_ticket' (item 2); "
        "expected ids are catalogue tool ids such as 'get_weather'"
    )


def json_says(text: str) -> str:
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return f"is not valid JSON: {error.msg} at line {error.lineno}, column {error.colno}"
    raise AssertionError(f"{text!r} is valid JSON")


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("[", "is not valid JSON: Expecting value at line 1, column 2"),
        ('{"a": 1,}', json_says('{"a": 1,}')),  # Python 3.13 words this one otherwise
        (b"\xff\xfe[]", "is not UTF-8: invalid start byte"),
        ("[" * 100_000 + "]" * 100_000, "is not valid JSON: nested too deeply"),
    ],
)
def test_json_errors_are_worded_alike_for_tools_and_queries(
    content: str | bytes,
    says: str,
    tools_file: Path,
    queries_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = tmp_path / "bad.json"
    if isinstance(content, bytes):
        bad.write_bytes(content)
    else:
        bad.write_text(content)
    common = ["--embedder", "none"]
    assert main(["eval", "--tools", str(bad), "--queries", str(queries_file), *common]) == 2
    assert one_error_line(capsys) == f"toolroute: error: tool file {str(bad)!r} {says}"
    assert main(["eval", "--tools", str(tools_file), "--queries", str(bad), *common]) == 2
    assert one_error_line(capsys) == f"toolroute: error: queries file {str(bad)!r} {says}"


def test_missing_queries_file_is_worded_as_a_missing_tool_file(
    tools_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.json"
    assert main(["eval", "--tools", str(tools_file), "--queries", str(missing)]) == 2
    assert one_error_line(capsys) == (
        f"toolroute: error: cannot read queries file {str(missing)!r}: No such file or directory"
    )


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["select", "--embedder", "none", "x"])
    assert exit_info.value.code == 2
    assert one_error_line(capsys) == (
        "toolroute select: error: the following arguments are required: --tools "
        "(see 'toolroute select --help')"
    )


def test_an_unusable_cache_directory_is_one_warning_line(tools_file: Path, tmp_path: Path) -> None:
    # A path below a regular file cannot be created, even by root (CI runs as root).
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolroute",
            "select",
            "--tools",
            str(tools_file),
            "--embedder",
            "hashing",
            "--cache-dir",
            str(blocker / "cache"),
            "weather in Paris",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0  # the cache only saves time: the selection is still right
    assert "get_weather" in result.stdout
    assert result.stderr.splitlines() == [
        f"toolroute: warning: cannot write embedding cache in {blocker / 'cache'} "
        f"([Errno 20] Not a directory: {str(blocker / 'cache')!r}); continuing without a cache"
    ]


def _eval_args(tools_file: Path, queries_file: Path, *gates: str) -> list[str]:
    return [
        "eval",
        "--tools",
        str(tools_file),
        "--queries",
        str(queries_file),
        "--embedder",
        "none",
        "--json",
        *gates,
    ]


def test_eval_gates_met_exit_zero(
    tools_file: Path, queries_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        _eval_args(
            tools_file,
            queries_file,
            "--min-hit5",
            "0.6",
            "--min-recall5",
            "0.6",
            "--min-mrr",
            "0.5",
        )
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["hit@5"] >= 0.6
    assert "gate" not in captured.err


def test_eval_gate_missed_exits_one_with_one_line(
    tools_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queries = tmp_path / "hard.json"
    queries.write_text(
        json.dumps(
            [
                {"query": "weather in Paris", "expected": "get_weather"},
                {"query": "zzz qqq", "expected": "send_email"},
            ]
        )
    )
    code = main(_eval_args(tools_file, queries, "--min-hit5", "0.75", "--min-mrr", "0.1"))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err == ["toolroute: gate failed: hit@5 0.500 < --min-hit5 0.75"]


def test_eval_gates_name_every_shortfall_on_one_line(
    tools_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queries = tmp_path / "hard.json"
    queries.write_text(json.dumps([{"query": "zzz qqq", "expected": "send_email"}]))
    code = main(
        _eval_args(
            tools_file,
            queries,
            "--k",
            "1",
            "--min-hit5",
            "0.5",
            "--min-recall5",
            "0.5",
            "--min-mrr",
            "0.5",
            "--max-p50-ms",
            "1e-9",
        )
    )
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert line.startswith("toolroute: gate failed: hit@5 0.000 < --min-hit5 0.5; ")
    assert "recall@5 0.000 < --min-recall5 0.5" in line
    assert "mrr 0.000 < --min-mrr 0.5" in line
    assert "latency_ms.p50 " in line
    assert "> --max-p50-ms 1e-09" in line


@pytest.mark.parametrize(
    ("option", "value"), [("--min-hit5", "75"), ("--min-mrr", "-0.1"), ("--max-p50-ms", "0")]
)
def test_eval_gate_out_of_range_is_a_usage_error(
    tools_file: Path,
    queries_file: Path,
    option: str,
    value: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(_eval_args(tools_file, queries_file, option, value))
    assert exited.value.code == 2
    assert option in capsys.readouterr().err


def test_select_explain_prints_why_each_tool_is_shown_and_an_asked_one_hidden(
    tools_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["select", "--tools", str(tools_file), "--embedder", "none", "--max-tools", "1"]
    code = main([*args, "--explain-tool", "create_issue", "weather in Paris"])
    out = capsys.readouterr().out
    assert code == 0
    assert "why get_weather: shown, ranked #1 (score " in out
    assert "matched weather" in out
    assert "why create_issue: hidden, not_recalled" in out
    assert "Paris" not in out.split("\n", 1)[1]  # only the header echoes the request


def test_select_explain_json_carries_the_records(
    tools_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["select", "--tools", str(tools_file), "--embedder", "none", "--json", "--explain"]
    assert main([*args, "weather in Paris"]) == 0
    line = json.loads(capsys.readouterr().out)
    (explanation,) = line["explanations"]
    assert explanation["tool_id"] == "get_weather"
    assert explanation["reason"] == "ranked"
    assert explanation["matched_words"] == ["weather"]


def test_select_explain_of_an_unknown_tool_is_an_error(
    tools_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["select", "--tools", str(tools_file), "--embedder", "none", "--explain-tool", "nope"]
    assert main([*args, "weather"]) == 2
    assert "explain names tools not in the catalogue: 'nope'" in capsys.readouterr().err


def test_route_over_a_file_without_servers_says_how_to_name_them(
    tools_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["route", "--tools", str(tools_file), "weather in Paris"]) == 0
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        f"toolroute: warning: tool file {str(tools_file)!r} names no servers, so there is "
        'nothing to route: give each tool a "server" field (in OpenAI Chat Completions tools, '
        'inside "function"), or list them per server as '
        '{"servers": [{"name": ..., "tools": [...]}]}'
    ]
    assert "  kept:    -" in out.splitlines()


def test_route_reads_the_servers_the_warning_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The two ways the warning offers both give the file servers.
    nested = [{"type": "function", "function": {**TOOLS[0], "server": "weather"}}]
    listed = {"servers": [{"name": "weather", "tools": [TOOLS[0]]}]}
    for data in (nested, listed):
        assert main(["route", "--tools", str(write(tmp_path, "t.json", data)), "rain?"]) == 0
        out, err = capsys.readouterr()
        assert err == ""
        assert out.startswith("1 server;")
        assert "  kept:    weather" in out.splitlines()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--bogus", "--other"], "unrecognized arguments: --bogus --other"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_an_unknown_option_is_named_before_a_missing_command(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert one_error_line(capsys) == f"toolroute: error: {message} (see 'toolroute --help')"


def test_events_from_start_without_follow_or_group_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Refused before any connection: nothing listens on port 1.
    assert main(["events", "--redis", "redis://127.0.0.1:1", "--from-start"]) == 2
    assert one_error_line(capsys) == (
        "toolroute: error: --from-start goes with --follow or --group; without them every "
        "event the stream holds is printed already"
    )


def test_events_from_start_with_a_group_is_accepted() -> None:
    pytest.importorskip("coredis")
    # With --group it says where a new group begins: accepted (the connection then fails; in
    # a process of its own, as the client's unclosed streams would warn in this one).
    command = ["events", "--redis", "redis://127.0.0.1:1", "--group", "g", "--from-start"]
    done = subprocess.run(
        [sys.executable, "-m", "toolroute", *command],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "cannot read events from redis://127.0.0.1:1" in done.stderr


def test_demo_without_an_embedder_says_it_has_no_vectors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--embedder", "none", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    ready = next(line for line in out.splitlines() if line.startswith("Index ready"))
    assert "(keyword only: no embedder, no tool vectors); strategy keyword" in ready


async def _demo_conversation(json_lines: bool = False) -> list[str]:
    from toolroute import Catalog, EngineConfig, open_engine
    from toolroute._cli.demo import converse
    from toolroute.providers import HashingEmbedder

    lines: list[str] = []
    config = EngineConfig(cache=False)
    async with open_engine(Catalog.demo(), config=config, embedder=HashingEmbedder()) as engine:
        await engine.ready()
        await converse(engine, lines.append, json_lines)
    return "\n".join(lines).splitlines()


async def test_demo_prints_each_steps_event_under_that_step_the_same_every_run() -> None:
    runs = [await _demo_conversation() for _ in range(4)]
    latency = re.compile(r"\d+\.\d ms")  # the one part that differs from run to run
    assert len({tuple(latency.sub("ms", line) for line in run) for run in runs}) == 1
    under: dict[str, list[str]] = {}
    heading = ""
    for line in runs[0]:
        if line.startswith("step "):
            heading = line
            under[heading] = []
        elif heading and line.startswith("  event "):
            under[heading].append(line)
    assert list(under) == [
        "step the user's request",
        "step the same step again (the agent retries it)",
        "step after a tool call",
        "step after a step with no tool call (next page)",
        "step after two steps with no tool call (every tool)",
    ]
    pages = [re.findall(r"step\.finished: page (\d)", " ".join(e)) for e in under.values()]
    assert pages == [["0"], ["0"], ["0"], ["1"], ["2"]]
    assert under["step after two steps with no tool call (every tool)"][0].endswith("every tool")


async def test_demo_json_lines_are_each_steps_events_in_step_order() -> None:
    events = [json.loads(line) for line in await _demo_conversation(json_lines=True)]
    assert events[0]["type"] == "subscription.started"
    assert [e["page"] for e in events if e["type"] == "step.finished"] == [0, 0, 0, 1, 2]


def _select_examples() -> list[tuple[list[str], list[str]]]:
    """The ``$ toolroute select …`` examples of docs/cli.md: the arguments and the lines shown."""
    import shlex

    page = (Path(__file__).parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    section = page[page.index("## select\n") : page.index("## eval\n")]
    examples = []
    for block in section.split("```text\n")[1:]:
        command, *shown = block.split("```")[0].strip().splitlines()
        examples.append((shlex.split(command.removeprefix("$ toolroute ")), shown))
    return examples


def test_the_select_examples_of_the_docs_print_as_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    servers = {"get_weather": "weather", "send_email": "gmail", "create_issue": "github"}
    tools = write(tmp_path, "tools.json", [{**t, "server": servers[t["name"]]} for t in TOOLS])
    examples = _select_examples()
    assert len(examples) == 2
    assert not any(line.lstrip().startswith("why ") for line in examples[0][1])  # no --explain
    for argv, shown in examples:
        argv = [str(tools) if arg == "tools.json" else arg for arg in argv]
        assert main([*argv, "--no-cache"]) == 0
        printed = capsys.readouterr().out.splitlines()
        latency = re.compile(r"\d+\.\d ms")  # the one part that differs from run to run
        assert [latency.sub("ms", line) for line in printed] == [
            latency.sub("ms", line) for line in shown
        ]


def test_select_says_how_it_read_a_misspelled_request(
    capsys: pytest.CaptureFixture[str], tools_file: Path
) -> None:
    argv = ["select", "--tools", str(tools_file), "--embedder", "none", "--max-tools", "1"]
    assert main([*argv, "wether forcast", "weather forecast"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:4] == [
        "wether forcast",
        "  keyword, " + out[1].split(", ")[1],
        "  read as: weather forecast",
        out[3],
    ]
    assert "get_weather" in out[3]
    assert sum(line.startswith("  read as:") for line in out) == 1  # not for the second
    assert main([*argv, "--json", "wether forcast", "weather"]) == 0
    first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert (first["read_as"], first["tool_ids"]) == ("weather forecast", ["get_weather"])
    assert "read_as" not in second


def test_a_name_the_terminal_cannot_encode_is_printed_escaped(tmp_path: Path) -> None:
    tools = write(tmp_path, "t.json", [{"name": "翻訳", "description": "translate text"}])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolroute",
            "select",
            "--tools",
            str(tools),
            "--embedder",
            "none",
            "translate text",
        ],
        capture_output=True,
        text=True,
        encoding="ascii",
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].endswith("  \\u7ffb\\u8a33")

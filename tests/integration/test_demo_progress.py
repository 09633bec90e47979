"""The embedding progress of the CLI: redrawn in place on a terminal, whole lines in a log."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

from toolroute._cli.main import _progress_printer


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_demo_progress_in_a_pipe_is_whole_lines(tmp_path: Path) -> None:
    done = subprocess.run(
        ["toolroute", "demo", "--embedder", "hashing", "--cache-dir", str(tmp_path)],
        capture_output=True,
        check=True,
    )
    # Bytes, not text: universal newlines would turn a carriage return into a line end.
    stderr = done.stderr.decode()
    assert "\r" not in stderr
    progress = [line for line in stderr.splitlines() if line.startswith("embedding tools:")]
    assert progress, stderr
    assert progress[-1] == "embedding tools: 50/50"
    assert stderr.endswith("\n")


def test_progress_off_a_terminal_prints_at_most_one_line_per_tenth() -> None:
    log = io.StringIO()
    report = _progress_printer(log)
    for done in range(1001):
        report(done, 1000)
    lines = log.getvalue().splitlines(keepends=True)
    assert all(line.endswith("\n") and "\r" not in line for line in lines)
    assert lines[0] == "embedding tools: 0/1000\n"
    assert lines[-1] == "embedding tools: 1000/1000\n"
    assert len(lines) == 11


def test_progress_on_a_terminal_redraws_one_line() -> None:
    screen = Terminal()
    report = _progress_printer(screen)
    for done in (0, 20, 50):
        report(done, 50)
    assert screen.getvalue() == (
        "\rembedding tools: 0/50\rembedding tools: 20/50\rembedding tools: 50/50\n"
    )

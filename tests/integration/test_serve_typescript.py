"""The TypeScript example (``examples/typescript``) against a live ``toolroute serve``: it is
compiled with the pinned ``tsc`` and run with Node, with a token, and every call it makes must
answer as the summary line says. Skipped where Node is absent; ``.ci/run`` runs ``npm ci``
first (the test itself never reaches the network)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from serving import demo_catalog_file, start_serve

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "typescript"
TSC = EXAMPLE / "node_modules" / "typescript" / "bin" / "tsc"
RUN_S = 300.0


@pytest.fixture
def compiled(tmp_path: Path) -> Path:
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    if not TSC.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{TSC} is missing: .ci/run must run `npm ci` in {EXAMPLE}")
        pytest.skip(f"run `npm ci` in {EXAMPLE} first")
    out = tmp_path / "dist"
    subprocess.run(
        ["node", str(TSC), "-p", str(EXAMPLE), "--outDir", str(out)],
        check=True,
        timeout=RUN_S,
        capture_output=True,
    )
    (out / "package.json").write_text('{"type": "module"}', "utf-8")  # ESM, as the example
    return out


def test_the_typescript_client_drives_a_live_service(compiled: Path, tmp_path: Path) -> None:
    catalog = demo_catalog_file(tmp_path)
    service = start_serve(
        [
            "--catalog",
            str(catalog),
            "--embedder",
            "hashing",
            "--port",
            "0",
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        env={"TOOLROUTE_TOKEN": "ts-tok3n"},
    )
    try:
        result = subprocess.run(
            ["node", str(compiled / "main.js"), service.url],
            capture_output=True,
            text=True,
            timeout=RUN_S,
            env={**os.environ, "TOOLROUTE_TOKEN": "ts-tok3n"},
        )
    finally:
        service.close()
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["selected"]
    assert "send_email" in summary["step"]
    assert "run_query" in summary["found"]
    assert summary["routing"] == "failed_open"  # no router configured: every server kept
    assert summary["refused"] == {"status": 400, "type": "invalid_body", "field": "max_tools"}
    assert summary["event"] == "selection.finished"

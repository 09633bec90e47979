"""Peer runner for the npm package ``toolpick`` (pontusab/toolpick), keyword ("hybrid") strategy.

``run(tools, queries, k, workdir=...)`` installs pinned toolpick + its peer deps with npm into
``workdir/toolpick-npm`` (once; reused while the pins match), copies ``toolpick_runner.mjs`` there,
runs it with node on a temp JSON input and returns a :class:`PeerResult`. Anything that keeps
toolpick from running here (no node/npm, node too old, npm install fails or times out, the runner
fails) raises :class:`PeerUnavailable` with a one-line reason.

What is measured (see the comment at the top of ``toolpick_runner.mjs``): build = ``createToolIndex``
+ ``warmUp()``; per query = ``await index.select(q, {maxTools: k, adaptive: false})`` in the same node
process, after ``warmup`` untimed queries. Tools are given as AI-SDK
``tool({description, inputSchema: jsonSchema(parameters)})`` keyed by name, so toolpick indexes
``description + parameter names`` as for its real users.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .peer import PeerResult, PeerUnavailable

TOOLPICK_VERSION = "0.4.0"
# toolpick's peer deps are ai >=4.0 and zod >=3.25 || >=4.0. ai 7.x needs node >=22, so pin the
# newest 6.x (node >=18) to run on the node 20 we have.
PEER_DEPS = {"ai": "6.0.326", "zod": "4.6.7"}
MIN_NODE_MAJOR = 18

RUNNER = Path(__file__).resolve().with_name("toolpick_runner.mjs")
SCRATCH_NAME = "toolpick-npm"
MARKER = ".toolpick-peer.json"
INSTALL_TIMEOUT_S = 300.0


def _pins() -> dict[str, str]:
    return {"toolpick": TOOLPICK_VERSION, **PEER_DEPS}


def _one_line(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    # npm puts the useful part on the "npm error" lines; prefer the first of those.
    errs = [
        ln
        for ln in lines
        if ln.startswith(("npm error", "npm ERR!"))
        and not re.match(r"npm (error|ERR!) (code|errno) ", ln)
        and "A complete log" not in ln
    ]
    line = (errs[0] if errs else (lines[-1] if lines else "no output")).strip()
    return line[:limit]


def _exe(name: str) -> str:
    path = shutil.which(name)
    if not path:
        raise PeerUnavailable(f"toolpick needs `{name}` on PATH and it was not found")
    return path


def _node_version(node: str) -> str:
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PeerUnavailable(f"`node --version` failed: {exc}") from None
    version = out.stdout.strip()
    m = re.match(r"v(\d+)\.", version)
    if out.returncode != 0 or not m:
        raise PeerUnavailable(f"`node --version` failed: {_one_line(out.stderr or out.stdout)}")
    if int(m.group(1)) < MIN_NODE_MAJOR:
        raise PeerUnavailable(f"toolpick needs node >= {MIN_NODE_MAJOR}, found {version}")
    return version


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Serialise installs into one scratch folder across processes."""
    with open(folder / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _installed_ok(scratch: Path) -> bool:
    try:
        if json.loads((scratch / MARKER).read_text()) != _pins():
            return False
        for name, version in _pins().items():
            pkg = json.loads((scratch / "node_modules" / name / "package.json").read_text())
            if pkg.get("version") != version:
                return False
    except (OSError, ValueError):
        return False
    return True


def ensure_installed(workdir: Path) -> Path:
    """Install the pinned packages into ``workdir/toolpick-npm`` unless already there; return it."""
    npm = _exe("npm")
    scratch = Path(workdir) / SCRATCH_NAME
    try:
        scratch.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PeerUnavailable(f"cannot create {scratch}: {exc}") from None
    with _locked(scratch):
        if _installed_ok(scratch):
            return scratch
        (scratch / MARKER).unlink(missing_ok=True)
        # An own package.json keeps npm from walking up to some parent project.
        (scratch / "package.json").write_text(
            json.dumps(
                {"name": "toolpick-peer-scratch", "private": True, "type": "module"}, indent=1
            )
            + "\n"
        )
        specs = [f"{name}@{version}" for name, version in _pins().items()]
        cmd = [npm, "install", "--no-audit", "--no-fund", "--save-exact", *specs]
        try:
            out = subprocess.run(
                cmd,
                cwd=scratch,
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
                env={**os.environ, "npm_config_update_notifier": "false"},
            )
        except subprocess.TimeoutExpired:
            raise PeerUnavailable(
                f"`npm install toolpick@{TOOLPICK_VERSION}` timed out after {INSTALL_TIMEOUT_S:.0f}s"
            ) from None
        except OSError as exc:
            raise PeerUnavailable(f"`npm install` could not start: {exc}") from None
        if out.returncode != 0:
            raise PeerUnavailable(
                f"`npm install toolpick@{TOOLPICK_VERSION}` failed: {_one_line(out.stderr or out.stdout)}"
            )
        (scratch / MARKER).write_text(json.dumps(_pins()))
        if not _installed_ok(scratch):
            raise PeerUnavailable(
                f"`npm install` finished but toolpick@{TOOLPICK_VERSION} / {PEER_DEPS} are not all in place"
            )
    return scratch


def run(
    tools: list[dict[str, Any]],
    queries: list[str],
    k: int,
    *,
    workdir: Path,
    warmup: int = 20,
    timeout_s: float | None = None,
) -> PeerResult:
    """Rank ``queries`` against ``tools`` with toolpick's keyword strategy; top ``k`` names each."""
    node = _exe("node")
    node_version = _node_version(node)
    scratch = ensure_installed(Path(workdir))

    script = scratch / RUNNER.name
    try:
        shutil.copyfile(RUNNER, script)  # ESM resolves `toolpick`/`ai` from the script's folder
    except OSError as exc:
        raise PeerUnavailable(f"cannot copy {RUNNER.name} to {scratch}: {exc}") from None

    payload = {
        "tools": [
            {
                "name": t["name"],
                "description": t.get("description") or "",
                "parameters": t.get("parameters") or {},
            }
            for t in tools
        ],
        "queries": list(queries),
        "k": int(k),
        "warmup": int(warmup),
    }
    if timeout_s is None:
        # generous: ~0.2 ms per tool per query on top of a fixed allowance (real runs are ~10x faster)
        timeout_s = 120.0 + 0.0002 * max(1, len(tools)) * (len(queries) + int(warmup))
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=scratch, delete=False) as fh:
        json.dump(payload, fh)
        input_path = Path(fh.name)
    try:
        try:
            out = subprocess.run(
                [node, script.name, input_path.name],
                cwd=scratch,
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            raise PeerUnavailable(f"toolpick runner timed out after {timeout_s:.0f}s") from None
        except OSError as exc:
            raise PeerUnavailable(f"could not start node: {exc}") from None
    finally:
        input_path.unlink(missing_ok=True)
    if out.returncode != 0:
        raise PeerUnavailable(
            f"toolpick runner failed (exit {out.returncode}): {_one_line(out.stderr or out.stdout)}"
        )
    try:
        data = json.loads(out.stdout.strip().splitlines()[-1])
        rankings = [list(map(str, r)) for r in data["rankings"]]
        latencies = [float(x) for x in data["latencies_ms"]]
        build_s = float(data["build_ms"]) / 1000.0
        version = str(data["version"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise PeerUnavailable(
            f"toolpick runner printed no valid result: {_one_line(out.stdout)}"
        ) from None
    if len(rankings) != len(queries) or len(latencies) != len(queries):
        raise PeerUnavailable(
            f"toolpick runner returned {len(rankings)} rankings for {len(queries)} queries"
        )

    how = (
        f"npm toolpick@{version} (ai@{PEER_DEPS['ai']}, zod@{PEER_DEPS['zod']}) on node {data.get('node', node_version)}; "
        f"tools as ai tool({{description, inputSchema: jsonSchema(parameters)}}) keyed by name; "
        f"createToolIndex(tools, {{strategy: 'hybrid'}}) + warmUp() timed as build; "
        f"per query: await index.select(q, {{maxTools: {k}, adaptive: false}}) timed with process.hrtime.bigint "
        f"in one node process after {warmup} untimed warm-up queries (no reranker, no embeddings)"
    )
    return PeerResult(
        rankings, latencies, build_s, version, how, peak_rss_mb=data.get("peak_rss_mb")
    )

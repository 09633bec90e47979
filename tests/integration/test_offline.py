"""The default embedder never reaches the network, even with a cold, empty HOME."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# Runs in a fresh interpreter. The audit hook is installed before toolroute (and
# numpy, onnxruntime, tokenizers) are imported, so import-time downloads count too.
# It both records and raises: a caller that swallows the exception is still caught.
SCRIPT = r"""
import json, sys

BLOCKED = {
    "socket.connect", "socket.getaddrinfo", "socket.gethostbyname",
    "socket.gethostbyname_ex", "socket.gethostbyaddr", "socket.sendto", "urllib.Request",
}
events = []

def hook(event, args):
    if event in BLOCKED:
        events.append([event, repr(args)[:200]])
        raise RuntimeError(f"network access attempted: {event}")

sys.addaudithook(hook)

from toolroute.providers._embedders.minilm import default_embedder

vectors = default_embedder().embed(["is this offline?"])
print(json.dumps({"events": events, "shape": list(vectors.shape)}))
"""


def clean_env(home: Path) -> dict[str, str]:
    # No proxies, no caches, no HF_HUB_OFFLINE: nothing that could hide a download.
    env = {"PATH": os.defpath, "HOME": str(home), "LANG": "C.UTF-8"}
    if sys.platform == "win32":  # pragma: no cover - the interpreter needs it
        env["SYSTEMROOT"] = os.environ["SYSTEMROOT"]
    return env


def run_offline(prefix: list[str], home: Path) -> dict[str, object]:
    proc = subprocess.run(
        [*prefix, sys.executable, "-c", SCRIPT],
        env=clean_env(home),
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_default_embedder_makes_no_network_calls(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    result = run_offline([], home)
    assert result == {"events": [], "shape": [1, 384]}
    assert list(home.iterdir()) == []  # nothing cached or downloaded into HOME


def unshare_works() -> bool:
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False)
    return probe.returncode == 0


def test_default_embedder_works_without_a_network_namespace(tmp_path: Path) -> None:
    if not unshare_works():
        pytest.skip("`unshare -n` is unavailable here (needs Linux and CAP_SYS_ADMIN)")
    home = tmp_path / "home"
    home.mkdir()
    result = run_offline([shutil.which("unshare") or "unshare", "-n"], home)
    assert result == {"events": [], "shape": [1, 384]}


def strace_works() -> bool:
    if sys.platform != "linux" or shutil.which("strace") is None:
        return False
    probe = subprocess.run(["strace", "-qq", "-o", os.devnull, "true"], capture_output=True)
    return probe.returncode == 0


def test_no_native_code_opens_an_internet_socket(tmp_path: Path) -> None:
    # Audit hooks only see Python-level calls; onnxruntime ships a native telemetry
    # client (mobile.events.data.microsoft.com), so also watch the system calls.
    if not strace_works():
        pytest.skip("strace is unavailable or ptrace is not permitted here")
    home = tmp_path / "home"
    home.mkdir()
    trace = tmp_path / "trace.txt"
    prefix = ["strace", "-f", "-qq", "-e", "trace=socket,connect", "-o", str(trace)]
    assert run_offline(prefix, home) == {"events": [], "shape": [1, 384]}
    inet = [
        line
        for line in trace.read_text().splitlines()
        if "AF_INET" in line  # AF_INET and AF_INET6; AF_UNIX (nscd lookups) is local
    ]
    assert inet == []

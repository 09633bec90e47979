"""One ToolIndex shared by the threads of a synchronous server, and by forked workers."""

from __future__ import annotations

import random
import subprocess
import sys
import threading

import pytest

from toolroute import Catalog, ToolIndex

REQUESTS = (
    "weather in Oslo",
    "open an issue about the login crash",
    "email my boss the report",
    "list the files in my home folder",
    "what is on my calendar tomorrow",
    "run a query on the sales table",
    "post in the eng channel",
    "wether forcast for lisbon",
)


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    return ToolIndex(Catalog.demo(), cache=None)


def test_threads_sharing_an_index_get_the_answers_of_one_thread(index: ToolIndex) -> None:
    alone = {request: index.select(request).tool_ids for request in REQUESTS}
    answers: list[tuple[str, tuple[str, ...]]] = []
    failures: list[BaseException] = []
    start = threading.Barrier(8)

    def serve(seed: int) -> None:
        draw = random.Random(seed)
        start.wait()
        for _ in range(60):
            request = draw.choice(REQUESTS)
            try:
                answers.append((request, index.select(request).tool_ids))
            except BaseException as exc:  # reported below, with the thread gone
                failures.append(exc)

    threads = [threading.Thread(target=serve, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(answers) == 8 * 60
    assert [(r, ids) for r, ids in answers if ids != alone[r]] == []


#: gunicorn --preload in small: the parent builds the index, a forked worker selects with it.
#: In a process of its own: a test process has threads, and Python 3.12+ warns on their fork.
PRELOAD = """
import os, sys
from toolroute import Catalog, ToolIndex
requests = sys.argv[1:]
index = ToolIndex(Catalog.demo(), cache=None)
parent = [index.select(r).tool_ids for r in requests]
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, repr([index.select(r).tool_ids for r in requests]).encode())
    os._exit(0)
os.close(write)
with os.fdopen(read) as pipe:
    child = pipe.read()
assert os.waitpid(pid, 0)[1] == 0
assert child == repr(parent), (child, parent)
print(len(parent))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="fork is POSIX")
def test_a_forked_worker_selects_with_the_index_its_parent_built() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PRELOAD, *REQUESTS],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(len(REQUESTS))

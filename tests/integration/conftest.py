"""Fixtures shared by the integration tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from redisbox.server import RedisServer


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A real ``redis-server`` of the test's own on a free loopback port."""
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()

"""One upstream's deadlines and retry pauses in virtual time, with a fake connection in place
of a server process (the real ones are in test_mcp_live), and the pure rules beside them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("mcp")

import mcp_types as types

from toolroute import Catalog, Tool
from toolroute._gateway.listing import Activations
from toolroute.integrations._mcp import upstream as upstream_module
from toolroute.integrations._mcp.upstream import McpConfig, Upstream, retry_pause
from toolroute.integrations.mcp import McpServerConfig

SPEC = McpServerConfig(name="fake", command="fake-server")


class FakeClient:
    """A connection that hangs while starting, fails at once, or lists one tool and then
    answers pings until told to break."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.broken = trio.Event()
        self.session = self

    async def list_tools(self, **_: Any) -> types.ListToolsResult:
        tool = types.Tool(name="only", description="the one tool", input_schema={})
        return types.ListToolsResult(tools=[tool])

    async def send_ping(self) -> None:
        if self.broken.is_set():
            raise ConnectionError("the server went away")


def connections(behaviours: list[str], made: list[FakeClient]) -> Any:
    @contextlib.asynccontextmanager
    async def connect(spec: McpServerConfig, on_message: Any) -> AsyncIterator[FakeClient]:
        client = FakeClient(behaviours.pop(0) if behaviours else "fail")
        made.append(client)
        if client.behaviour == "hang":
            await trio.sleep_forever()
        if client.behaviour == "fail":
            raise FileNotFoundError("no such command: fake-server")
        yield client

    return connect


async def test_a_server_that_never_answers_is_down_at_its_connect_deadline(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[FakeClient] = []
    monkeypatch.setattr(upstream_module, "_client", connections(["hang"], made))
    upstream = Upstream(SPEC, McpConfig(connect_s=7.0), lambda: None)
    async with trio.open_nursery() as nursery:
        started = trio.current_time()
        await nursery.start(upstream.run)
        assert trio.current_time() - started == pytest.approx(7.0)
        assert upstream.status.state == "down"
        assert "within 7 s" in upstream.status.error
        nursery.cancel_scope.cancel()


async def test_reconnection_pauses_double_up_to_the_cap_and_reset_after_a_good_connection(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[FakeClient] = []
    behaviours = ["fail", "fail", "fail", "fail", "up", "fail", "up"]
    monkeypatch.setattr(upstream_module, "_client", connections(behaviours, made))
    config = McpConfig(retry_initial_s=1.0, retry_max_s=4.0, health_interval_s=0.5)
    changes: list[str] = []
    upstream = Upstream(SPEC, config, lambda: changes.append(upstream.status.state))
    async with trio.open_nursery() as nursery:
        await nursery.start(upstream.run)
        pauses = []
        while upstream.status.state != "up":
            pauses.append(upstream.status.retry_in_s)
            await trio.sleep(upstream.status.retry_in_s)
            await trio.testing.wait_all_tasks_blocked()
        assert pauses == [1.0, 2.0, 4.0, 4.0]  # doubled, capped
        assert upstream.tools[0].name == "only"
        made[-1].broken.set()  # the connection breaks: noticed by the next ping
        await trio.sleep(0.5 + 0.01)
        assert upstream.status.state == "down"
        assert upstream.status.retry_in_s == 1.0  # it had come up: the count starts again
        assert [t.name for t in upstream.tools] == ["only"]  # last known tools kept
        await trio.sleep(1.0 + 0.01)  # the pause; this reconnection fails
        assert (upstream.status.state, upstream.status.retry_in_s) == ("down", 2.0)
        await trio.sleep(2.0 + 0.01)  # the next one comes up
        assert upstream.status.state == "up"
        assert upstream.status.connections == 2
        assert upstream.status.failures == 6
        nursery.cancel_scope.cancel()


@given(failures=st.integers(min_value=1, max_value=200))
def test_retry_pauses_grow_and_never_pass_the_cap(failures: int) -> None:
    config = McpConfig(retry_initial_s=0.5, retry_max_s=30.0)
    pause = retry_pause(failures, config)
    assert 0.5 <= pause <= 30.0
    assert retry_pause(failures + 1, config) >= pause


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("activate"), st.sampled_from("abc"), st.lists(st.sampled_from("uvwxyz"))),
        st.tuples(st.just("everything"), st.sampled_from("abc"), st.just([])),
    ),
    max_size=30,
)


@given(ops=OPS, limit=st.integers(min_value=1, max_value=4))
def test_a_connection_sees_served_tools_only_within_its_limit_and_everything_once_failed_open(
    ops: list[tuple[str, str, list[str]]], limit: int
) -> None:
    served = Catalog([Tool(name, name) for name in "uvwxy"])  # z is not served (dedup, say)
    activations = Activations(limit=limit, connections=2)
    for op, connection, ids in ops:
        if op == "activate":
            activations.activate(connection, ids)
            listing = activations.listing(connection, served)
            if listing != served.ids:  # unless it failed open earlier
                assert set(listing) <= set(ids) | set(served.ids)
                assert len(listing) <= limit
        else:
            activations.show_everything(connection)
            assert activations.listing(connection, served) == served.ids
        assert set(activations.listing(connection, served)) <= set(served.ids)

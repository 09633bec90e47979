"""The engine inside a real asyncio web server (uvicorn + Starlette) via trio guest mode."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import trio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import toolroute.asyncio as toolroute_asyncio
from toolroute import Catalog, ConfigError, EngineConfig

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message"},
        {"name": "create_issue", "description": "Open a GitHub issue"},
    ]
)
OTHER = Catalog.from_plain([{"name": "play_music", "description": "Play a song"}])
CONFIG = EngineConfig(cache=False)


def build_app() -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with (
            toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as tools,
            toolroute_asyncio.open_engine(OTHER, config=CONFIG, embedder=None) as music,
        ):
            app.state.tools, app.state.music = tools, music
            yield

    async def select(request: Request) -> JSONResponse:
        engine = (
            request.app.state.music
            if request.query_params.get("music")
            else request.app.state.tools
        )
        selection = await engine.select(request.query_params["q"])
        return JSONResponse({"tool_ids": list(selection.tool_ids)})

    return Starlette(routes=[Route("/select", select)], lifespan=lifespan)


async def serve_and_hit(requests: int) -> list[dict[str, list[str]]]:
    server = uvicorn.Server(
        uvicorn.Config(build_app(), host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn exposes a flag, not an event
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    limits = httpx.Limits(max_connections=requests)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=30
    ) as client:
        queries = [("email my boss", ""), ("weather in Rome", ""), ("play a song", "1")]

        async def one(i: int) -> dict[str, list[str]]:
            q, music = queries[i % 3]
            response = await client.get("/select", params={"q": q, "music": music})
            response.raise_for_status()
            return response.json()  # type: ignore[no-any-return]

        results = await asyncio.gather(*(one(i) for i in range(requests)))
    server.should_exit = True
    await serving
    return list(results)


def assert_served(results: list[dict[str, list[str]]]) -> None:
    assert len(results) == 200
    assert {r["tool_ids"][0] for r in results[0::3]} == {"send_email"}
    assert {r["tool_ids"][0] for r in results[1::3]} == {"get_weather"}
    assert {r["tool_ids"][0] for r in results[2::3]} == {"play_music"}
    assert not toolroute_asyncio._hosts  # the guest run stopped with the last engine


def test_200_concurrent_requests_through_a_real_server() -> None:
    assert_served(asyncio.run(serve_and_hit(200)))


def test_200_concurrent_requests_on_uvloop() -> None:
    # uvicorn's loop of choice where it is installed (`uvicorn[standard]`)
    uvloop = pytest.importorskip("uvloop")
    assert_served(uvloop.run(serve_and_hit(200)))


def test_cancelling_the_awaitable_cancels_the_trio_work() -> None:
    seen: list[str] = []

    async def slow() -> None:
        try:
            await trio.sleep(30)
        except trio.Cancelled:
            seen.append("cancelled")
            raise

    async def main() -> float:
        async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
            task = asyncio.create_task(engine._host.call(slow))
            await asyncio.sleep(0.05)
            started = time.monotonic()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            for _ in range(1000):  # up to 10 s: a loaded machine may be slow to switch
                if seen:
                    break
                await asyncio.sleep(0.01)
            selection = await engine.select("weather")  # the engine is still usable
            assert selection.tool_ids[0] == "get_weather"
            return time.monotonic() - started

    elapsed = asyncio.run(main())
    assert seen == ["cancelled"]
    assert elapsed < 15  # cancelled, not the 30 s sleep waited out (generous: real time)


def test_errors_reach_the_asyncio_caller() -> None:
    async def main() -> None:
        async with toolroute_asyncio.open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
            with pytest.raises(ConfigError, match="missing"):
                await engine.select("x", always_active=["missing"])

    asyncio.run(main())

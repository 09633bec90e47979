"""Stream the engine's events as server-sent events from a Starlette app on uvicorn.

python examples/sse_events.py --port 8000          # add --keyword-only to skip the model
curl -N http://127.0.0.1:8000/events                # one SSE frame per event
curl 'http://127.0.0.1:8000/select?q=weather+in+Oslo'

The app hosts the engine through ``toolroute.asyncio``. Every subscriber first gets a
``subscription.started`` frame (the engine's state), then one frame per event; a subscriber
that falls behind gets an ``events.dropped`` frame with the count. ``/select`` answers with
the selection and its ``request_id``, the same id the frames of that request carry.

One Ctrl-C stops the server even with clients connected: the engine ends its
subscriptions when the process is asked to stop, so every stream finishes and uvicorn's
graceful shutdown does not wait on them.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from toolroute import Catalog
from toolroute.asyncio import AsyncioEngine, open_engine
from toolroute.events import Delivery, EventsDropped, to_json


def sse_frames(delivery: Delivery) -> str:
    """One delivery as SSE frames: the loss first (if any), then the event."""
    frames = []
    if delivery.dropped and not isinstance(delivery.event, EventsDropped):
        frames.append(_frame(to_json(EventsDropped(count=delivery.dropped))))
    frames.append(_frame(to_json(delivery.event)))
    return "".join(frames)


def _frame(event_json: str) -> str:
    kind = event_json.split('"', 4)[3]  # to_json writes the "type" key first
    return f"event: {kind}\ndata: {event_json}\n\n"


def make_app(*, keyword_only: bool = False) -> Starlette:
    """The app: ``/events`` streams events, ``/select`` selects tools for ``?q=``."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        options = {"embedder": None} if keyword_only else {}
        async with open_engine(Catalog.demo(), decider=None, **options) as engine:
            app.state.engine = engine
            yield

    async def events(request: Request) -> StreamingResponse:
        engine: AsyncioEngine = request.app.state.engine

        async def stream() -> AsyncIterator[str]:
            async with engine.subscribe(buffer=64, snapshot=True) as deliveries:
                async for delivery in deliveries:
                    yield sse_frames(delivery)

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def select(request: Request) -> JSONResponse:
        engine: AsyncioEngine = request.app.state.engine
        selection = await engine.select(request.query_params.get("q", ""))
        return JSONResponse(
            {
                "request_id": selection.request_id,
                "tool_ids": list(selection.tool_ids),
                "outcome": selection.outcome,
            }
        )

    routes = [Route("/events", events), Route("/select", select)]
    return Starlette(routes=routes, lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--keyword-only", action="store_true", help="no embedding model")
    args = parser.parse_args()
    app = make_app(keyword_only=args.keyword_only)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")


if __name__ == "__main__":
    main()

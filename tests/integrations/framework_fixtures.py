"""Shared pieces of the adapters' tests: a small catalogue and an engine on asyncio."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import toolroute.asyncio
from toolroute import Catalog, EngineConfig
from toolroute.asyncio import AsyncioEngine
from toolroute.config import SelectionDefaults

#: The tools that ran, in order (a test clears it first): what a refusal must keep empty.
RAN: list[str] = []


def get_weather(city: str) -> str:
    """Weather forecast for a city."""
    RAN.append("get_weather")
    return f"sunny in {city}"


def send_email(to: str, subject: str) -> str:
    """Send an email message to one recipient."""
    RAN.append("send_email")
    return f"sent to {to}"


def create_issue(title: str) -> str:
    """Open an issue in the bug tracker."""
    RAN.append("create_issue")
    return f"opened {title}"


FUNCTIONS = [get_weather, send_email, create_issue]


@contextlib.asynccontextmanager
async def asyncio_engine(tools: list[Any] | None = None) -> AsyncIterator[AsyncioEngine]:
    """An asyncio engine over ``tools`` (the three functions by default): keyword recall
    (no model to load), one tool per step, nothing on disk."""
    catalog = Catalog.from_tools(tools if tools is not None else FUNCTIONS)
    config = EngineConfig(cache=False, selection=SelectionDefaults(max_tools=1))
    async with toolroute.asyncio.open_engine(catalog, config=config, embedder=None) as engine:
        await engine.ready()
        yield engine

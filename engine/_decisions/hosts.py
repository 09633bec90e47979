"""Which event loop a trio entry point was called from, so that a call from asyncio names
the asyncio form to use instead of trio's "must be called from async context"."""

from __future__ import annotations

import trio


def require_trio(operation: str, asyncio_form: str) -> None:
    """Return when running under trio (guest mode included).

    Raises:
        RuntimeError: called from another event loop (or none), naming ``asyncio_form``.
    """
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        raise RuntimeError(
            f"{operation} runs under trio (trio.run or a trio host) and this is not a trio "
            f"task; from asyncio (asyncio.run, FastAPI, agent SDKs) use {asyncio_form}, "
            "which runs the same engine on the asyncio loop"
        ) from None

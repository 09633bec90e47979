"""Which public operation the running code serves: its name, request id and session.

The facade opens a request context for every public call (``select``, ``prepare_step``,
``route_servers``, ...). Events published inside it are stamped with the request's id and
session by the hub (:func:`tagged`), and results carry the same id (:func:`stamped`), so a
consumer can tie a ``fail_open`` to the result it belongs to without every emit site
threading the id by hand.

The context is a ``ContextVar``: trio copies it into tasks spawned from the caller's task,
but an actor's children were spawned by the actor, so an actor that serves a caller's
request carries the caller's :class:`RequestTag` in the message and enters it with
:func:`serving` while it works on that request.
"""

from __future__ import annotations

import contextvars
import itertools
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import attrs

from .._core.events import Event, FailOpen
from . import telemetry
from .foreground import FOREGROUND
from .telemetry import RequestSpan

__all__ = [
    "RequestTag",
    "current",
    "enter",
    "leave",
    "open_request",
    "serving",
    "stamped",
    "tagged",
]

T = TypeVar("T")

#: A request id is this process's random prefix and a counter, 16 hex digits: unique across
#: the engines of a process, and across processes but for a 1-in-2**32 prefix clash; cheaper
#: per step than 8 random bytes.
_PREFIX = secrets.token_hex(4)
_COUNTER = itertools.count()


def new_request_id() -> str:
    return f"{_PREFIX}{next(_COUNTER) & 0xFFFFFFFF:08x}"


@attrs.frozen
class RequestTag:
    """One public call: what it is, its id, its session (``None`` for none), and its
    OpenTelemetry span when telemetry is on."""

    operation: str
    request_id: str
    session: str | None = None
    span: RequestSpan | None = attrs.field(default=None, eq=False)


_current: contextvars.ContextVar[RequestTag | None] = contextvars.ContextVar(
    "toolroute_request", default=None
)


def current() -> RequestTag | None:
    """The request the running code serves, or ``None`` outside any public call."""
    return _current.get()


@contextmanager
def open_request(operation: str, session: str | None = None) -> Iterator[RequestTag]:
    """A new request id for ``operation``, current for the block (with its span); the
    block counts as foreground work (``FOREGROUND``)."""
    request_id = new_request_id()
    with FOREGROUND.serving():  # background work stands aside until it ends
        if not telemetry.active():  # the common case, on every step: no span machinery
            tag = RequestTag(operation, request_id, session)
            token = _current.set(tag)
            try:
                yield tag
            finally:
                _current.reset(token)
            return
        with telemetry.request_span(operation, request_id, session) as span:
            tag = RequestTag(operation, request_id, session, span)
            with serving(tag):
                yield tag


@contextmanager
def serving(tag: RequestTag | None) -> Iterator[None]:
    """Make ``tag`` current for the block (an actor serving a caller's request)."""
    token = _current.set(tag)
    try:
        yield
    finally:
        _current.reset(token)


def enter(tag: RequestTag | None) -> contextvars.Token[RequestTag | None]:
    """:func:`serving` without the context manager, for a hot loop: undo with :func:`leave`."""
    return _current.set(tag)


def leave(token: contextvars.Token[RequestTag | None]) -> None:
    _current.reset(token)


def stamped(result: T) -> T:
    """``result`` with the current request's id, when it has a ``request_id`` field (a
    routing answered from the cache gets the new id: it answers a new request)."""
    tag = _current.get()
    if tag is None or getattr(result, "request_id", tag.request_id) == tag.request_id:
        return result
    return attrs.evolve(result, request_id=tag.request_id)  # type: ignore[misc]


_TAGGABLE: dict[type[Any], tuple[bool, bool]] = {}


def _taggable(cls: type[Any]) -> tuple[bool, bool]:
    """Whether events of ``cls`` have a ``session`` and a ``request_id`` field (cached)."""
    found = _TAGGABLE.get(cls)
    if found is None:
        names = attrs.fields_dict(cls)
        found = _TAGGABLE[cls] = ("session" in names, "request_id" in names)
    return found


def tagged(event: Event) -> Event:
    """``event`` with the current request's id and session filled in where it has room
    (and recorded on the request's span).

    A field the emit site set is kept, but a ``fail_open``'s ``operation`` becomes the
    public call's name: the stage that failed (recall, say) serves ``select`` and
    ``prepare_step`` alike, and only the request knows which.
    """
    tag = _current.get()
    if tag is None:
        return event
    has_session, has_request = _taggable(type(event))
    changes: dict[str, Any] = {}
    if has_request and getattr(event, "request_id") is None:  # noqa: B009
        changes["request_id"] = tag.request_id
    if has_session and tag.session is not None and getattr(event, "session") is None:  # noqa: B009
        changes["session"] = tag.session
    if isinstance(event, FailOpen) and event.operation != tag.operation:
        changes["operation"] = tag.operation
    if changes:
        event = attrs.evolve(event, **changes)
    if tag.span is not None:
        tag.span.observe(event)
    return event

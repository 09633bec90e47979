"""OpenTelemetry spans and metrics, when ``opentelemetry-api`` is installed (extra ``otel``).

Every public call opens a span (``toolroute.select``, ``toolroute.prepare_step``,
``toolroute.route_servers``, ``toolroute.try_decide``, ...) for the duration of the call; the
events the call publishes fill it in: their outcome and counts become attributes, a
``fail_open`` becomes a span event, and a routing or a decision inside the call becomes a
child span with the timing its event reports. Nothing of the request's text is ever set:
the events carry none (a query only as its HMAC, which is left out too).

Attribute names follow the GenAI semantic conventions where one exists
(``gen_ai.operation.name``, ``gen_ai.conversation.id``, ``gen_ai.provider.name``,
``gen_ai.tool.name``); the rest are under ``toolroute.*``. Without the package, or with no
SDK configured, each call costs one check: the global providers are looked at again at most
once a second (:func:`recheck` looks at once), and until an SDK is set no span is made, so
an engine whose host never configures OpenTelemetry pays nothing for it.

Metrics: ``toolroute.operation.duration`` (histogram, s; by operation and outcome),
``toolroute.fail_open`` (counter; by operation and what failed), ``toolroute.events.dropped``
(counter: events lost to full subscriber buffers).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .._core.events import (
    DecisionFinished,
    Event,
    FailOpen,
    RoutingFinished,
    SelectionFinished,
    StepFinished,
)

otel_trace: Any
otel_metrics: Any
try:
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import trace as otel_trace
except ImportError:  # the ``otel`` extra is not installed: telemetry is off
    otel_metrics = otel_trace = None

__all__ = [
    "RequestSpan",
    "active",
    "available",
    "count_dropped",
    "recheck",
    "request_span",
    "tool_call_span",
]

#: The instrumentation scope every span and instrument is created under.
SCOPE = "toolroute"

#: Operations whose result is a list of tools: GenAI's "retrieval".
_RETRIEVAL = frozenset({"select", "prepare_step", "search_tools"})


def available() -> bool:
    """Whether ``opentelemetry-api`` is installed (spans are recorded only if an SDK is set)."""
    return otel_trace is not None


class _Instruments:
    """Made on first use, from the global providers (a proxy until an SDK is set, so an
    SDK configured after import still receives everything)."""

    def __init__(self) -> None:
        assert otel_trace is not None
        assert otel_metrics is not None
        self.tracer = otel_trace.get_tracer(SCOPE)
        meter = otel_metrics.get_meter(SCOPE)
        self.duration = meter.create_histogram(
            "toolroute.operation.duration", unit="s", description="time of one public call"
        )
        self.fail_open = meter.create_counter(
            "toolroute.fail_open", unit="{event}", description="results that failed open"
        )
        self.dropped = meter.create_counter(
            "toolroute.events.dropped",
            unit="{event}",
            description="events lost to full subscriber buffers",
        )


#: Seconds between looks at the global providers (a proxy span costs about 12 µs, a look 2).
RECHECK_S = 1.0

_instruments: _Instruments | None = None
_sdk_set = False
_checked_at = -math.inf


def recheck() -> None:
    """Look at the global providers on the next call (after setting an SDK, say)."""
    global _checked_at
    _checked_at = -math.inf


def _sdk_configured() -> bool:
    # The API's defaults are proxies that make non-recording spans and no-op instruments
    # until the host sets a provider; the meter proxy's class is private, hence the name.
    tracing = not isinstance(otel_trace.get_tracer_provider(), otel_trace.ProxyTracerProvider)
    metering = type(otel_metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider"
    return tracing or metering


def active() -> bool:
    """Whether calls are recorded now (the package is installed and an SDK is set)."""
    return _get() is not None


def _get() -> _Instruments | None:
    global _instruments, _sdk_set, _checked_at
    if otel_trace is None:
        return None
    now = time.monotonic()
    if now - _checked_at > RECHECK_S:
        _checked_at = now
        _sdk_set = _sdk_configured()
    if not _sdk_set:
        return None
    if _instruments is None:
        _instruments = _Instruments()
    return _instruments


class RequestSpan:
    """The span of one public call, filled in from the events the call publishes."""

    def __init__(self, span: Any, operation: str, instruments: _Instruments) -> None:
        self._span = span
        self._operation = operation
        self._instruments = instruments
        self.outcome = "unknown"

    def observe(self, event: Event) -> None:
        """Record what ``event`` says about this call (attributes, span events, children)."""
        if isinstance(event, FailOpen):
            attributes: dict[str, Any] = {
                "toolroute.operation": event.operation,
                "toolroute.what_failed": event.what_failed,
            }
            self._instruments.fail_open.add(1, attributes)
            if self._span.is_recording():
                self._span.add_event("toolroute.fail_open", attributes)
            return
        if not self._span.is_recording():
            self._remember_outcome(event)
            return
        match event:
            case SelectionFinished() if self._operation == "select":
                self._finished(
                    event.outcome,
                    {
                        "toolroute.strategy": str(event.strategy),
                        "toolroute.tools.shown": len(event.tool_ids),
                        "toolroute.degraded": event.degraded,
                    },
                )
            case StepFinished() if self._operation == "prepare_step":
                shown = -1 if event.tool_ids is None else len(event.tool_ids)
                self._finished(
                    event.outcome, {"toolroute.page": event.page, "toolroute.tools.shown": shown}
                )
            case RoutingFinished():
                attributes = {
                    "toolroute.routing.stage": str(event.stage),
                    "toolroute.servers.kept": len(event.kept),
                    "toolroute.servers.excluded": len(event.excluded),
                }
                if self._operation == "route_servers":
                    self._finished(event.outcome, attributes)
                else:
                    self._child("toolroute.route_servers", event, event.latency_ms, attributes)
            case DecisionFinished():
                attributes = {
                    "gen_ai.provider.name": event.provider,
                    "toolroute.decision.questions": event.questions,
                    "toolroute.decision.answered": event.answered,
                    "toolroute.decision.batches": event.batches,
                }
                if self._operation in ("try_decide", "decide"):
                    self._finished(event.outcome, attributes)
                else:
                    self._child("toolroute.decide", event, event.latency_ms, attributes)
            case _:
                pass

    def _remember_outcome(self, event: Event) -> None:
        # The duration metric needs the outcome even when spans are not recorded.
        match event:
            case SelectionFinished() if self._operation == "select":
                self.outcome = str(event.outcome)
            case StepFinished() if self._operation == "prepare_step":
                self.outcome = str(event.outcome)
            case RoutingFinished() if self._operation == "route_servers":
                self.outcome = str(event.outcome)
            case DecisionFinished() if self._operation in ("try_decide", "decide"):
                self.outcome = str(event.outcome)
            case _:
                pass

    def _finished(self, outcome: str, attributes: dict[str, Any]) -> None:
        self.outcome = str(outcome)
        self._span.set_attributes({"toolroute.outcome": self.outcome, **attributes})

    def _child(
        self, name: str, event: Event, latency_ms: float, attributes: dict[str, Any]
    ) -> None:
        assert otel_trace is not None
        end = int(event.time * 1e9)
        context = otel_trace.set_span_in_context(self._span)
        child = self._instruments.tracer.start_span(
            name, context=context, start_time=end - int(latency_ms * 1e6)
        )
        child.set_attributes(
            {"toolroute.outcome": str(getattr(event, "outcome", "")), **attributes}
        )
        child.end(end_time=end)


@contextmanager
def request_span(
    operation: str, request_id: str, session: str | None
) -> Iterator[RequestSpan | None]:
    """The span of one public call, current for the block; ``None`` without OpenTelemetry.

    A caller's mistake raised in the block is recorded on the span (status error) and
    raised on; the duration is recorded either way.
    """
    instruments = _get()
    if instruments is None:
        yield None
        return
    attributes: dict[str, Any] = {
        "toolroute.operation": operation,
        "toolroute.request_id": request_id,
    }
    if operation in _RETRIEVAL:
        attributes["gen_ai.operation.name"] = "retrieval"
    if session is not None:
        attributes["gen_ai.conversation.id"] = session
    started = time.perf_counter()
    with instruments.tracer.start_as_current_span(
        f"toolroute.{operation}", attributes=attributes
    ) as span:
        recorder = RequestSpan(span, operation, instruments)
        try:
            yield recorder
        except Exception:
            recorder.outcome = "error"
            raise
        finally:
            instruments.duration.record(
                time.perf_counter() - started,
                {"toolroute.operation": operation, "toolroute.outcome": recorder.outcome},
            )


@contextmanager
def tool_call_span(tool_name: str, *, server: str | None = None) -> Iterator[None]:
    """A span for one tool call forwarded to its server (the MCP gateway's calls).

    Args:
        tool_name: the tool's name as the model called it (a name, never its arguments).
        server: the server that owns it.

    The span is ``execute_tool {tool_name}`` (GenAI's name for a tool call); an exception
    raised in the block marks it as an error and is raised on.
    """
    instruments = _get()
    if instruments is None:
        yield
        return
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_name,
    }
    if server is not None:
        attributes["toolroute.server"] = server
    started = time.perf_counter()
    outcome = "applied"
    with instruments.tracer.start_as_current_span(
        f"execute_tool {tool_name}", attributes=attributes
    ):
        try:
            yield
        except Exception:
            outcome = "error"
            raise
        finally:
            instruments.duration.record(
                time.perf_counter() - started,
                {"toolroute.operation": "call_tool", "toolroute.outcome": outcome},
            )


def count_dropped(count: int) -> None:
    """Count ``count`` events lost to full subscriber buffers."""
    instruments = _get()
    if instruments is not None:
        instruments.dropped.add(count)

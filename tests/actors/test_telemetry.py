"""OpenTelemetry spans and metrics, read back with the SDK's in-memory exporter and reader:
each public call is one span filled in from its events, with no request text anywhere."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trio
import trio.testing

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from toolroute import Catalog
from toolroute._core.config import EngineConfig, EventConfig, SelectionDefaults
from toolroute._runtime.engine import open_engine
from toolroute._runtime.telemetry import recheck, tool_call_span
from toolroute.decisions import BooleanQuestion, DecisionRequest
from toolroute.testing import ScriptedDecider

CATALOG = Catalog.from_mcp_servers(
    {
        "github": {"tools": [{"name": "create_issue", "description": "Open a GitHub issue"}]},
        "slack": {"tools": [{"name": "post_message", "description": "Post to a Slack channel"}]},
    }
)
SECRET = "the quarterly numbers for Initech"  # request text that must never leave
CONFIG = EngineConfig(
    cache=False,
    selection=SelectionDefaults(route_servers=True),
    events=EventConfig(include_queries=True),  # even when events carry the text
)

_EXPORTER = InMemorySpanExporter()
_READER = InMemoryMetricReader()


@pytest.fixture(scope="module", autouse=True)
def sdk() -> Iterator[None]:
    # The global providers can be set once per process; the engine's tracer and meter are
    # proxies until then, so setting them here reaches instruments made earlier too.
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    meters = MeterProvider(metric_readers=[_READER])
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(meters)
    recheck()  # at once, not within the second
    yield
    # Later tests in this process record nothing more (a shut-down SDK drops its spans).
    provider.shutdown()
    meters.shutdown()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    _EXPORTER.clear()
    return _EXPORTER


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def all_attribute_values(exporter: InMemorySpanExporter) -> list[Any]:
    values: list[Any] = []
    for span in exporter.get_finished_spans():
        values.extend((span.attributes or {}).values())
        for event in span.events:
            values.extend((event.attributes or {}).values())
    return values


def points(name: str) -> list[Any]:
    data = _READER.get_metrics_data()
    found = []
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found.extend(metric.data.data_points)
    return found


async def test_select_and_step_spans_carry_the_outcome_and_request_id_but_no_text(
    spans: InMemorySpanExporter, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_engine(CATALOG, config=CONFIG, embedder=None, decider=None) as engine:
        selection = await engine.select(SECRET)
        step = await engine.prepare_step(SECRET, session="conv-7")
    (select_span,) = named(spans, "toolroute.select")
    attributes = dict(select_span.attributes or {})
    assert attributes["toolroute.request_id"] == selection.request_id
    assert attributes["gen_ai.operation.name"] == "retrieval"
    assert attributes["toolroute.outcome"] == str(selection.outcome)
    assert attributes["toolroute.tools.shown"] == len(selection.tool_ids)

    (step_span,) = named(spans, "toolroute.prepare_step")
    attributes = dict(step_span.attributes or {})
    assert attributes["toolroute.request_id"] == step.request_id
    assert attributes["gen_ai.conversation.id"] == "conv-7"
    assert attributes["toolroute.outcome"] == str(step.outcome)
    # No decider: routing fails open inside the step, a child span and a span event.
    (routing,) = named(spans, "toolroute.route_servers")
    assert routing.parent is not None
    assert routing.parent.span_id == step_span.context.span_id
    assert [e.name for e in step_span.events] == ["toolroute.fail_open"]
    assert dict(step_span.events[0].attributes or {})["toolroute.operation"] == "prepare_step"

    texts = [v for v in all_attribute_values(spans) if isinstance(v, str)]
    assert not any("Initech" in v or "quarterly" in v for v in texts)


async def test_metrics_count_durations_by_operation_and_fail_opens(
    spans: InMemorySpanExporter, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_engine(CATALOG, config=CONFIG, embedder=None, decider=None) as engine:
        await engine.route_servers("open an issue")
    durations = {
        (p.attributes["toolroute.operation"], p.attributes["toolroute.outcome"]): p.count
        for p in points("toolroute.operation.duration")
    }
    assert durations[("route_servers", "failed_open")] >= 1
    fail_opens = {
        (p.attributes["toolroute.operation"], p.attributes["toolroute.what_failed"]): p.value
        for p in points("toolroute.fail_open")
    }
    assert fail_opens[("route_servers", "none")] >= 1


async def test_try_decide_span_names_the_provider(
    spans: InMemorySpanExporter, autojump_clock: trio.testing.MockClock
) -> None:
    decider = ScriptedDecider({"urgent": 0.9}, name="scripted")
    request = DecisionRequest(state="a ticket", questions={"urgent": BooleanQuestion("Urgent?")})
    async with open_engine(CATALOG, config=CONFIG, embedder=None, decider=decider) as engine:
        assert await engine.try_decide(request) is not None
    (span,) = named(spans, "toolroute.try_decide")
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.provider.name"] == "scripted"
    assert (attributes["toolroute.decision.questions"], attributes["toolroute.outcome"]) == (
        1,
        "applied",
    )


async def test_a_callers_mistake_marks_the_span_as_an_error(
    spans: InMemorySpanExporter, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_engine(CATALOG, config=CONFIG, embedder=None, decider=None) as engine:
        with pytest.raises(ValueError, match="force_sets names unknown tool sets"):
            await engine.prepare_step("open an issue", force_sets=["nope"])
    (span,) = named(spans, "toolroute.prepare_step")
    assert span.status.status_code is StatusCode.ERROR


def test_the_gateway_hook_records_a_tool_call_span(spans: InMemorySpanExporter) -> None:
    with tool_call_span("create_issue", server="github"):
        pass
    with pytest.raises(RuntimeError), tool_call_span("post_message", server="slack"):
        raise RuntimeError("upstream went away")
    ok, failed = spans.get_finished_spans()
    assert ok.name == "execute_tool create_issue"
    assert dict(ok.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "create_issue",
        "toolroute.server": "github",
    }
    assert failed.status.status_code is StatusCode.ERROR

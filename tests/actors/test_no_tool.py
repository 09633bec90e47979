"""``selection.no_tool``: select and prepare_step told "no tool needed" only on a confident no."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from toolroute import Catalog, ConfigError, DecisionError, EngineConfig, Outcome
from toolroute._core.config import SelectionDefaults
from toolroute._core.decide.no_tool import KEY
from toolroute._core.events import FailOpen, SelectionFinished, StepFinished
from toolroute._runtime.engine import open_engine
from toolroute.decisions import BooleanAnswer, DecisionRequest, DecisionResult

CATALOG = Catalog.from_mcp_servers(
    {
        "github": {
            "tools": [
                {"name": "create_issue", "description": "Open a GitHub issue"},
                {"name": "list_issues", "description": "List the issues of a GitHub repository"},
            ]
        },
        "weather": {"tools": [{"name": "forecast", "description": "Weather forecast for a city"}]},
        "notes": {"tools": [{"name": "save_note", "description": "Save a note for later"}]},
    }
)


class NeedsToolDecider:
    """Answers the no-tool question with ``probability`` (or fails, or hangs); records it."""

    name = "scripted"

    def __init__(self, probability: float | None = 0.01, *, hang: bool = False) -> None:
        from toolroute.decisions import DecisionLimits

        self.limits = DecisionLimits()
        self.probability = probability
        self.hang = hang
        self.fail = False
        self.requests: list[DecisionRequest] = []

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        self.requests.append(request)
        if self.hang:
            await trio.sleep_forever()
        if self.fail:
            raise DecisionError("server", "the model is down")
        answers = {} if self.probability is None else {KEY: BooleanAnswer(self.probability)}
        return DecisionResult(model="m", provider=self.name, answers=answers)


def config(**selection: object) -> EngineConfig:
    return EngineConfig(
        cache=False,
        selection=SelectionDefaults(no_tool=True, **selection),  # type: ignore[arg-type]
    )


def listed(request: DecisionRequest) -> list[str]:
    assert isinstance(request.state, dict)
    return [t["name"] for t in request.state["available_tools"]]


async def test_confident_no_keeps_only_always_active_tools_and_says_so() -> None:
    decider = NeedsToolDecider(0.01)
    cfg = config(always_active=("save_note",))
    async with (
        open_engine(CATALOG, config=cfg, embedder=None, decider=decider) as engine,
        engine.subscribe() as events,
    ):
        selection = await engine.select("open a github issue about the crash")
        finished = None
        async for delivery in events:
            if isinstance(delivery.event, SelectionFinished):
                finished = delivery.event
                break
    assert selection.no_tool_needed
    assert selection.tool_ids == ("save_note",)
    assert selection.sources == ("always_active",)
    assert "no tool needed" in selection.reason
    assert "0.010" in selection.reason
    assert finished is not None
    assert finished.no_tool_needed
    assert finished.tool_ids == ("save_note",)
    # The question lists the ranked tools first, then the rest of the catalogue.
    assert listed(decider.requests[0])[0] in {"create_issue", "list_issues"}
    assert sorted(listed(decider.requests[0])) == sorted(t.name for t in CATALOG)


@pytest.mark.parametrize("probability", [0.06, 0.3, 0.5, 0.9, None])
async def test_anything_short_of_a_confident_no_keeps_the_selection(
    probability: float | None,
) -> None:
    decider = NeedsToolDecider(probability)
    async with open_engine(CATALOG, config=config(), embedder=None, decider=decider) as engine:
        told = await engine.select("open a github issue about the crash")
    async with open_engine(
        CATALOG, config=EngineConfig(cache=False), embedder=None, decider=None
    ) as engine:
        plain = await engine.select("open a github issue about the crash")
    assert len(decider.requests) == 1
    assert not told.no_tool_needed
    assert told.tool_ids == plain.tool_ids
    assert told.tool_ids


async def test_off_by_default_the_decider_is_never_asked() -> None:
    decider = NeedsToolDecider(0.0)
    async with open_engine(
        CATALOG, config=EngineConfig(cache=False), embedder=None, decider=decider
    ) as engine:
        selection = await engine.select("open a github issue")
        step = await engine.prepare_step("open a github issue")
    assert decider.requests == []
    assert selection.tool_ids
    assert not selection.no_tool_needed
    assert step.tool_ids
    assert not step.no_tool_needed


async def test_the_gate_is_the_configured_confidence() -> None:
    decider = NeedsToolDecider(0.15)  # confidence 0.7
    async with open_engine(
        CATALOG, config=config(no_tool_min_confidence=0.6), embedder=None, decider=decider
    ) as engine:
        assert (await engine.select("open a github issue")).no_tool_needed
    async with open_engine(
        CATALOG, config=config(no_tool_min_confidence=0.8), embedder=None, decider=decider
    ) as engine:
        assert not (await engine.select("open a github issue")).no_tool_needed


async def test_a_hung_decider_costs_one_deadline_and_fails_open(
    autojump_clock: trio.testing.MockClock,
) -> None:
    decider = NeedsToolDecider(hang=True)
    async with (
        open_engine(
            CATALOG, config=config(no_tool_deadline_s=2.0), embedder=None, decider=decider
        ) as engine,
        engine.subscribe() as events,
    ):
        started = trio.current_time()
        with trio.fail_after(60):
            selection = await engine.select("open a github issue")
        elapsed = trio.current_time() - started
        seen = []
        async for delivery in events:
            seen.append(delivery.event)
            if isinstance(delivery.event, SelectionFinished):
                break
    assert 2.0 <= elapsed < 2.5
    assert selection.tool_ids
    assert not selection.no_tool_needed
    failed = [e for e in seen if isinstance(e, FailOpen)]
    assert [(e.operation, e.what_failed) for e in failed] == [("select", "no_tool")]


async def test_a_failing_decider_keeps_the_tools_and_publishes_fail_open() -> None:
    decider = NeedsToolDecider()
    decider.fail = True
    async with (
        open_engine(CATALOG, config=config(), embedder=None, decider=decider) as engine,
        engine.subscribe() as events,
    ):
        step = await engine.prepare_step("open a github issue")
        seen = []
        async for delivery in events:
            seen.append(delivery.event)
            if isinstance(delivery.event, StepFinished):
                break
    assert step.tool_ids
    assert not step.no_tool_needed
    assert any(isinstance(e, FailOpen) and e.operation == "prepare_step" for e in seen)


async def test_prepare_step_told_no_tool_shows_only_pinned_tools() -> None:
    decider = NeedsToolDecider(0.01)
    cfg = config(always_active=("save_note",))
    async with (
        open_engine(CATALOG, config=cfg, embedder=None, decider=decider) as engine,
        engine.subscribe() as events,
    ):
        step = await engine.prepare_step("thanks, that is all")
        finished = None
        async for delivery in events:
            if isinstance(delivery.event, StepFinished):
                finished = delivery.event
                break
    assert step.no_tool_needed
    assert step.outcome is not Outcome.FAILED_OPEN
    assert step.tool_ids == ("save_note",)
    assert "no tool needed" in step.reason
    assert finished is not None
    assert finished.no_tool_needed


async def test_a_later_page_is_never_told_no_tool() -> None:
    decider = NeedsToolDecider(0.01)
    idle = [
        {"role": "user", "content": "open a github issue"},
        {"role": "assistant", "content": "Which repository?"},
        {"role": "user", "content": "the main one"},
        {"role": "assistant", "content": "Done?"},
    ]
    async with open_engine(CATALOG, config=config(), embedder=None, decider=decider) as engine:
        step = await engine.prepare_step(idle)
    assert step.page >= 1
    assert decider.requests == []
    assert not step.no_tool_needed


async def test_denied_tools_are_never_listed_in_the_question() -> None:
    decider = NeedsToolDecider(0.9)
    async with open_engine(CATALOG, config=config(), embedder=None, decider=decider) as engine:
        await engine.select("open a github issue", deny=["create_issue"])
    assert "create_issue" not in listed(decider.requests[0])


def test_a_wrong_type_for_the_option_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="no_tool"):
        EngineConfig.from_mapping({"selection": {"no_tool": "yes"}})
    with pytest.raises(ConfigError, match="between 0 and 1"):
        SelectionDefaults(no_tool_min_confidence=1.5)


async def test_explanations_say_the_hidden_tools_were_hidden_for_no_tool() -> None:
    decider = NeedsToolDecider(0.01)
    cfg = config(always_active=("save_note",))
    async with open_engine(CATALOG, config=cfg, embedder=None, decider=decider) as engine:
        selection = await engine.select("open a github issue", explain=True)
        step = await engine.prepare_step("open a github issue", explain=True)
    for explained in (selection.explanations, step.explanations):
        shown = [e.tool_id for e in explained if e.shown]
        assert shown == ["save_note"]
        hidden = {e.tool_id: e.reason for e in explained if not e.shown}
        assert hidden.get("create_issue") == "no_tool"

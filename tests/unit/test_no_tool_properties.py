"""Properties of the no-tool rule: only a confident no hides tools, whatever the decider does.

The engine examples run each in its own ``trio.run`` on an autojumping ``MockClock``, so a
hanging decider costs no wall time and the deadline is checked in virtual time.
"""

from __future__ import annotations

import math
from typing import Any

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute import Catalog, EngineConfig, Outcome, Selection
from toolroute._core.config import SelectionDefaults
from toolroute._core.decide.limits import DecisionLimits
from toolroute._core.decide.no_tool import KEY, read_verdict
from toolroute._core.decide.types import (
    BooleanAnswer,
    ChoiceAnswer,
    DecisionRequest,
    DecisionResult,
)
from toolroute._core.errors import DecisionError, DecisionErrorKind
from toolroute._core.select.no_tool import no_tool_selection
from toolroute._runtime.engine import open_engine

CATALOG = Catalog.from_openai(
    [
        {"type": "function", "function": {"name": n, "description": d}}
        for n, d in (
            ("create_issue", "Open a GitHub issue"),
            ("forecast", "Weather forecast for a city"),
            ("save_note", "Save a note for later"),
            ("send_mail", "Send an email"),
        )
    ]
)

probabilities = st.floats(0.0, 1.0, allow_nan=False)
confidences = st.floats(0.0, 1.0, allow_nan=False)


def _result(answers: dict[str, Any]) -> DecisionResult:
    return DecisionResult(model="m", provider="p", answers=answers)


@given(probabilities, confidences)
def test_no_tool_exactly_on_a_confident_false(p: float, c: float) -> None:
    verdict = read_verdict(_result({KEY: BooleanAnswer(p)}), c)
    assert verdict.probability == p
    confident = abs(p - 0.5) * 2 >= c
    assert verdict.no_tool == (confident and p < 0.5)


@given(confidences, st.sampled_from(["missing", "other", "wrong_type", "none"]))
def test_no_answer_is_never_no_tool(c: float, shape: str) -> None:
    result = {
        "missing": _result({}),
        "other": _result({"server__0": BooleanAnswer(0.0)}),
        "wrong_type": _result(
            {KEY: ChoiceAnswer(choice="no", probabilities={"no": 1.0}, confidence=1.0)}
        ),
        "none": None,
    }[shape]
    verdict = read_verdict(result, c)
    assert not verdict.no_tool
    assert verdict.probability is None


@given(
    st.lists(st.sampled_from(["ranked", "always_active", "related", "tool_set"]), max_size=8),
    st.sampled_from(["", "embedder: timeout"]),
)
def test_a_no_tool_selection_keeps_exactly_the_pinned_tools(
    sources: list[str], before: str
) -> None:
    ids = tuple(f"t{i}" for i in range(len(sources)))
    selection = Selection(
        tool_ids=ids,
        scores=tuple(float(i) for i in range(len(ids))),
        strategy="combined",
        outcome=Outcome.DEGRADED if before else Outcome.APPLIED,
        reason=before,
        sources=tuple(sources),
    )
    verdict = read_verdict(_result({KEY: BooleanAnswer(0.0)}), 0.9)
    told = no_tool_selection(selection, verdict.reason)
    pinned = tuple(i for i, s in zip(ids, sources, strict=True) if s == "always_active")
    assert told.tool_ids == pinned
    assert told.no_tool_needed
    assert set(told.sources) <= {"always_active"}
    assert told.outcome is selection.outcome
    assert told.reason.startswith(before)
    assert "no tool needed" in told.reason


class Behaving:
    """A decider that answers, errs, hangs or answers the wrong thing, as drawn."""

    name = "drawn"
    limits = DecisionLimits()

    def __init__(self, mode: str, p: float, delay: float) -> None:
        self.mode, self.p, self.delay = mode, p, delay

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        await trio.sleep(self.delay)
        if self.mode == "hang":
            await trio.sleep_forever()
        if self.mode == "error":
            raise DecisionError(DecisionErrorKind.SERVER, "down")
        answers: dict[str, Any] = {
            "answer": {KEY: BooleanAnswer(self.p)},
            "stray": {"elsewhere": BooleanAnswer(self.p)},
            "score": {KEY: ChoiceAnswer(choice="no", probabilities={"no": 1.0}, confidence=1.0)},
        }[self.mode]
        return DecisionResult(model="m", provider=self.name, answers=answers)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["answer", "stray", "score", "error", "hang"]),
    probabilities,
    st.floats(0.0, 5.0),
    st.floats(0.5, 3.0),
    confidences,
)
def test_tools_are_hidden_only_on_a_confident_no_within_the_deadline(
    mode: str, p: float, delay: float, deadline: float, c: float
) -> None:
    async def main() -> tuple[Selection, Selection, float]:
        cfg = EngineConfig(
            cache=False,
            selection=SelectionDefaults(
                no_tool=True, no_tool_deadline_s=deadline, no_tool_min_confidence=c
            ),
        )
        decider = Behaving(mode, p, delay)
        async with open_engine(CATALOG, config=cfg, embedder=None, decider=decider) as engine:
            started = trio.current_time()
            told = await engine.select("open an issue about the weather")
            elapsed = trio.current_time() - started
        async with open_engine(
            CATALOG, config=EngineConfig(cache=False), embedder=None, decider=None
        ) as engine:
            plain = await engine.select("open an issue about the weather")
        return told, plain, elapsed

    told, plain, elapsed = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert elapsed <= deadline + 1e-6
    answered_in_time = mode == "answer" and delay < deadline
    confident_no = abs(p - 0.5) * 2 >= c and p < 0.5
    if answered_in_time and confident_no:
        assert told.no_tool_needed
        assert told.tool_ids == ()
    else:
        assert not told.no_tool_needed
        assert told.tool_ids == plain.tool_ids
    assert not math.isnan(elapsed)

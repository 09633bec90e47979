"""toolroute.testing: the scripted fakes behave as documented (virtual time, no threads)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import trio
import trio.testing

from toolroute import Catalog, DecisionError, Outcome, Tool, open_engine
from toolroute.config import Deadlines, EngineConfig, WarmupConfig
from toolroute.decisions import (
    BooleanAnswer,
    BooleanQuestion,
    DecisionLimits,
    DecisionRequest,
    ScoreQuestion,
)
from toolroute.testing import ScriptedDecider, ScriptedEmbedder, ScriptedGenerator, inline_cpu

TOOLS = Catalog(
    [
        Tool("get_weather", "get_weather", "Current weather for a city"),
        Tool("send_email", "send_email", "Send an email message"),
    ]
)


def run(fn: Any) -> Any:
    """Run ``fn`` under trio with a virtual clock that jumps when every task waits."""
    return trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))


# -- ScriptedEmbedder ------------------------------------------------------------------------


def test_embedder_gives_unit_vectors_and_honours_fixed_ones() -> None:
    embedder = ScriptedEmbedder(dim=8, vectors={"fixed": [3.0, 4.0, 0, 0, 0, 0, 0, 0]})
    vectors = embedder.embed(["weather in Oslo", "fixed"])
    assert vectors.shape == (2, 8)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(vectors[1][:2], [0.6, 0.8], rtol=1e-6)
    assert embedder.calls == [2]
    assert embedder.texts == ["weather in Oslo", "fixed"]


def test_embedder_plays_its_faults_in_order_and_repeats() -> None:
    embedder = ScriptedEmbedder(
        dim=4, faults=["ok", "raise", "wrong_count", "wrong_width", "nan", "zero"]
    )
    assert embedder.embed(["a", "b"]).shape == (2, 4)
    with pytest.raises(RuntimeError, match="scripted"):
        embedder.embed(["a"])
    assert embedder.embed(["a", "b"]).shape == (1, 4)
    assert embedder.embed(["a"]).shape == (1, 5)
    assert np.isnan(embedder.embed(["a"])).all()
    assert not embedder.embed(["a"]).any()
    assert embedder.embed(["a"]).shape == (1, 4)  # the schedule starts again
    assert embedder.calls == [2, 1, 2, 1, 1, 1, 1]


def test_embedder_refuses_unknown_faults_and_wrong_widths() -> None:
    with pytest.raises(ValueError, match="unknown faults"):
        ScriptedEmbedder(faults=["slow"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"expected \(4,\)"):
        ScriptedEmbedder(dim=4, vectors={"x": [1.0, 0.0]})


def test_inline_cpu_plays_the_delay_in_virtual_time() -> None:
    embedder = ScriptedEmbedder(dim=4, delay=2.5)

    async def main() -> float:
        run_cpu = inline_cpu(embedder)
        await run_cpu(embedder.embed, ["a"], limiter=trio.CapacityLimiter(1))
        return trio.current_time()

    assert run(main) == pytest.approx(2.5)


def test_inline_cpu_never_returns_a_hung_call() -> None:
    embedder = ScriptedEmbedder(dim=4, faults=["hang", "ok"])

    async def main() -> tuple[bool, bool]:
        run_cpu = inline_cpu(embedder)
        limiter = trio.CapacityLimiter(1)
        with trio.move_on_after(60) as scope:
            await run_cpu(embedder.embed, ["a"], limiter=limiter)
        await run_cpu(embedder.embed, ["b"], limiter=limiter)  # the next call answers
        return scope.cancelled_caught, embedder.hanging

    assert run(main) == (True, False)


def test_a_late_scripted_embedder_fails_open_in_the_engine() -> None:
    embedder = ScriptedEmbedder(dim=16, delay=5.0)
    config = EngineConfig(
        cache=False, warmup=WarmupConfig(wait=True), deadlines=Deadlines(embed_s=1.0)
    )

    async def main() -> Any:
        async with open_engine(
            TOOLS, config=config, embedder=embedder, run_cpu=inline_cpu(embedder)
        ) as engine:
            return await engine.select("weather in Oslo")

    selection = run(main)
    assert selection.outcome is Outcome.DEGRADED
    assert selection.tool_ids[0] == "get_weather"


# -- ScriptedDecider -------------------------------------------------------------------------


def request(**questions: Any) -> DecisionRequest:
    return DecisionRequest(state="a ticket", questions=questions)


def test_decider_answers_by_id_with_a_default_for_booleans() -> None:
    decider = ScriptedDecider({"drop": 0.05, "kept": BooleanAnswer(0.7)})
    asked = request(
        drop=BooleanQuestion("Drop?"),
        kept=BooleanQuestion("Keep?"),
        other=BooleanQuestion("Other?"),
        score=ScoreQuestion("How bad?", {"0": "fine", "1": "bad"}),
    )
    result = run(lambda: decider.decide(asked))
    assert result.answers == {
        "drop": BooleanAnswer(0.05),
        "kept": BooleanAnswer(0.7),
        "other": BooleanAnswer(0.95),
    }  # the score question has no scripted answer: unanswered
    assert decider.requests == [asked]
    assert result.provider == "scripted"


def test_decider_leaves_questions_unanswered_without_a_default() -> None:
    decider = ScriptedDecider(lambda req: {"b": 0.2}, default=None)
    result = run(lambda: decider.decide(request(a=BooleanQuestion("A?"), b=BooleanQuestion("B?"))))
    assert result.answers == {"b": BooleanAnswer(0.2)}


def test_decider_delays_fails_and_hangs_in_virtual_time() -> None:
    error = DecisionError("overloaded", "busy", retryable=True)
    slow = ScriptedDecider(delay=3.0, error=error, limits=DecisionLimits(max_questions=4))
    hung = ScriptedDecider(hang=True)

    async def main() -> tuple[float, bool]:
        with pytest.raises(DecisionError, match="busy"):
            await slow.decide(request(a=BooleanQuestion("A?")))
        failed_at = trio.current_time()
        with trio.move_on_after(10) as scope:
            await hung.decide(request(a=BooleanQuestion("A?")))
        return failed_at, scope.cancelled_caught

    assert run(main) == (pytest.approx(3.0), True)
    assert slow.limits.max_questions == 4
    assert (slow.in_flight, slow.peak, hung.in_flight) == (0, 1, 0)


# -- ScriptedGenerator -----------------------------------------------------------------------


def test_generator_answers_records_and_fails() -> None:
    fixed = ScriptedGenerator({"servers": ["github"]})
    computed = ScriptedGenerator(lambda prompt, schema: {"echo": prompt}, delay=1.0)
    broken = ScriptedGenerator(error=RuntimeError("model down"))

    async def main() -> tuple[object, object, float]:
        first = await fixed.generate_json("route", {"type": "object"})
        second = await computed.generate_json("hello", {})
        at = trio.current_time()
        with pytest.raises(RuntimeError, match="model down"):
            await broken.generate_json("x", {})
        return first, second, at

    assert run(main) == ({"servers": ["github"]}, {"echo": "hello"}, pytest.approx(1.0))
    assert fixed.prompts == ["route"]
    assert fixed.schemas == [{"type": "object"}]
    assert fixed.identity == "scripted-generator"


def test_decider_adds_unasked_answers_but_never_over_asked_ids() -> None:
    decider = ScriptedDecider(
        {"a": 0.3},
        default=None,
        unasked={"stray": BooleanAnswer(0.0), "a": BooleanAnswer(0.9), "b": BooleanAnswer(0.1)},
    )
    result = run(lambda: decider.decide(request(a=BooleanQuestion("A?"), b=BooleanQuestion("B?"))))
    # "a" keeps its scripted answer; "b" was asked and left unanswered, so it stays so.
    assert result.answers == {"a": BooleanAnswer(0.3), "stray": BooleanAnswer(0.0)}


def test_generator_raises_an_answer_that_is_an_exception() -> None:
    def some_fail(prompt: str, schema: Any) -> object:
        return ValueError(f"no answer to {prompt}") if prompt == "bad" else {"ok": prompt}

    generator = ScriptedGenerator(some_fail)

    async def main() -> object:
        with pytest.raises(ValueError, match="no answer to bad"):
            await generator.generate_json("bad", {})
        with pytest.raises(KeyError):
            await ScriptedGenerator(KeyError("fixed")).generate_json("any", {})
        return await generator.generate_json("good", {})

    assert run(main) == {"ok": "good"}
    assert (generator.prompts, generator.in_flight) == (["bad", "good"], 0)


def test_generator_counts_the_calls_in_flight() -> None:
    generator = ScriptedGenerator({"done": True}, delay=1.0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(generator.generate_json, "p", {})

    run(main)
    assert (generator.peak, generator.in_flight) == (3, 0)

"""LocalDecider: offline answers, its errors and deadline, and how the engine's entry points
find it (only when asked for)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from toolroute import (
    Catalog,
    ConfigError,
    DecisionError,
    RoutingConfig,
    Server,
    route_servers,
    try_decide,
)
from toolroute._core.config import EngineConfig
from toolroute._core.routing.usage import SimilarUses
from toolroute._routing.questions import Candidate, routing_request
from toolroute._runtime.engine import open_engine
from toolroute.decisions import (
    BooleanAnswer,
    BooleanQuestion,
    ChoiceAnswer,
    ChoiceQuestion,
    DecisionRequest,
    ScoreQuestion,
)
from toolroute.events import FailOpen
from toolroute.providers import Calibration, HashingEmbedder, LocalDecider, default_decider
from toolroute.providers._deciders.local import CalibrationModel, UsageModel
from toolroute.providers._deciders.local_features import FEATURES
from toolroute.stores import MemoryLearningStore, Stores
from toolroute.testing import ScriptedDecider, ScriptedEmbedder, inline_cpu

#: Probability rises with the cosine only: easy to reason about in a test.
COSINE_ONLY = Calibration(
    embedder="hashing",
    one=CalibrationModel(features=FEATURES["one"], weights=[8.0, 0.0, 0.0], bias=-2.0),
    any=CalibrationModel(features=FEATURES["any"], weights=[8.0, 0.0, 0.0, 0.0], bias=-2.0),
)


async def inline(fn: Any, *args: Any) -> Any:
    return fn(*args)


def local(**kwargs: Any) -> LocalDecider:
    return LocalDecider(
        embedder=HashingEmbedder(dim=512), calibration=COSINE_ONLY, run_cpu=inline, **kwargs
    )


STATE = {
    "request": "send an email message to bob",
    "available_servers": [
        {"name": "mail", "does": "send an email message"},
        {"name": "weather", "does": "forecast of rain and sunshine"},
    ],
}


async def test_the_closer_subject_gets_the_higher_probability() -> None:
    request = DecisionRequest(
        state=STATE,
        questions={
            f"server__{i}": BooleanQuestion(f"Needed? Read available_servers[{i}].does.")
            for i in (0, 1)
        },
    )
    result = await local().decide(request)
    mail, weather = (result.answers[f"server__{i}"] for i in (0, 1))
    assert isinstance(mail, BooleanAnswer)
    assert isinstance(weather, BooleanAnswer)
    assert mail.probability > weather.probability
    assert result.provider == "local"
    assert result.model == "local:hashing"


async def test_a_choice_is_a_distribution_over_its_options() -> None:
    question = ChoiceQuestion(
        "Which tool?", options={"send_email": "send an email message", "get_rain": "rain"}
    )
    result = await local().decide(
        DecisionRequest(state="send an email message to bob", questions={"q": question})
    )
    answer = result.answers["q"]
    assert isinstance(answer, ChoiceAnswer)
    assert answer.choice == "send_email"
    assert math.isclose(sum(answer.probabilities.values()), 1.0)
    assert answer.confidence == max(answer.probabilities.values())


async def test_a_score_question_is_refused_before_any_work() -> None:
    request = DecisionRequest(state="x", questions={"s": ScoreQuestion("How much?", levels=[0, 1])})
    with pytest.raises(DecisionError, match="ScoreQuestion") as caught:
        await local().decide(request)
    assert caught.value.kind == "invalid_request"


class Broken:
    identity = "broken"
    dim = 4
    max_batch = 8

    def __init__(self, vectors: Any = None) -> None:
        self.vectors = vectors

    def embed(self, texts: Sequence[str]) -> Any:
        if self.vectors is None:
            raise RuntimeError("model file vanished")
        return self.vectors


@pytest.mark.parametrize(
    ("embedder", "message"),
    [
        (Broken(), "embedding failed: RuntimeError: model file vanished"),
        (Broken(np.full((2, 4), np.nan)), "finite vectors"),
        (Broken(np.ones((1, 4))), "expected 2 finite vectors"),
    ],
)
async def test_a_failing_embedder_is_a_server_error(embedder: Broken, message: str) -> None:
    decider = LocalDecider(embedder=embedder, calibration=COSINE_ONLY, run_cpu=inline)
    request = DecisionRequest(state="hello", questions={"b": BooleanQuestion("Greets?")})
    with pytest.raises(DecisionError, match=message) as caught:
        await decider.decide(request)
    assert caught.value.kind == "server"


async def test_past_the_requests_deadline_it_is_a_timeout(autojump_clock: trio.MockClock) -> None:
    async def never(fn: Any, *args: Any) -> Any:
        await trio.sleep_forever()

    decider = LocalDecider(embedder=HashingEmbedder(), calibration=COSINE_ONLY, run_cpu=never)
    request = DecisionRequest(state="x", questions={"b": BooleanQuestion("Y?")}, timeout_s=2.5)
    with pytest.raises(DecisionError, match=r"within 2\.5 s") as caught:
        await decider.decide(request)
    assert caught.value.kind == "timeout"
    assert trio.current_time() == pytest.approx(2.5)


@pytest.mark.parametrize("gate", [-0.1, 1.5, "0.9", None, True])
def test_its_own_routing_gate_is_a_confidence(gate: Any) -> None:
    with pytest.raises(ConfigError, match="min_drop_confidence must be between 0 and 1"):
        local(min_drop_confidence=gate)


def test_another_embedder_needs_its_own_calibration() -> None:
    with pytest.raises(ConfigError, match="needs calibration"):
        LocalDecider(embedder=HashingEmbedder())


@given(
    request=st.text(max_size=200),
    subjects=st.lists(st.text(min_size=1, max_size=120).filter(str.strip), min_size=1, max_size=5),
)
def test_every_answer_is_a_probability(request: str, subjects: list[str]) -> None:
    state = {
        "request": request,
        "available_tools": [{"name": "t", "description": s} for s in subjects],
    }
    questions: dict[str, Any] = {
        f"one__{i}": BooleanQuestion(f"Read available_tools[{i}].") for i in range(len(subjects))
    }
    questions["any"] = BooleanQuestion("Needs one of available_tools.")
    questions["plain"] = BooleanQuestion(subjects[0])
    result = trio.run(local().decide, DecisionRequest(state=state, questions=questions))
    assert set(result.answers) == set(questions)
    for answer in result.answers.values():
        assert isinstance(answer, BooleanAnswer)
        assert 0.0 <= answer.probability <= 1.0


async def test_try_decide_without_a_provider_is_still_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.environ", {})
    request = DecisionRequest(state="x", questions={"b": BooleanQuestion("Y?")})
    assert await try_decide(request) is None


def test_the_local_decider_is_chosen_only_by_name() -> None:
    assert default_decider(env={}) is None
    assert isinstance(default_decider("local", env={}), LocalDecider)
    assert isinstance(default_decider(env={"TOOLROUTE_DECISION_PROVIDER": "local"}), LocalDecider)


async def test_route_servers_keeps_what_the_local_decider_is_unsure_of() -> None:
    servers = [
        Server("mail", "send an email message"),
        Server("weather", "forecast of rain and sunshine"),
        Server("maps", "directions and places"),
    ]
    decider = local()
    outcome = await route_servers("send an email message to bob", servers, decider=decider)
    assert outcome.strategy == "decision"
    assert outcome.answered == 3
    assert "mail" in outcome.selected
    # Nothing is dropped unless its probability was a confident false: routing's default gate
    # asks p <= 0.2, the local decider's own 0.99 gate p <= 0.005, and the stricter applies.
    asked = routing_request(
        "send an email message to bob", [Candidate(s, ()) for s in servers], RoutingConfig()
    )
    request_probs = await decider.decide(asked)
    for i, server in enumerate(servers):
        answer = request_probs.answers[f"server__{i}"]
        assert isinstance(answer, BooleanAnswer)
        assert (server.id in outcome.excluded) == (answer.probability <= 0.005)


@given(
    query=st.text(min_size=1, max_size=120).filter(str.strip),
    descriptions=st.lists(st.text(max_size=80), min_size=2, max_size=6),
    gate=st.sampled_from([0.0, 0.6, 0.9, 0.99]),
    own_gate=st.sampled_from([0.0, 0.6, 0.99]),
)
def test_routing_drops_exactly_the_confident_falses(
    query: str, descriptions: list[str], gate: float, own_gate: float
) -> None:
    servers = [Server(f"s{i}", d) for i, d in enumerate(descriptions)]
    config = RoutingConfig(min_drop_confidence=gate, generative=False)

    async def both() -> tuple[Any, Any]:
        decider = local(min_drop_confidence=own_gate)
        outcome = await route_servers(query, servers, decider=decider, config=config)
        asked = routing_request(query, [Candidate(s, ()) for s in servers], config)
        return outcome, await decider.decide(asked)

    outcome, answers = trio.run(both)
    assert outcome.answered == len(servers)
    for i, server in enumerate(servers):
        p = answers.answers[f"server__{i}"].probability  # type: ignore[union-attr]
        confident_false = p < 0.5 and abs(2 * p - 1) >= max(gate, own_gate)
        assert (server.id in outcome.excluded) == confident_false


async def test_routing_fails_open_when_the_embedder_breaks() -> None:
    servers = [Server("mail", "email"), Server("weather", "rain")]
    decider = LocalDecider(embedder=Broken(), calibration=COSINE_ONLY, run_cpu=inline)
    outcome = await route_servers("send an email", servers, decider=decider)
    assert outcome.outcome == "failed_open"
    assert outcome.excluded == ()
    assert outcome.selected == ("mail", "weather")


async def test_the_engine_takes_it_from_the_environment_and_routes_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    catalog = Catalog.from_mcp_servers(
        {
            "mail": {"tools": [{"name": "send_email", "description": "send an email message"}]},
            "weather": {"tools": [{"name": "forecast", "description": "rain and sunshine"}]},
        }
    )
    config = EngineConfig(cache=False, routing=RoutingConfig(generative=False))
    monkeypatch.setenv("TOOLROUTE_DECISION_PROVIDER", "local")
    async with open_engine(catalog, config=config, embedder=None) as engine:
        assert isinstance(engine.decider, LocalDecider)
    async with open_engine(catalog, config=config, embedder=None, decider=local()) as engine:
        outcome = await engine.route_servers("send an email message to bob")
        assert outcome.strategy == "decision"
        assert outcome.answered == 2
        assert "mail" in outcome.selected


FLEET = Catalog.from_mcp_servers(
    {
        "files": {"tools": [{"name": "write_file", "description": "write text to a file"}]},
        "web": {"tools": [{"name": "search", "description": "search the web for pages"}]},
        "mail": {"tools": [{"name": "send_email", "description": "send an email message"}]},
    }
)


class ReadsUses(ScriptedDecider):
    """A decider that asks to be told what similar learned requests used."""

    reads_similar_uses = True


async def learned_engine(
    decider: Any, embedder: ScriptedEmbedder, config: EngineConfig | None = None
) -> Any:
    return open_engine(
        FLEET,
        config=config or EngineConfig(cache=False, routing=RoutingConfig(generative=False)),
        embedder=embedder,
        run_cpu=inline_cpu(embedder),
        decider=decider,
        stores=Stores(learning=MemoryLearningStore()),
    )


async def test_an_engine_tells_a_reading_decider_what_similar_requests_used(
    autojump_clock: trio.MockClock,
) -> None:
    decider = ReadsUses(default=0.9)
    async with await learned_engine(decider, ScriptedEmbedder(dim=64)) as engine:
        files = FLEET.servers[0].tool_ids[0]
        assert await engine.learn("write the weekly report to a file", [files])
        assert await engine.learn("save the weekly notes", [files])
        outcome = await engine.route_servers("write the weekly summary")
    assert outcome.reason.endswith("; 2 similar learned requests counted")
    state = decider.requests[-1].state
    assert state["similar_requests"] == 2
    counts = {s["name"]: s["similar_uses"] for s in state["available_servers"]}
    assert counts == {"files": 2, "web": 0, "mail": 0}


async def test_other_deciders_and_engines_that_learned_nothing_send_no_counts(
    autojump_clock: trio.MockClock,
) -> None:
    plain = ScriptedDecider(default=0.9)  # a vendor: its state is what it always was
    async with await learned_engine(plain, ScriptedEmbedder(dim=64)) as engine:
        assert await engine.learn("save the notes", [FLEET.servers[0].tool_ids[0]])
        await engine.route_servers("write the summary")
    reading = ReadsUses(default=0.9)
    async with await learned_engine(reading, ScriptedEmbedder(dim=64)) as engine:
        await engine.route_servers("write the summary")  # nothing learned from use
    for state in (plain.requests[-1].state, reading.requests[-1].state):
        assert "similar_requests" not in state
        assert all("similar_uses" not in s for s in state["available_servers"])


async def test_routing_goes_on_without_counts_when_the_request_cannot_be_embedded(
    autojump_clock: trio.MockClock,
) -> None:
    embedder = ScriptedEmbedder(dim=64)
    decider = ReadsUses(default=0.9)
    async with await learned_engine(decider, embedder) as engine:
        assert await engine.learn("save the notes", [FLEET.servers[0].tool_ids[0]])
        async with engine.subscribe(snapshot=False) as events:
            embedder.faults = ["raise"]  # every later embedding raises
            outcome = await engine.route_servers("write the summary")
            embedder.faults, embedder.delay = [], 60.0  # and past the deadline
            late = await engine.route_servers("write the summary again")
            reasons = []
            while len(reasons) < 2:
                event = (await events.receive()).event
                if isinstance(event, FailOpen) and event.what_failed == "learning":
                    reasons.append(event.reason)
    assert outcome.answered == late.answered == 3
    for request in decider.requests[-2:]:
        assert "similar_requests" not in request.state
    assert "failed: RuntimeError" in reasons[0]
    assert "missed the embedding deadline" in reasons[1]


def counted_request(uses: Sequence[int] | None) -> DecisionRequest:
    servers = [Server("mail", "send an email message"), Server("files", "write a file")]
    similar = (
        None
        if uses is None
        else SimilarUses(requests=20, counts={s.id: u for s, u in zip(servers, uses, strict=True)})
    )
    entries = [Candidate(s, ()) for s in servers]
    return routing_request(
        "send an email message to bob", entries, RoutingConfig(), similar=similar
    )


async def test_a_server_similar_requests_used_is_likelier_and_an_unused_one_less() -> None:
    usage = UsageModel(weight=1.5, pseudo=20.0)
    decider = LocalDecider(
        embedder=HashingEmbedder(dim=512),
        calibration=attrs.evolve(COSINE_ONLY, usage=usage),
        run_cpu=inline,
    )

    async def probabilities(uses: Sequence[int] | None) -> list[float]:
        result = await decider.decide(counted_request(uses))
        return [result.answers[f"server__{i}"].probability for i in (0, 1)]  # type: ignore[union-attr]

    plain = await probabilities(None)
    mail_used = await probabilities([12, 2])
    assert mail_used[0] > plain[0]
    assert mail_used[1] < plain[1]
    assert await probabilities([5, 5]) == pytest.approx(plain)  # average: no shift
    # Without a usage model the counts change nothing.
    counted = await local().decide(counted_request([12, 2]))
    assert counted.answers == (await local().decide(counted_request(None))).answers


@given(
    uses=st.lists(
        st.one_of(st.integers(-3, 40), st.none(), st.booleans(), st.text(max_size=3)),
        min_size=2,
        max_size=6,
    ),
    requests=st.one_of(st.integers(-1, 40), st.none(), st.floats(allow_nan=True)),
)
def test_any_counts_a_state_carries_give_probabilities(uses: list[Any], requests: Any) -> None:
    state = {
        "request": "send an email message to bob",
        "similar_requests": requests,
        "available_servers": [
            {"name": f"s{i}", "does": "send an email message", "similar_uses": u}
            for i, u in enumerate(uses)
        ],
    }
    questions = {
        f"server__{i}": BooleanQuestion(f'The request needs the "s{i}" server.')
        for i in range(len(uses))
    }
    decider = LocalDecider(
        embedder=HashingEmbedder(dim=512),
        calibration=attrs.evolve(COSINE_ONLY, usage=UsageModel(weight=1.5, pseudo=20)),
        run_cpu=inline,
    )
    result = trio.run(decider.decide, DecisionRequest(state=state, questions=questions))
    assert set(result.answers) == set(questions)
    for answer in result.answers.values():
        assert isinstance(answer, BooleanAnswer)
        assert 0.0 <= answer.probability <= 1.0


async def test_two_hundred_routings_at_once_go_on_when_counting_is_slow(
    autojump_clock: trio.MockClock,
) -> None:
    embedder = ScriptedEmbedder(dim=64)
    decider = ReadsUses(default=0.9)
    outcomes = []
    async with await learned_engine(decider, embedder) as engine:
        assert await engine.learn("save the notes", [FLEET.servers[0].tool_ids[0]])
        embedder.delay = 60.0  # every embedding from now on is far past the deadline
        started = trio.current_time()

        async def route(i: int) -> None:
            outcomes.append(await engine.route_servers(f"write summary number {i}"))

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(route, i)
        waited = trio.current_time() - started
    assert len(outcomes) == 200
    assert all(o.answered == 3 and o.excluded == () for o in outcomes)
    assert all("similar_requests" not in r.state for r in decider.requests[-200:])
    # Each call waited for its count no longer than the embedding deadline (0.25 s).
    assert waited <= 0.25 + 1e-6


async def test_a_steps_recorded_calls_count_in_the_next_steps_routing(
    autojump_clock: trio.MockClock,
) -> None:
    embedder = ScriptedEmbedder(dim=64)
    decider = ReadsUses(default=0.9)
    config = EngineConfig.from_mapping(
        {
            "cache": False,
            "learning": {"record_calls": True},
            "selection": {"route_servers": True},
            "routing": {"generative": False},
        }
    )
    call = {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": "{}"}}
    first = [
        {"role": "user", "content": "write the weekly report to a file"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "written"},
    ]
    async with await learned_engine(decider, embedder, config) as engine:
        await engine.ready()
        await engine.prepare_step(first, session="a")
        await trio.sleep(1)  # the recorded call is learned in the background
        await engine.prepare_step([{"role": "user", "content": "write the weekly notes"}])
    routed = [r.state for r in decider.requests if "available_servers" in r.state]
    assert "similar_requests" not in routed[0]  # nothing learned at the first step
    counts = {s["name"]: s["similar_uses"] for s in routed[-1]["available_servers"]}
    assert counts == {"files": 1, "web": 0, "mail": 0}

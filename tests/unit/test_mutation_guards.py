"""Direct tests of fail-open rules that a mutation check found unguarded.

Each test pins one rule at its boundary, where a one-token change of the rule (``>=`` for
``>``, a dropped guard, a swapped order) gives another answer. The mutation check that finds
such gaps is described in ``docs/reliability.md`` (the mutation check).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytest

from toolroute import ConfigError, Outcome, Server
from toolroute._core.catalog.dedup import dedupe_tools
from toolroute._core.decide.limits import DecisionLimits, check_request
from toolroute._core.decide.types import (
    BooleanAnswer,
    BooleanGate,
    BooleanQuestion,
    ChoiceAnswer,
    ChoiceQuestion,
    DecisionRequest,
    DecisionResult,
    ScoreAnswer,
    ScoreQuestion,
    gate_boolean,
    is_probability,
    split_questions,
)
from toolroute._core.decide.wire import MalformedAnswer, Misaligned, read_answer, read_answers
from toolroute._core.errors import DecisionError, DecisionErrorKind
from toolroute._core.select.policy import Policy, select
from toolroute._core.select.selection import Ranking
from toolroute._core.select.toolsets import (
    ToolSet,
    activated_sets,
    apply_exclusive,
    expand_additive,
)
from toolroute._decisions.run import decide_in_batches
from toolroute._routing.pipeline import RoutingConfig, route_servers
from toolroute.providers import HashingEmbedder
from toolroute.providers._http.rules import MIN_ANYWHERE_SECRET_CHARS, REDACTED, redact
from toolroute.testing import ScriptedDecider, ScriptedGenerator

# --- the boolean gate ----------------------------------------------------------------------


def answer(p: float) -> dict[str, BooleanAnswer]:
    return {"k": BooleanAnswer(p)}


def test_an_answer_exactly_at_the_confidence_bar_is_judged() -> None:
    gate = BooleanGate(min_confidence=0.5)  # p = 0.25 and 0.75 sit exactly on it
    assert gate_boolean(answer(0.25), "k", gate) is False
    assert gate_boolean(answer(0.75), "k", gate) is True
    assert gate_boolean(answer(0.2500001), "k", gate) is None


def test_an_answer_exactly_at_the_probability_bar_is_true() -> None:
    # With no confidence bar a coin flip is judged, and 0.5 means "true": kept, not dropped.
    assert gate_boolean(answer(0.5), "k", BooleanGate(min_confidence=0.0)) is True
    assert gate_boolean(answer(0.8), "k", BooleanGate(min_probability=0.8)) is True
    assert gate_boolean(answer(0.7999), "k", BooleanGate(min_probability=0.8)) is False


def test_a_missing_answer_is_no_judgement_even_with_no_bar() -> None:
    assert gate_boolean({}, "k", BooleanGate(min_confidence=0.0)) is None


async def test_coin_flip_answers_drop_nothing_with_no_confidence_bar() -> None:
    servers = [Server(i, f"Works with {i}", (f"{i}_a",)) for i in ("a", "b", "c")]
    decider = ScriptedDecider({f"server__{i}": 0.5 for i in range(3)}, default=None)
    result = await route_servers(
        "q", servers, decider=decider, config=RoutingConfig(min_drop_confidence=0.0)
    )
    assert (result.strategy, result.outcome) == ("decision", Outcome.APPLIED)
    assert result.excluded == ()


# --- what a probability and a score may be -------------------------------------------------


@pytest.mark.parametrize("value", [True, False])
def test_bools_are_not_probabilities(value: bool) -> None:
    assert not is_probability(value)
    with pytest.raises(ValueError, match="probability must be a probability"):
        BooleanAnswer(value)
    with pytest.raises(ValueError, match="confidence must be a probability"):
        ChoiceAnswer("a", {"a": 1.0, "b": 0.0}, value)
    with pytest.raises(ValueError, match="probabilities must be a probability"):
        ChoiceAnswer("a", {"a": value, "b": 0.0}, 1.0)


@pytest.mark.parametrize("value", [0, 1, 0.0, 0.5, 1.0])
def test_numbers_in_the_unit_interval_are_probabilities(value: float) -> None:
    assert is_probability(value)
    assert BooleanAnswer(value).probability == value


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -0.01, 1.01, "0.5", None])
def test_other_values_are_not_probabilities(value: Any) -> None:
    assert not is_probability(value)


@pytest.mark.parametrize("score", [math.nan, math.inf, -math.inf, True, "1"])
def test_a_score_must_be_a_finite_number(score: Any) -> None:
    with pytest.raises(ValueError, match="score must be a finite number"):
        ScoreAnswer(score, {"0": "low", "1": "high"}, {"0": 0.5, "1": 0.5}, 0.5)


def test_a_finite_score_is_kept() -> None:
    assert ScoreAnswer(0.5, {"0": "low", "1": "high"}, {"0": 0.5, "1": 0.5}, 0.5).score == 0.5


# --- the generative router and the embedding fast path -------------------------------------


FIVE = [Server(i, f"Works with {i}", (f"{i}_a", f"{i}_b")) for i in ("gh", "sl", "we", "ma", "ml")]


async def test_the_generative_router_drops_only_servers_it_was_shown() -> None:
    generator = ScriptedGenerator({"servers": ["gh"]})
    result = await route_servers(
        "q", FIVE, generator=generator, config=RoutingConfig(max_servers=3)
    )
    assert (result.strategy, result.outcome) == ("generative", Outcome.APPLIED)
    # ma and ml were past max_servers: never in the prompt, so never judged, so kept.
    assert "ma" not in generator.prompts[0]
    assert result.excluded == ("sl", "we")
    assert result.selected == ("gh", "ma", "ml")


async def test_the_embedding_fast_path_never_drops_a_server_without_tools() -> None:
    words = ["get", "list", "search", "update", "delete", "create"]
    topics = {"weather": "Weather forecasts", "github": "GitHub repositories", "mail": "Email"}
    servers = [Server(i, d, tuple(f"{i}_{w}" for w in words)) for i, d in topics.items()]
    servers.append(Server("empty", "Weather radar (tools not listed yet)", ()))
    config = RoutingConfig(embedding=True, embedding_top_k=3, embedding_min_tools=10)
    result = await route_servers(
        "weather forecasts for Oslo", servers, embedder=HashingEmbedder(256), config=config
    )
    assert (result.strategy, result.outcome) == ("embedding", Outcome.APPLIED)
    assert "empty" in result.selected  # nothing of it was ranked: it was never judged
    assert "empty" not in result.excluded
    assert set(result.excluded) == {"github", "mail"}


# --- tool-set anchors ----------------------------------------------------------------------


SEARCH = ToolSet(name="search", members=("find", "read"), anchors=("find",))


def test_an_anchor_exactly_at_its_floor_activates_its_set() -> None:
    floor = SEARCH.anchor_min_similarity
    assert activated_sets({"find": floor}, [SEARCH]) == ("search",)
    assert activated_sets({"find": math.nextafter(floor, 0.0)}, [SEARCH]) == ()
    assert expand_additive(["find"], {"find", "read"}, {"find": floor}, [SEARCH]) == [
        "find",
        "read",
    ]


def test_an_anchor_at_its_floor_activates_an_exclusive_set_and_the_threshold_holds() -> None:
    floor = SEARCH.anchor_min_similarity
    scores = {"find": floor, "other": 0.6, "weak": math.nextafter(0.6, 0.0)}
    picked = apply_exclusive(
        ["find", "other", "weak"], {"find", "read"}, scores, [SEARCH], independent_threshold=0.6
    )
    assert picked == ["find", "read", "other"]  # "other" exactly at the threshold stays
    below = {"find": math.nextafter(floor, 0.0)}
    assert apply_exclusive(["find", "weak"], {"find", "read"}, below, [SEARCH]) == ["find", "weak"]


def test_an_excluded_anchor_never_activates() -> None:
    assert activated_sets({"find": 0.99}, [SEARCH], exclude={"find"}) == ()


def ranking(strategy: str, outcome: Outcome, score: float) -> Ranking:
    return Ranking(
        tool_ids=("find", "other"), scores=(score, 0.1), strategy=strategy, outcome=outcome
    )


@pytest.mark.parametrize(
    ("strategy", "outcome"),
    [("keyword", Outcome.APPLIED), ("combined", Outcome.DEGRADED), ("semantic", Outcome.DEGRADED)],
)
def test_scores_off_the_cosine_scale_never_activate_a_set(strategy: str, outcome: Outcome) -> None:
    # BM25 scores run far above any cosine floor: 7.5 would activate every set.
    policy = Policy(max_tools=1, tool_sets=(SEARCH,), threshold=None)
    selection = select(ranking(strategy, outcome, 7.5), policy, 0.0)
    assert selection.active_sets == ()
    assert selection.tool_ids == ("find",)


@pytest.mark.parametrize("strategy", ["semantic", "combined"])
def test_cosine_scores_of_an_applied_ranking_activate_a_set(strategy: str) -> None:
    policy = Policy(max_tools=1, tool_sets=(SEARCH,), threshold=None)
    selection = select(ranking(strategy, Outcome.APPLIED, 0.9), policy, 0.0)
    assert selection.active_sets == ("search",)
    assert selection.tool_ids == ("find", "read")


def test_a_forced_set_applies_even_on_keyword_scores() -> None:
    policy = Policy(max_tools=1, tool_sets=(SEARCH,), threshold=None, forced_sets=("search",))
    selection = select(ranking("keyword", Outcome.DEGRADED, 7.5), policy, 0.0)
    assert selection.active_sets == ("search",)


# --- redaction -----------------------------------------------------------------------------


def test_a_secret_containing_another_is_redacted_whole() -> None:
    short = "k" * MIN_ANYWHERE_SECRET_CHARS
    long = short + "TAIL"
    for secrets in ([short, long], [long, short]):
        text = redact(f"auth failed for {long} (retry)", secrets)
        assert text == f"auth failed for {REDACTED} (retry)"
        assert "TAIL" not in text


def test_a_short_secret_inside_a_longer_one_is_redacted_whole() -> None:
    short = "ab-1"  # below the anywhere length: only whole tokens
    long = "ab-1-longer-key"
    assert redact(f"key={long};", [short, long]) == f"key={REDACTED};"


# --- decisions: the question cap and all-malformed replies ---------------------------------


def request(questions: int) -> DecisionRequest:
    return DecisionRequest(
        state="s", questions={f"q{i}": BooleanQuestion(f"Is {i}?") for i in range(questions)}
    )


def test_a_request_exactly_at_the_question_cap_is_accepted() -> None:
    limits = DecisionLimits(max_questions=4)
    check_request(request(4), limits, vendor="v", model="m")
    with pytest.raises(DecisionError) as refused:
        check_request(request(5), limits, vendor="v", model="m")
    assert refused.value.kind is DecisionErrorKind.MAX_TOKENS_EXCEEDED
    assert "at most 4 questions per request; this one has 5" in str(refused.value)


def test_questions_split_into_chunks_of_the_cap_in_order() -> None:
    questions = request(5).questions
    assert [list(c) for c in split_questions(questions, 5)] == [["q0", "q1", "q2", "q3", "q4"]]
    assert [list(c) for c in split_questions(questions, 4)] == [["q0", "q1", "q2", "q3"], ["q4"]]
    assert [list(c) for c in split_questions(questions, 2)] == [["q0", "q1"], ["q2", "q3"], ["q4"]]
    assert [list(c) for c in split_questions(questions, None)] == [list(questions)]


class FixedDecider:
    """Answers every batch with the answers ``reply`` gives its questions."""

    name = "fixed"

    def __init__(self, reply: Mapping[str, BooleanAnswer], max_questions: int) -> None:
        self.reply = reply
        self.limits = DecisionLimits(max_questions=max_questions)
        self.batches: list[list[str]] = []

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        self.batches.append(list(request.questions))
        answers = {k: v for k, v in self.reply.items() if k in request.questions}
        return DecisionResult(model="m", provider=self.name, answers=answers)


async def test_a_reply_whose_answers_were_all_malformed_is_no_reply() -> None:
    # Malformed answers are dropped by the readers, so such a reply arrives with none.
    decider = FixedDecider({}, max_questions=2)
    report = await decide_in_batches(request(3), decider)
    assert decider.batches == [["q0", "q1"], ["q2"]]  # the per-provider cap, in order
    assert report.result is None
    assert report.reason == "no well-formed answers"
    assert (report.asked, report.answered, report.failed) == (3, 0, 0)


async def test_one_well_formed_answer_is_a_reply() -> None:
    decider = FixedDecider({"q2": BooleanAnswer(0.9)}, max_questions=2)
    report = await decide_in_batches(request(3), decider)
    assert report.result is not None
    assert dict(report.result.answers) == {"q2": BooleanAnswer(0.9)}
    assert report.reason == "1 of 3 answered"


# --- found by the second mutation check ----------------------------------------------------


@pytest.mark.parametrize("probabilities", [{}, [], "ab", {1: 0.5, "b": 0.5}, {"a": 1.5, "b": 0}])
def test_a_distribution_is_a_non_empty_mapping_of_names_to_probabilities(
    probabilities: Any,
) -> None:
    # A custom decider builds answers itself: a malformed one must not pass as well-formed.
    with pytest.raises(ValueError, match="probabilities"):
        ChoiceAnswer("a", probabilities, 0.9)
    with pytest.raises(ValueError, match="probabilities"):
        ScoreAnswer(1.0, {"0": "low", "1": "high"}, probabilities, 0.9)


@pytest.mark.parametrize("key", ["", 1, None])
def test_question_ids_are_non_empty_strings(key: Any) -> None:
    with pytest.raises(ConfigError, match="question ids must be non-empty strings"):
        DecisionRequest(state="s", questions={key: BooleanQuestion("Is it?")})


def fast_path_servers(tools_each: int, count: int) -> list[Server]:
    return [
        Server(f"s{i}", f"Server {i}", tuple(f"s{i}_t{j}" for j in range(tools_each)))
        for i in range(count)
    ]


async def test_the_fast_path_runs_from_exactly_its_minimum_of_tools() -> None:
    config = RoutingConfig(embedding=True, embedding_top_k=3, embedding_min_tools=10)
    decider = ScriptedDecider({}, default=0.9)
    result = await route_servers(
        "s0 tool", fast_path_servers(5, 2), decider=decider, embedder=HashingEmbedder(64),
        config=config,
    )  # fmt: skip
    assert result.strategy == "embedding"  # 10 tools: exactly the minimum
    assert decider.requests == []


async def test_the_fast_path_is_skipped_when_top_k_would_keep_every_tool() -> None:
    # 10 tools and top-k 10: the fast path could drop nothing, so the decision router judges.
    config = RoutingConfig(embedding=True, embedding_top_k=10, embedding_min_tools=10)
    decider = ScriptedDecider({}, default=0.9)
    result = await route_servers(
        "s0 tool", fast_path_servers(5, 2), decider=decider, embedder=HashingEmbedder(64),
        config=config,
    )  # fmt: skip
    assert result.strategy == "decision"
    assert "embedding" not in result.reason


# An answer of one question's type never reads as another's, even when its fields would fit.
CHOICE = {"type": "choice", "choice": "a", "probabilities": {"a": 0.9, "b": 0.1}}
SCORE = {"type": "score", "score": 1.0, "legend": {"0": "low", "1": "high"},
         "probabilities": {"0": 0.1, "1": 0.9}}  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "question"),
    [
        ({**SCORE, "probability": 0.05}, BooleanQuestion("Is it?")),
        ({**CHOICE, "probability": 0.05}, BooleanQuestion("Is it?")),
        ({**SCORE, **CHOICE, "type": "score"}, ChoiceQuestion("Which?", {"a": None, "b": None})),
        ({**CHOICE, **SCORE, "type": "choice"}, ScoreQuestion("How much?", ["low", "high"])),
    ],
)
def test_an_answer_of_another_type_is_malformed(raw: dict[str, Any], question: Any) -> None:
    with pytest.raises(MalformedAnswer, match="expected a"):
        read_answer(raw, question)


@pytest.mark.parametrize(("kind", "question"), [
    ("boolean", BooleanQuestion("Is it?")),
    ("choice", ChoiceQuestion("Which?", {"a": None, "b": None})),
    ("score", ScoreQuestion("How much?", ["low", "high"])),
])  # fmt: skip
def test_an_answer_of_the_questions_type_reads(kind: str, question: Any) -> None:
    raw = {"boolean": {"type": "boolean", "probability": 0.05}, "choice": CHOICE, "score": SCORE}
    assert read_answer(raw[kind], question) is not None


@pytest.mark.parametrize(("strays", "ellipsis"), [(5, False), (6, True)])
def test_a_misaligned_reply_names_at_most_five_stray_ids(strays: int, ellipsis: bool) -> None:
    raw = {f"x{i}": {"type": "boolean", "probability": 0.5} for i in range(strays)}
    with pytest.raises(Misaligned) as caught:
        read_answers(raw, {"q": BooleanQuestion("Is it?")}, vendor="v")
    assert str(caught.value).startswith(f"{strays} answers under ids that were not asked")
    assert str(caught.value).endswith(" …") is ellipsis


@pytest.mark.parametrize("enabled", [True, False])
def test_an_unknown_dedup_mode_is_the_callers_mistake_not_a_fail_open(enabled: bool) -> None:
    tools = [{"name": "a", "description": "Send mail"}, {"name": "b", "description": "Send mail"}]
    with pytest.raises(ConfigError, match="dedup mode must be one of"):
        dedupe_tools(tools, enabled=enabled, mode="sematic")  # type: ignore[arg-type]


def test_no_related_tools_is_none_or_an_empty_mapping() -> None:
    assert Policy(related=None).related == {}  # type: ignore[arg-type]
    assert Policy(related={}).related == {}

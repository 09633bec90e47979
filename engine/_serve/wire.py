"""What crosses the wire: engine results as JSON, and JSON bodies as engine arguments.

Every reader here gets a body its route's schema has already checked (types and unknown
keys); what is left is meaning (a question's shape, a tool definition), refused as a
``BodyError`` that names the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._core.catalog.catalog import Catalog, Tool
from .._core.decide.types import (
    Answer,
    BooleanAnswer,
    BooleanQuestion,
    ChoiceAnswer,
    ChoiceQuestion,
    DecisionRequest,
    DecisionResult,
    Question,
    ScoreQuestion,
)
from .._core.errors import CatalogError, ConfigError
from .._core.select.explain import Explanation
from .._core.select.selection import Selection
from .._routing.pipeline import RoutingOutcome
from .._runtime.steps import StepSelection
from .schema import BodyError


def _ms(value: float) -> float:
    return round(value, 3)


def _explanations(explanations: Sequence[Explanation]) -> list[dict[str, Any]]:
    return [e.to_json() for e in explanations]


def selection_json(selection: Selection) -> dict[str, Any]:
    return {
        "tool_ids": list(selection.tool_ids),
        "scores": list(selection.scores),
        "sources": list(selection.sources),
        "strategy": str(selection.strategy),
        "outcome": str(selection.outcome),
        "reason": selection.reason,
        "latency_ms": _ms(selection.latency_ms),
        "active_sets": list(selection.active_sets),
        "explanations": _explanations(selection.explanations),
    }


def routing_json(outcome: RoutingOutcome) -> dict[str, Any]:
    return {
        "selected": list(outcome.selected),
        "excluded": list(outcome.excluded),
        "excluded_tools": list(outcome.excluded_tools),
        "strategy": str(outcome.strategy),
        "outcome": str(outcome.outcome),
        "reason": outcome.reason,
        "latency_ms": _ms(outcome.latency_ms),
        "answered": outcome.answered,
        "cache_hit": outcome.cache_hit,
        "model": outcome.model,
    }


def step_json(step: StepSelection) -> dict[str, Any]:
    return {
        "tool_ids": None if step.tool_ids is None else list(step.tool_ids),
        "query": step.query,
        "page": step.page,
        "outcome": str(step.outcome),
        "reason": step.reason,
        "latency_ms": _ms(step.latency_ms),
        "active_sets": list(step.active_sets),
        "system_prompts": list(step.system_prompts),
        "routing": None if step.routing is None else routing_json(step.routing),
        "explanations": _explanations(step.explanations),
    }


def _answer_json(answer: Answer) -> dict[str, Any]:
    if isinstance(answer, BooleanAnswer):
        return {"type": "boolean", "probability": answer.probability}
    if isinstance(answer, ChoiceAnswer):
        return {
            "type": "choice",
            "choice": answer.choice,
            "probabilities": dict(answer.probabilities),
            "confidence": answer.confidence,
        }
    return {
        "type": "score",
        "score": answer.score,
        "legend": dict(answer.legend),
        "probabilities": dict(answer.probabilities),
        "confidence": answer.confidence,
    }


def decision_json(result: DecisionResult | None) -> dict[str, Any]:
    """``{"result": null}`` is the fail-open answer: no judgement, carry on as before."""
    if result is None:
        return {"result": None}
    return {
        "result": {
            "model": result.model,
            "provider": result.provider,
            "answers": {key: _answer_json(a) for key, a in result.answers.items()},
            "usage": {
                "input_tokens": result.usage.input_tokens,
                "output_tokens": result.usage.output_tokens,
            },
            "latency_ms": _ms(result.latency_ms),
        }
    }


def _question(key: str, data: Mapping[str, Any]) -> Question:
    field = f"questions.{key}"
    kind = data["type"]
    extra = sorted(set(data) - {"type", "instructions", *_QUESTION_FIELDS[kind]})
    if extra:
        raise BodyError(
            f"{field}.{extra[0]}: unknown field for a {kind} question (expected: "
            f"{', '.join(['type', 'instructions', *_QUESTION_FIELDS[kind]])})",
            f"{field}.{extra[0]}",
        )
    needed = {"choice": "options", "score": "levels"}.get(kind)
    if needed is not None and needed not in data:
        raise BodyError(
            f"{field}.{needed}: required for a {kind} question, missing", f"{field}.{needed}"
        )
    try:
        if kind == "boolean":
            return BooleanQuestion(data["instructions"], data.get("true"), data.get("false"))
        if kind == "choice":
            if not isinstance(data["options"], dict):
                raise BodyError(f"{field}.options: expected an object", f"{field}.options")
            return ChoiceQuestion(data["instructions"], data["options"])
        if not isinstance(data["levels"], list):
            raise BodyError(f"{field}.levels: expected an array", f"{field}.levels")
        return ScoreQuestion(data["instructions"], data["levels"])
    except (ConfigError, ValueError, TypeError) as exc:
        raise BodyError(f"{field}: {exc}", field) from None


_QUESTION_FIELDS: dict[str, tuple[str, ...]] = {
    "boolean": ("true", "false"),
    "choice": ("options",),
    "score": ("levels",),
}


def decision_request(body: Mapping[str, Any]) -> DecisionRequest:
    """A ``DecisionRequest`` from a checked ``/v1/decide`` body (no media: a path in a
    request would make the service read its own files)."""
    questions = {key: _question(key, value) for key, value in body["questions"].items()}
    if not questions:
        raise BodyError("questions: expected at least one question, got none", "questions")
    try:
        return DecisionRequest(state=body["state"], questions=questions, model=body.get("model"))
    except (ConfigError, ValueError, TypeError) as exc:
        raise BodyError(f"the request: {exc}", None) from None


def tools(data: Sequence[Any], field: str) -> tuple[Tool, ...]:
    """Tool definitions in any format the catalogue reads (OpenAI, Anthropic, MCP …)."""
    if not data:
        return ()
    try:
        return Catalog.from_data(list(data)).tools
    except CatalogError as exc:
        raise BodyError(f"{field}: {exc}", field) from None

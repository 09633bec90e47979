"""What a selection returns, and the strategies that rank it."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

import attrs

from ..errors import ConfigError
from ..outcome import Outcome
from .explain import Explanation, Tier


class Strategy(enum.StrEnum):
    """How recall scores the tools; each member equals its string value.

    - ``keyword``: BM25 over the tools' text; its scores are BM25-based, in [0, ∞).
    - ``semantic``: cosine similarity of the request's and the tools' embeddings, in [-1, 1].
    - ``combined``: cosine lifted by keyword coverage (see ``fusion``), in [-1, 1.5].
    """

    KEYWORD = "keyword"
    SEMANTIC = "semantic"
    COMBINED = "combined"


#: Every strategy's name, in documentation order (the CLI's choices).
STRATEGIES: tuple[str, ...] = tuple(s.value for s in Strategy)

#: Strategies whose scores are on the embedder's cosine scale (where anchor floors live).
COSINE_SCALED = frozenset({Strategy.SEMANTIC, Strategy.COMBINED})


def strategy_named(value: object) -> Strategy:
    """``value`` (a ``Strategy`` or its name) as a ``Strategy``.

    Raises:
        ConfigError: ``value`` names no strategy (the message lists the ones there are).
    """
    if isinstance(value, str):
        try:
            return Strategy(value)
        except ValueError:
            pass
    raise ConfigError(f"unknown strategy {value!r}; expected one of {', '.join(STRATEGIES)}")


@attrs.frozen(kw_only=True)
class Selection:
    """The tools to show the model for one request.

    Attributes:
        tool_ids: in order: always-active tools, ranked picks (best first), related tools.
        scores: per tool, the score on the strategy's scale; ``None`` for tools a rule added
            without a score.
        strategy: the ``Strategy`` that produced the ranking (``keyword`` when recall
            degraded), or ``"<strategy>+rerank"`` when the generator re-ranked it; compares
            equal to the plain string either way.
        outcome: ``applied``, ``degraded`` (embedder unavailable: keyword-only) or
            ``skipped`` (empty request).
        reason: why the outcome is not ``applied``; empty otherwise.
        latency_ms: time spent selecting.
        sources: per tool, why it is here: ``ranked``, ``always_active``, ``related`` or
            ``tool_set``.
        active_sets: names of the tool sets that activated (for ``system_prompts``).
        explanations: when asked for (``explain=``), one ``Explanation`` per shown tool in
            order, then one per asked-about hidden tool; empty otherwise.
        request_id: the id of the ``Engine.select`` call that made it; its events
            (``selection.finished``, a ``fail_open``) carry the same. ``None`` outside an
            engine (``ToolIndex.select``).
        no_tool_needed: the engine's decider answered "does this request need any tool?"
            with a confident "no" (``selection.no_tool`` on): only ``always_active`` tools
            remain, and ``reason`` gives the probability. ``False`` whenever it was not asked
            or not answered confidently.
    """

    tool_ids: tuple[str, ...]
    scores: tuple[float | None, ...]
    strategy: str
    outcome: Outcome
    reason: str = ""
    latency_ms: float = 0.0
    sources: tuple[str, ...] = ()
    active_sets: tuple[str, ...] = ()
    explanations: tuple[Explanation, ...] = ()
    request_id: str | None = None
    no_tool_needed: bool = False

    def explanation(self, tool_id: str) -> Explanation | None:
        """The explanation of ``tool_id``, ``None`` when it was not explained."""
        return next((e for e in self.explanations if e.tool_id == tool_id), None)

    def __len__(self) -> int:
        return len(self.tool_ids)


@attrs.frozen(kw_only=True)
class Ranking:
    """Candidates best first, before any policy: what evaluation scores.

    ``strategy`` is the ``Strategy`` that ranked them (``keyword`` when recall degraded), or
    ``"<strategy>+rerank"`` after the generator re-ranked them; ``outcome`` and ``reason``
    come from the selection planner (``reason`` is empty only when ``applied``); ``tier``
    names the model that made the request's vector (``full``, ``fast``, or ``keyword`` for
    none).
    """

    tool_ids: tuple[str, ...]
    scores: tuple[float, ...]
    strategy: str
    outcome: Outcome
    reason: str = ""
    baseline: float = 0.0
    tier: Tier = "full"

    def only(self, ids: Iterable[str]) -> Ranking:
        """This ranking restricted to ``ids`` that it holds, in the order ``ids`` gives."""
        scores = dict(zip(self.tool_ids, self.scores, strict=True))
        kept = tuple(i for i in ids if i in scores)
        return attrs.evolve(self, tool_ids=kept, scores=tuple(scores[i] for i in kept))


def threshold_applies(ranking: Ranking) -> bool:
    """Whether a policy's ``threshold`` applies to ``ranking``'s scores: only to a ranking
    judged normally (a degraded one is on another scale, keyword-only)."""
    return ranking.outcome is Outcome.APPLIED


def anchor_scores(ranking: Ranking) -> Mapping[str, float]:
    """The scores tool-set anchors may read: a normally judged ranking on the embedder's
    cosine scale, where the floors are measured; none from keyword-only, degraded or
    re-ranked scores (forced sets still apply)."""
    if ranking.outcome is not Outcome.APPLIED or ranking.strategy not in COSINE_SCALED:
        return {}
    return dict(zip(ranking.tool_ids, ranking.scores, strict=True))

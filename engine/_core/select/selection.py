"""What a selection returns."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from ..outcome import Outcome
from .explain import Explanation


@attrs.frozen(kw_only=True)
class Selection:
    """The tools to show the model for one request.

    Attributes:
        tool_ids: in order: always-active tools, ranked picks (best first), related tools.
        scores: per tool, the score on the strategy's scale; ``None`` for tools a rule added
            without a score.
        strategy: the strategy that produced the ranking (``keyword`` when recall degraded).
        outcome: ``applied``, ``degraded`` (embedder unavailable: keyword-only) or
            ``skipped`` (empty request).
        reason: why the outcome is not ``applied``; empty otherwise.
        latency_ms: time spent selecting.
        sources: per tool, why it is here: ``ranked``, ``always_active``, ``related`` or
            ``tool_set``.
        active_sets: names of the tool sets that activated (for ``system_prompts``).
        explanations: when asked for (``explain=``), one ``Explanation`` per shown tool in
            order, then one per asked-about hidden tool; empty otherwise.
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

    def explanation(self, tool_id: str) -> Explanation | None:
        """The explanation of ``tool_id``, ``None`` when it was not explained."""
        return next((e for e in self.explanations if e.tool_id == tool_id), None)

    def __len__(self) -> int:
        return len(self.tool_ids)


@attrs.frozen(kw_only=True)
class Ranking:
    """Candidates best first, before any policy: what evaluation scores."""

    tool_ids: tuple[str, ...]
    scores: tuple[float, ...]
    strategy: str
    outcome: Outcome
    reason: str = ""
    baseline: float = 0.0

    def only(self, ids: Iterable[str]) -> Ranking:
        """This ranking restricted to ``ids`` that it holds, in the order ``ids`` gives."""
        scores = dict(zip(self.tool_ids, self.scores, strict=True))
        kept = tuple(i for i in ids if i in scores)
        return attrs.evolve(self, tool_ids=kept, scores=tuple(scores[i] for i in kept))

"""The selection policy: a pure function from ranked candidates to the tools to show."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

import attrs

from ..catalog.catalog import id_tuple
from ..errors import ConfigError
from ..outcome import Outcome
from ..validators import is_number, rule
from .selection import Ranking, Selection
from .toolsets import ToolSet, activated_sets, expand_additive

#: toolpick's elbow: cut where one gap is at least this share of the top score's lead.
GAP_RATIO = 0.4
#: The elbow never cuts below this many results (unless ``max_tools`` is smaller).
MIN_ADAPTIVE = 2

# The command line refuses the same values; a float count or a NaN threshold would otherwise
# fail deep inside numpy, or silently select nothing.
_count = rule(
    lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "an integer of at least 0",
)
_threshold = rule(lambda v: v is None or is_number(v), "a finite number or None")
_flag = rule(lambda v: isinstance(v, bool), "True or False")


def _related_map(value: Mapping[str, Sequence[str]] | None) -> Mapping[str, tuple[str, ...]]:
    if not value:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"related must map a tool id to a list of tool ids, got {type(value).__name__}"
        )
    out: dict[str, tuple[str, ...]] = {}
    for key, targets in value.items():
        if isinstance(targets, str) or not all(isinstance(t, str) for t in targets):
            raise ConfigError(f"related[{key!r}] must be a list of tool ids, got {targets!r}")
        out[key] = tuple(targets)
    return out


def _set_tuple(value: Iterable[ToolSet]) -> tuple[ToolSet, ...]:
    sets = tuple(value)
    wrong = [s for s in sets if not isinstance(s, ToolSet)]
    if wrong:
        raise ConfigError(f"tool_sets must hold ToolSet objects, got {type(wrong[0]).__name__}")
    return sets


def _id_tuple(value: Sequence[str]) -> tuple[str, ...]:
    return id_tuple(value, "always_active")


def _set_names(value: Sequence[str]) -> tuple[str, ...]:
    return id_tuple(value, "forced_sets")


@attrs.frozen(kw_only=True)
class Policy:
    """How many of the ranked tools to show, and which to add regardless.

    Attributes:
        max_tools: ceiling on ranked picks (always-active and related tools come on top).
        threshold: drop ranked tools scoring below this, on the strategy's score scale
            (cosine for ``semantic``, BM25 for ``keyword``, cosine + coverage boost for
            ``combined``). Not applied when recall degraded to keyword-only.
        adaptive: cut the ranked list at its elbow (a large drop in score).
        always_active: tool ids included in every selection, first.
        related: one-direction expansion, ``{id: [ids shown with it]}``.
        max_related: ceiling on tools added by ``related``.
        tool_sets: ``ToolSet``s; an activated set's members are added (additive expansion).
        forced_sets: names of sets active regardless of scores (sticky per session).
    """

    max_tools: int = attrs.field(default=5, validator=_count)
    threshold: float | None = attrs.field(default=None, validator=_threshold)
    adaptive: bool = attrs.field(default=True, validator=_flag)
    always_active: tuple[str, ...] = attrs.field(default=(), converter=_id_tuple)
    related: Mapping[str, tuple[str, ...]] = attrs.field(
        factory=dict, converter=_related_map, hash=False
    )
    max_related: int = attrs.field(default=5, validator=_count)
    tool_sets: tuple[ToolSet, ...] = attrs.field(default=(), converter=_set_tuple)
    forced_sets: tuple[str, ...] = attrs.field(default=(), converter=_set_names)

    def check_ids(self, known: Mapping[str, object] | Sequence[str] | object) -> None:
        """Raise ``ConfigError`` naming every id the catalogue does not have."""
        unknown = [i for i in self.always_active if i not in known]  # type: ignore[operator]
        if unknown:
            raise ConfigError(
                f"always_active names tools not in the catalogue: {', '.join(map(repr, unknown))}"
            )
        for key, targets in self.related.items():
            missing = [i for i in (key, *targets) if i not in known]  # type: ignore[operator]
            if missing:
                raise ConfigError(
                    f"related[{key!r}] names tools not in the catalogue: {', '.join(map(repr, missing))}"
                )
        for tool_set in self.tool_sets:
            missing = [i for i in (*tool_set.members, *tool_set.anchors) if i not in known]  # type: ignore[operator]
            if missing:
                raise ConfigError(
                    f"tool set {tool_set.name!r} names tools not in the catalogue: "
                    f"{', '.join(map(repr, missing))}"
                )
        names = {tool_set.name for tool_set in self.tool_sets}
        unknown_sets = [name for name in self.forced_sets if name not in names]
        if unknown_sets:
            raise ConfigError(
                f"forced_sets names unknown tool sets: {', '.join(map(repr, unknown_sets))}"
            )


@attrs.frozen
class Pick:
    """One chosen tool: its score (``None`` when a rule, not the ranking, added it) and why."""

    id: str
    score: float | None
    source: str  # "ranked" | "always_active" | "related" | "tool_set"


def apply_policy(
    ranked: Sequence[tuple[str, float]],
    policy: Policy,
    *,
    baseline: float = 0.0,
    use_threshold: bool = True,
) -> list[Pick]:
    """Choose the tools to show from candidates ranked best first.

    Args:
        ranked: ``(tool id, score)`` pairs, best first, ties already broken.
        baseline: a score meaning "no evidence" on this scale (the catalogue's median score);
            the elbow measures gaps against the lead of the top score over it, so it works on
            scales that may be negative.
        use_threshold: ``False`` when recall degraded and scores are on another scale.
    """
    candidates = list(ranked)
    if use_threshold and policy.threshold is not None:
        candidates = [(i, s) for i, s in candidates if s >= policy.threshold]
    candidates = candidates[: policy.max_tools]
    if policy.adaptive:
        candidates = elbow(candidates, baseline=baseline)
    scores = dict(ranked)
    picks = [Pick(i, scores.get(i), "always_active") for i in policy.always_active]
    seen = set(policy.always_active)
    for tool_id, score in candidates:
        if tool_id not in seen:
            seen.add(tool_id)
            picks.append(Pick(tool_id, score, "ranked"))
    budget = policy.max_related
    for tool_id, _ in candidates:
        for other in policy.related.get(tool_id, ()):
            if budget and other not in seen:
                seen.add(other)
                budget -= 1
                picks.append(Pick(other, scores.get(other), "related"))
    return picks


def elbow(ranked: Sequence[tuple[str, float]], *, baseline: float = 0.0) -> list[tuple[str, float]]:
    """Cut a best-first list at its first large drop (toolpick's gap rule, any scale).

    A gap counts as large when it is at least ``GAP_RATIO`` of the top score's lead over
    ``baseline``; the cut keeps at least ``MIN_ADAPTIVE`` results. With no lead there is no
    elbow to find and the list is returned whole.
    """
    if len(ranked) <= MIN_ADAPTIVE:
        return list(ranked)
    lead = ranked[0][1] - baseline
    if not lead > 0:
        return list(ranked)
    for i in range(len(ranked) - 1):
        gap = ranked[i][1] - ranked[i + 1][1]
        if i + 1 >= MIN_ADAPTIVE and gap / lead >= GAP_RATIO:
            return list(ranked[: i + 1])
    return list(ranked)


#: Strategies whose scores are on the embedder's cosine scale (where anchor floors live).
COSINE_SCALED = frozenset({"semantic", "combined"})


def select(ranking: Ranking, policy: Policy, started: float) -> Selection:
    """Apply ``policy`` to a ranking; ``started`` is the ``perf_counter`` time the call began.

    The threshold applies only to a ranking judged normally: a degraded one is on another
    scale (keyword-only).
    """
    picks = apply_policy(
        list(zip(ranking.tool_ids, ranking.scores, strict=True)),
        policy,
        baseline=ranking.baseline,
        use_threshold=ranking.outcome is Outcome.APPLIED,
    )
    active: tuple[str, ...] = ()
    if policy.tool_sets:
        # Anchor floors are on the embedder's cosine scale: keyword-only and re-ranked scores
        # cannot activate a set (forced sets still apply).
        scores = dict(zip(ranking.tool_ids, ranking.scores, strict=True))
        if ranking.outcome is not Outcome.APPLIED or ranking.strategy not in COSINE_SCALED:
            scores = {}
        active = activated_sets(scores, policy.tool_sets, forced=policy.forced_sets)
        members = {m for s in policy.tool_sets for m in s.members}
        have = {p.id for p in picks}
        for tool_id in expand_additive(
            [p.id for p in picks], members, scores, policy.tool_sets, forced=policy.forced_sets
        ):
            if tool_id not in have:
                picks.append(Pick(tool_id, scores.get(tool_id), "tool_set"))
    return Selection(
        tool_ids=tuple(p.id for p in picks),
        scores=tuple(p.score for p in picks),
        strategy=ranking.strategy,
        outcome=ranking.outcome,
        reason=ranking.reason,
        latency_ms=(time.perf_counter() - started) * 1000.0,
        sources=tuple(p.source for p in picks),
        active_sets=active,
    )

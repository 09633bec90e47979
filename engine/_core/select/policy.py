"""The selection policy: a pure function from ranked candidates to the tools to show."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

import attrs

from ..catalog.catalog import id_tuple
from ..errors import ConfigError
from ..validators import is_number, rule
from .access import OPEN, ToolAccess
from .explain import Cuts, ExplainRequest, Explanation, explanations, hidden_before_ranking
from .selection import Ranking, Selection, anchor_scores, threshold_applies
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
    if value is None:
        return {}
    if not isinstance(value, Mapping):  # [] and "" too: only None means "no related tools"
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
    """One chosen tool: its score (``None`` when a rule, not the ranking, added it), why, and
    what pulled it in (the ranked tool for ``related``, the set for ``tool_set``)."""

    id: str
    score: float | None
    source: str  # "ranked" | "always_active" | "related" | "tool_set"
    by: str | None = None


def policy_cuts(
    ranked: Sequence[tuple[str, float]],
    policy: Policy,
    *,
    baseline: float = 0.0,
    use_threshold: bool = True,
) -> tuple[list[tuple[str, float]], list[tuple[str, float]], list[tuple[str, float]]]:
    """The ranked candidates each cut keeps, in the order the policy applies them: the
    threshold, then ``max_tools``, then the adaptive elbow (the last is what is shown)."""
    past_threshold = list(ranked)
    if use_threshold and policy.threshold is not None:
        past_threshold = [(i, s) for i, s in past_threshold if s >= policy.threshold]
    within_cap = past_threshold[: policy.max_tools]
    past_elbow = elbow(within_cap, baseline=baseline) if policy.adaptive else within_cap
    return past_threshold, within_cap, past_elbow


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
        baseline: a score meaning "no evidence" on this scale (the catalogue's mean score);
            the elbow measures gaps against the lead of the top score over it, so it works on
            scales that may be negative.
        use_threshold: ``False`` when recall degraded and scores are on another scale.
    """
    candidates = policy_cuts(ranked, policy, baseline=baseline, use_threshold=use_threshold)[2]
    return picks_from(candidates, ranked, policy)


def picks_from(
    candidates: Sequence[tuple[str, float]], ranked: Sequence[tuple[str, float]], policy: Policy
) -> list[Pick]:
    """Always-active tools, the ``candidates`` that survived the cuts, then related tools."""
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
                picks.append(Pick(other, scores.get(other), "related", tool_id))
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


def select(
    ranking: Ranking,
    policy: Policy,
    started: float,
    *,
    explain: ExplainRequest | None = None,
    hidden: Mapping[str, Explanation] | None = None,
    access: ToolAccess = OPEN,
) -> Selection:
    """Apply ``policy`` to a ranking; ``started`` is the ``perf_counter`` time the call began.

    The threshold applies only where ``threshold_applies``; anchors read only
    ``anchor_scores``. With ``explain``, the selection carries one ``Explanation`` per
    shown tool and per asked-about hidden tool, from the cuts as they were made. ``access``
    removes what it does not permit before any cut and from every rule's additions.
    """
    if access.restricts:
        ranking = ranking.only(access.only(ranking.tool_ids))
        if explain is not None:
            denied = [i for i in explain.ask if not access.permits(i)]
            hidden = {**(hidden or {}), **hidden_before_ranking(denied, denied=denied)}
    ranked = list(zip(ranking.tool_ids, ranking.scores, strict=True))
    cuts = policy_cuts(
        ranked,
        policy,
        baseline=ranking.baseline,
        use_threshold=threshold_applies(ranking),
    )
    picks = picks_from(cuts[2], ranked, policy)
    active: tuple[str, ...] = ()
    if policy.tool_sets:
        scores = anchor_scores(ranking)
        active = activated_sets(scores, policy.tool_sets, forced=policy.forced_sets)
        members = {m for s in policy.tool_sets for m in s.members}
        have = {p.id for p in picks}
        for tool_id in expand_additive(
            [p.id for p in picks], members, scores, policy.tool_sets, forced=policy.forced_sets
        ):
            if tool_id not in have:
                by = next(
                    (t.name for t in policy.tool_sets if t.name in active and tool_id in t.members),
                    None,
                )
                picks.append(Pick(tool_id, scores.get(tool_id), "tool_set", by))
    if access.restricts:
        picks = [p for p in picks if access.permits(p.id)]
    explained: tuple[Explanation, ...] = ()
    if explain is not None:
        recorded = Cuts(
            ranked=ranking.tool_ids,
            past_threshold=frozenset(i for i, _ in cuts[0]),
            within_cap=frozenset(i for i, _ in cuts[1]),
            past_elbow=frozenset(i for i, _ in cuts[2]),
        )
        shown = [(p.id, p.score, p.source, p.by) for p in picks]
        explained = explanations(explain, ranking, shown, recorded, hidden=hidden)
    return Selection(
        tool_ids=tuple(p.id for p in picks),
        scores=tuple(p.score for p in picks),
        strategy=ranking.strategy,
        outcome=ranking.outcome,
        reason=ranking.reason,
        latency_ms=(time.perf_counter() - started) * 1000.0,
        sources=tuple(p.source for p in picks),
        active_sets=active,
        explanations=explained,
    )

"""Tool sets: tools that only make sense together (search + read page; geocode + forecast).

A set activates when one of its anchors genuinely scores at or above the set's floor (or the
host forces it); activation then pulls in every available member. Semantics follow anuma's
ToolSets: an exclusive application and an additive expansion, system prompts appended in
set order.

The similarity floors are on the default embedder's cosine scale and were measured, not
copied (``tests/bench/toolset_floors.py``, MetaTool dev split): over (request, tool) pairs,
``ANCHOR_MIN_SIMILARITY`` is the lowest cosine at which at least 80 % of pairs are a request
and its expected tool, and ``INDEPENDENT_THRESHOLD`` the lowest at which 90 % are.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

import attrs

from ..catalog.catalog import id_tuple

#: Cosine at which an anchor activates its set (the bundled model; 80 % pair precision on
#: dev, keeping 35 % of the true pairs: an anchor has to be clearly asked for).
ANCHOR_MIN_SIMILARITY = 0.51
#: Cosine at which a matched tool outside every activated set stays (90 % pair precision).
INDEPENDENT_THRESHOLD = 0.60


def _members(value: Iterable[str]) -> tuple[str, ...]:
    return id_tuple(value, "members")


def _anchors(value: Iterable[str]) -> tuple[str, ...]:
    return id_tuple(value, "anchors")


@attrs.frozen(kw_only=True)
class ToolSet:
    """Tools shown together when an anchor is genuinely relevant.

    Attributes:
        name: unique among the sets a host passes.
        members: tool ids pulled in when the set activates (anchors usually among them).
        anchors: tool ids whose score can activate the set.
        anchor_min_similarity: floor an anchor's score must reach (cosine of the active
            embedder; the default is measured for the offline default embedder).
        system_prompt: appended to the host's system prompt while the set is active.
    """

    name: str
    members: tuple[str, ...] = attrs.field(converter=_members)
    anchors: tuple[str, ...] = attrs.field(converter=_anchors)
    anchor_min_similarity: float = ANCHOR_MIN_SIMILARITY
    system_prompt: str | None = None


def activated_sets(
    scores: Mapping[str, float],
    sets: Sequence[ToolSet],
    *,
    forced: Collection[str] = (),
    exclude: Collection[str] = (),
) -> tuple[str, ...]:
    """Names of the sets that are forced or have an anchor scoring at least their floor.

    An excluded tool can never anchor.
    """
    return tuple(
        s.name
        for s in sets
        if s.name in forced
        or any(
            a not in exclude and scores.get(a, float("-inf")) >= s.anchor_min_similarity
            for a in s.anchors
        )
    )


def expand_additive(
    matched: Sequence[str],
    available: Collection[str],
    scores: Mapping[str, float],
    sets: Sequence[ToolSet],
    *,
    forced: Collection[str] = (),
    exclude: Collection[str] = (),
) -> list[str]:
    """``matched`` plus the available members of every activated set (recall over precision:
    matched members of sets that do not activate stay). Excluded tools are dropped."""
    active = set(activated_sets(scores, sets, forced=forced, exclude=exclude))
    members = [m for s in sets if s.name in active for m in s.members if m in available]
    return [t for t in dict.fromkeys((*matched, *members)) if t not in exclude]


def apply_exclusive(
    matched: Sequence[str],
    available: Collection[str],
    scores: Mapping[str, float],
    sets: Sequence[ToolSet],
    *,
    independent_threshold: float = INDEPENDENT_THRESHOLD,
) -> list[str]:
    """The members of every set whose anchor was matched and clears its floor, plus matched
    tools outside those sets scoring at least ``independent_threshold``. No set active →
    ``matched`` unchanged."""
    chosen = set(matched)
    active = [
        s
        for s in sets
        if any(
            a in chosen and scores.get(a, float("-inf")) >= s.anchor_min_similarity
            for a in s.anchors
        )
    ]
    if not active:
        return list(matched)
    members = [m for s in active for m in s.members if m in available]
    in_sets = set(members)
    independent = [
        t
        for t in matched
        if t not in in_sets and scores.get(t, float("-inf")) >= independent_threshold
    ]
    return list(dict.fromkeys((*members, *independent)))


def system_prompts(sets: Sequence[ToolSet], active: Collection[str]) -> list[str]:
    """System prompts of the active sets, in set order, without repeats — to append to the
    host's own prompt, never to replace it."""
    return list(
        dict.fromkeys(s.system_prompt for s in sets if s.name in active and s.system_prompt)
    )

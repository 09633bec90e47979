"""Explanations: why each tool of a selection is shown, and why an asked-about tool is not.

The planner knows every reason as it decides (which rule added a tool, which cut removed
one); this module turns what it recorded into one frozen ``Explanation`` per tool. No request
text goes in: matched words are the *tool's* tokens, scores are numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, Literal, Protocol

import attrs

from ..errors import ConfigError
from ..outcome import Outcome
from ..recall.fusion import FAST_TIER, FULL_TIER
from ..text import tokenize

if TYPE_CHECKING:
    from ..catalog.catalog import Catalog
    from ..recall.keyword import KeywordIndex


class ExplainedIndex(Protocol):
    """What explaining reads of the recall index (``RecallIndex`` has it)."""

    @property
    def catalog(self) -> Catalog: ...

    @property
    def keyword(self) -> KeywordIndex: ...


#: Which model made a ranking's request vector: the embedding model (``full``), the fast
#: tier (``fast``), or none (``keyword``).
Tier = Literal["full", "fast", "keyword"]


class ExplainedRanking(Protocol):
    """What explaining reads of a ranking (``Ranking`` has it)."""

    @property
    def tool_ids(self) -> tuple[str, ...]: ...
    @property
    def scores(self) -> tuple[float, ...]: ...
    @property
    def strategy(self) -> str: ...
    @property
    def outcome(self) -> Outcome: ...
    @property
    def reason(self) -> str: ...
    @property
    def tier(self) -> Tier: ...


#: Why a tool is shown (``Explanation.reason`` when ``shown``).
SHOWN_REASONS = ("ranked", "always_active", "related", "tool_set", "found", "all_tools")
#: Why a tool is hidden (``Explanation.reason`` when not ``shown``).
HIDDEN_REASONS = (
    "max_tools",  # ranked, but past the cap (or past this step's page)
    "earlier_page",  # ranked above this step's page: an earlier step showed it
    "threshold",  # scored below the threshold
    "adaptive",  # cut at the ranking's elbow
    "not_recalled",  # not among the candidates recall returned (no match good enough)
    "routing",  # its server was dropped by server routing
    "dedup",  # a near-duplicate of another tool, which stands for it
    "denied",  # on a deny-list, or outside an allow-list
    "skipped",  # the request had no text: nothing was ranked
    "no_tool",  # the decider said, confidently, that the request needs no tool
)


@attrs.frozen(kw_only=True)
class Explanation:
    """Why one tool is shown or hidden. Holds no request text.

    Attributes:
        tool_id: the tool.
        shown: whether the selection shows it.
        reason: one of ``ranked``, ``always_active``, ``related``, ``tool_set``, ``found``,
            ``all_tools`` (shown), or ``max_tools``, ``earlier_page``, ``threshold``,
            ``adaptive``, ``not_recalled``, ``routing``, ``dedup``, ``denied``, ``skipped``,
            ``no_tool`` (hidden).
        rank: 1-based position in the recall ranking, ``None`` when not ranked.
        score: the score on the strategy's scale, ``None`` when not ranked.
        cosine: the embedding similarity to the request, when the ranking had one.
        tier: ``full`` (the embedding model), ``fast`` (the fast tier) or ``keyword``.
        matched_words: the tool's own tokens the request contains (sorted).
        tool_set: the tool set that pulled it in (``reason = tool_set``).
        related_to: the ranked tool it is related to (``reason = related``).
        server: the server routing dropped (``reason = routing``).
        routing: the routing stage that dropped it (``decision``, ``generative``, …).
        duplicate_of: the tool standing for it (``reason = dedup``).
    """

    tool_id: str
    shown: bool
    reason: str
    rank: int | None = None
    score: float | None = None
    cosine: float | None = None
    tier: str = "keyword"
    matched_words: tuple[str, ...] = ()
    tool_set: str | None = None
    related_to: str | None = None
    server: str | None = None
    routing: str | None = None
    duplicate_of: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with every field (a fixed shape for logs)."""
        data = attrs.asdict(self)
        data["matched_words"] = list(self.matched_words)
        return data


@attrs.frozen(kw_only=True)
class ExplainRequest:
    """What to explain: the shown tools, plus the hidden tools a caller asked about.

    Attributes:
        ask: hidden tool ids to explain as well (ids of shown tools are explained anyway).
        index: the recall index (its catalogue and keyword statistics).
        query: the request; only its tokens are compared, none is stored.
    """

    ask: tuple[str, ...]
    index: ExplainedIndex
    query: str


@attrs.frozen(kw_only=True)
class Cuts:
    """What each rule of the policy kept, in order (recorded by ``apply_policy``)."""

    ranked: tuple[str, ...]
    past_threshold: frozenset[str]
    within_cap: frozenset[str]
    past_elbow: frozenset[str]

    def hidden_reason(self, tool_id: str) -> str:
        """The first rule that removed a ranked tool, ``not_recalled`` when never ranked."""
        if tool_id not in self.ranked_set:
            return "not_recalled"
        if tool_id not in self.past_threshold:
            return "threshold"
        if tool_id not in self.within_cap:
            return "max_tools"
        return "adaptive"

    @property
    def ranked_set(self) -> frozenset[str]:
        return frozenset(self.ranked)


def explain_ask(value: object) -> tuple[str, ...] | None:
    """The ``explain=`` argument read: ``False``/``None`` → ``None`` (off), ``True`` → the
    shown tools only, a list of ids → those as well.

    Raises:
        ConfigError: anything else (a caller's mistake, said plainly).
    """
    if value is None or value is False:
        return None
    if value is True:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence | AbstractSet) and all(isinstance(v, str) for v in value):
        return tuple(dict.fromkeys(value))
    raise ConfigError(
        f"explain must be True, False or a list of tool ids, got {type(value).__name__}"
    )


def check_known(ids: Sequence[str], known: Container[str], field: str) -> None:
    """Raise ``ConfigError`` naming the ids of ``field`` that ``known`` does not hold."""
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise ConfigError(
            f"{field} names tools not in the catalogue: {', '.join(map(repr, unknown))}"
        )


def tier_of(ranking: ExplainedRanking) -> Tier:
    """Which recall rung produced ``ranking``."""
    return "keyword" if ranking.strategy == "keyword" else ranking.tier


def explanations(
    request: ExplainRequest,
    ranking: ExplainedRanking,
    shown: Sequence[tuple[str, float | None, str, str | None]],
    cuts: Cuts | None,
    *,
    hidden: Mapping[str, Explanation] | None = None,
) -> tuple[Explanation, ...]:
    """One explanation per shown tool (``(id, score, source, pulled in by)``, in order), then
    one per asked-about hidden tool: from ``hidden`` when the shell's rules (routing, dedup,
    deny-lists) removed it before ranking, else from the policy's ``cuts``."""
    on_show = [tool_id for tool_id, *_ in shown]
    shown_set = set(on_show)
    asked = [i for i in request.ask if i not in shown_set and not (hidden and i in hidden)]
    catalog = request.index.catalog
    explained = [i for i in (*on_show, *asked) if i in catalog]
    rows = [catalog.position(i) for i in explained]
    tokens = tokenize(request.query)
    keyword = request.index.keyword
    matched = dict(zip(explained, keyword.matched_terms(tokens, rows), strict=True))
    positions = {tool_id: rank for rank, tool_id in enumerate(ranking.tool_ids, 1)}
    scores = dict(zip(ranking.tool_ids, ranking.scores, strict=True))
    tier = tier_of(ranking)
    cosine = _cosines(request, ranking, tier, tokens, matched)

    def record(tool_id: str, shown_: bool, reason: str, **extra: Any) -> Explanation:
        return Explanation(
            tool_id=tool_id,
            shown=shown_,
            reason=reason,
            rank=positions.get(tool_id),
            score=scores.get(tool_id),
            cosine=cosine(tool_id),
            tier=tier,
            matched_words=tuple(sorted(matched.get(tool_id, ()))),
            **extra,
        )

    out = []
    for tool_id, _score, source, by in shown:
        extra: dict[str, Any] = {}
        if source == "related":
            extra["related_to"] = by
        elif source == "tool_set":
            extra["tool_set"] = by
        out.append(record(tool_id, True, source, **extra))
    for tool_id in request.ask:
        if tool_id in shown_set:
            continue
        if hidden and tool_id in hidden:
            out.append(attrs.evolve(hidden[tool_id], tier=tier))
        elif ranking.outcome is Outcome.SKIPPED or cuts is None:
            out.append(record(tool_id, False, "skipped"))
        else:
            out.append(record(tool_id, False, cuts.hidden_reason(tool_id)))
    return tuple(out)


def _cosines(
    request: ExplainRequest,
    ranking: ExplainedRanking,
    tier: str,
    tokens: Sequence[str],
    matched: Mapping[str, Sequence[str]],
) -> Callable[[str], float | None]:
    """``tool id → cosine`` for a ranking that had one: the score itself for ``semantic``;
    for ``combined``, the score less the keyword boosts ``fuse`` added (the coverage from the
    matched terms' IDF, the name coverage from the index)."""
    if tier == "keyword" or not ranking.tool_ids:
        return lambda _tool_id: None
    scores = dict(zip(ranking.tool_ids, ranking.scores, strict=True))
    if ranking.strategy == "semantic":
        return scores.get
    if ranking.strategy != "combined":  # a re-ranker's scores are on its own scale
        return lambda _tool_id: None
    keyword = request.index.keyword
    mass = keyword.query_mass(tokens) or 1.0
    position = request.index.catalog.position
    explained = list(matched)
    rows = [position(tool_id) for tool_id in explained]
    covered = keyword.name_coverage_of(tokens, rows)
    names = {tool_id: float(covered[i]) for i, tool_id in enumerate(explained)}
    idf, vocabulary = keyword.bm25_idf, keyword.vocabulary
    # A step down to the fast tier fuses with its own weights; a fast ranking that stood
    # (the cascade, applied) with the model's, the ones its floor was chosen with.
    stepped_down = tier == "fast" and ranking.outcome is Outcome.DEGRADED
    weights = FAST_TIER if stepped_down else FULL_TIER

    def cosine(tool_id: str) -> float | None:
        score = scores.get(tool_id)
        if score is None:
            return None
        coverage = sum(float(idf[vocabulary[t]]) for t in matched.get(tool_id, ())) / mass
        name = names.get(tool_id, 0.0)
        boost = weights.coverage * coverage**2 + weights.name * name**2
        return round(score - boost, 6)

    return cosine


def hidden_before_ranking(
    ask: Sequence[str],
    *,
    representative: Mapping[str, str] | None = None,
    routed_out: Collection[str] = (),
    server_of: Mapping[str, str | None] | None = None,
    routing_stage: str | None = None,
    denied: Collection[str] = (),
) -> dict[str, Explanation]:
    """Explanations of asked-about tools that rules before the ranking removed, by the first
    rule that applies: a deny-list, then dedup (``representative``: removed → kept), then
    server routing (``routed_out`` tools, dropped by ``routing_stage``)."""
    out: dict[str, Explanation] = {}
    for tool_id in ask:
        if tool_id in denied:
            out[tool_id] = Explanation(tool_id=tool_id, shown=False, reason="denied")
        elif representative and tool_id in representative:
            out[tool_id] = Explanation(
                tool_id=tool_id,
                shown=False,
                reason="dedup",
                duplicate_of=representative[tool_id],
            )
        elif tool_id in routed_out:
            out[tool_id] = Explanation(
                tool_id=tool_id,
                shown=False,
                reason="routing",
                server=(server_of or {}).get(tool_id),
                routing=routing_stage,
            )
    return out


def unranked_explanations(
    ask: Sequence[str],
    shown: Sequence[tuple[str, str]],
    hidden: Mapping[str, Explanation],
    *,
    hidden_reason: str,
) -> tuple[Explanation, ...]:
    """Explanations for a step that ranked nothing: ``shown`` as ``(id, reason)``, then each
    asked-about hidden tool (``hidden_reason`` unless a rule before ranking removed it)."""
    out = [Explanation(tool_id=i, shown=True, reason=reason) for i, reason in shown]
    on_show = {i for i, _ in shown}
    out.extend(
        hidden.get(tool_id) or Explanation(tool_id=tool_id, shown=False, reason=hidden_reason)
        for tool_id in ask
        if tool_id not in on_show
    )
    return tuple(out)

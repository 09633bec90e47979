"""``RecallIndex``: synchronous recall and selection over one catalogue, from given vectors.

Pure and frozen: it loads no model, reads no cache and holds no embedder. It ranks the tool
vectors it was given against the request vector it is given, so no call on it can run a
model (on an event loop or anywhere). The public ``toolroute.ToolIndex`` adds the embedder
(the default one, and the disk cache) on top of it; the engine embeds requests through its
batcher, under the embed deadline. What each ranking's strategy, outcome and reason are is
decided by the selection planner (``select_plan``); this module scores.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import attrs
import numpy as np
import numpy.typing as npt

from ..catalog.catalog import Catalog
from ..errors import ConfigError
from ..outcome import Outcome
from ..protocols import Embedder
from ..select.access import ToolAccess, recall_depth, request_access
from ..select.arguments import query_text
from ..select.explain import ExplainRequest, check_known, explain_ask
from ..select.plan import (
    RecallPlan,
    RequestVector,
    SelectPlan,
    Verdict,
    chosen_strategy,
    plan_recall,
    plan_select,
    policy_from_options,
)
from ..select.policy import Policy, select
from ..select.selection import STRATEGIES as STRATEGIES
from ..select.selection import Ranking, Selection
from ..select.selection import Strategy as Strategy
from ..select.toolsets import ToolSet
from ..text import embedding_text, keyword_document, split_identifier, tokenize
from .fusion import FusionWeights, fuse, keyword_terms
from .keyword import KeywordIndex
from .learned import LearnedScores
from .spelling import corrected
from .vectors import (
    INT8_FROM,
    Indices,
    Int8Index,
    Int8ProductFactory,
    Scores,
    VectorIndex,
    int8_index,
    top_k,
)

Progress = Callable[[int, int], None]
Vector = npt.NDArray[np.float32]


@attrs.frozen(kw_only=True, eq=False)
class RecallIndex:
    """Keyword and embedding recall over a catalogue, plus the selection policy.

    Build one with ``RecallIndex.build`` (keyword-only), then ``with_vectors`` for a copy
    that ranks by embeddings too; ``without_vectors`` for a keyword-only copy that says why.
    A copy shares the catalogue and the keyword index; nothing is ever changed in place.

    Attributes:
        catalog: the tools.
        ids: the tools' ids, in catalogue order (row ``i`` of every score is ``ids[i]``).
        keyword: the keyword index over the tools' text.
        extra_text: recall-only text per tool id (enrichment's phrasings); tools stay as
            given.
        vectors: the tool vectors, ``None`` for keyword-only recall.
        int8: the int8 copy scoring a large catalogue (``None``: fp32 scores everything).
        degraded_reason: why there are no tool vectors, when they were lost (else empty).
        int8_product: builds the int8 product for the quantised tool matrix; with it,
            catalogues of at least ``int8_from`` tools score semantic and combined recall
            from an ``Int8Index`` (int8 candidates, exact fp32 re-scoring: the same results
            as fp32, faster). ``None``: always fp32.
        int8_from: the catalogue size from which ``int8_product`` is used.
        build_s: seconds the keyword index took to build.
        learned: example and learned evidence of the tools (``learned.LearnedScores``),
            lifting the cosine of the tools it covers; ``None``: descriptions only.
    """

    catalog: Catalog
    ids: tuple[str, ...] = attrs.field(repr=False)
    keyword: KeywordIndex = attrs.field(repr=False)
    extra_text: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    vectors: VectorIndex | None = attrs.field(default=None, repr=False)
    int8: Int8Index | None = attrs.field(default=None, repr=False)
    degraded_reason: str = ""
    int8_product: Int8ProductFactory | None = attrs.field(default=None, repr=False)
    int8_from: int = INT8_FROM
    build_s: float = 0.0
    learned: LearnedScores | None = attrs.field(default=None, repr=False)
    #: Whether the index has tool vectors (``applied``), or why not (``degraded``); set
    #: from ``vectors`` once, as every request reads it.
    vectors_verdict: Verdict = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        verdict = Verdict.applied()
        if self.vectors is None:
            verdict = Verdict.degraded(self.degraded_reason or "the index has no tool vectors")
        object.__setattr__(self, "vectors_verdict", verdict)

    @classmethod
    def build(
        cls,
        catalog: Catalog,
        *,
        extra_text: Mapping[str, str] | None = None,
        int8_product: Int8ProductFactory | None = None,
        int8_from: int = INT8_FROM,
    ) -> RecallIndex:
        """A keyword-only index over ``catalog`` (``with_vectors`` adds embeddings).

        Raises:
            ConfigError: ``catalog`` is not a ``Catalog``.
        """
        started = time.perf_counter()
        if not isinstance(catalog, Catalog):
            raise ConfigError(f"expected a Catalog, got {type(catalog).__name__}")
        extra = dict(extra_text or {})
        keyword = KeywordIndex(
            [keyword_document(tool, extra.get(tool.id, "")) for tool in catalog],
            names=[tokenize(" ".join(split_identifier(tool.name))) for tool in catalog],
        )
        return cls(
            catalog=catalog,
            ids=catalog.ids,
            keyword=keyword,
            extra_text=extra,
            int8_product=int8_product,
            int8_from=int8_from,
            build_s=time.perf_counter() - started,
        )

    def with_vectors(self, vectors: npt.NDArray[np.float32]) -> RecallIndex:
        """A copy that uses ``vectors`` (one row per tool) for semantic and combined recall;
        for a large catalogue with an ``int8_product`` it quantises them too.

        This is how a runtime warms up in the background: serve a keyword-only index at once,
        embed the tools elsewhere (``embed_with_cache`` in the stores layer), then swap in
        the copy.

        Raises:
            ConfigError: ``vectors`` does not have one row per tool.
        """
        array = np.asarray(vectors, dtype=np.float32)
        if array.ndim != 2 or array.shape[0] != len(self.catalog):
            raise ConfigError(
                f"expected one vector per tool, shape ({len(self.catalog)}, dim); got {array.shape}"
            )
        exact = VectorIndex(array)
        return attrs.evolve(
            self,
            vectors=exact,
            int8=int8_index(exact, self.int8_product, self.int8_from),
            degraded_reason="",
            learned=None,  # it was aligned with the vectors it replaces
        )

    def with_learned(self, learned: LearnedScores | None) -> RecallIndex:
        """A copy whose semantic and combined recall adds ``learned`` evidence (built by
        ``learned.learned_scores`` for this index's ids and vectors); ``None``: none."""
        return attrs.evolve(self, learned=learned)

    def without_vectors(self, reason: str) -> RecallIndex:
        """A keyword-only copy whose selections report ``reason``."""
        return attrs.evolve(self, vectors=None, int8=None, degraded_reason=reason)

    def embedding_texts(self) -> list[str]:
        """What each tool is embedded from, in catalogue order (with its extra text)."""
        return [embedding_text(tool, self.extra_text.get(tool.id, "")) for tool in self.catalog]

    def spelled(self, query: str) -> str:
        """``query`` as recall reads it: its misspelled words corrected toward the words of
        the keyword index (``spelling.corrected``); the same string when none is."""
        return corrected(query, self.keyword)

    # -- recall -------------------------------------------------------------------------------

    def rank(
        self,
        query: str,
        query_vector: Vector | RequestVector | None,
        k: int = 10,
        *,
        strategy: Strategy | str | None = None,
        reason: str = "",
    ) -> Ranking:
        """The ``k`` best tools for ``query``, before any selection policy.

        Args:
            query_vector: the request's vector, a finite unit row of the index's width: an
                array (the full model's), a ``RequestVector`` (which also says whether it is
                a step down), or ``None`` (keyword-only).
            strategy: ``keyword``, ``semantic`` or ``combined``; by default ``combined`` when
                the index has tool vectors, else ``keyword``.
            reason: why there is no vector, when ``query_vector`` is ``None``.

        Raises:
            ConfigError: an unknown strategy.

        **Fail-open:** no vector, or an index without vectors, gives a keyword-only ranking,
        ``degraded`` with the reason (asking a keyword-only index for ``semantic`` or
        ``combined`` degrades instead of raising: a runtime asks before its embeddings are
        ready); an empty query gives an empty ranking, ``skipped``.
        """
        chosen = chosen_strategy(strategy, has_embedder=self.vectors is not None, strict=False)
        return self.ranked(query, request_vector(query_vector, reason), k, chosen)

    def ranked(
        self, query: str, request: RequestVector | None, k: int, strategy: Strategy
    ) -> Ranking:
        """``rank`` for a strategy already chosen: the planner decides, this scores."""
        return self._rank(
            query, k, plan_recall(query, strategy, request, tool_vectors=self.vectors_verdict)
        )

    def _rank(self, query: str, k: int, plan: RecallPlan) -> Ranking:
        if not plan.ranks:
            picked: Indices = np.empty(0, dtype=np.intp)
            picked_scores: Scores = np.empty(0, dtype=np.float32)
            baseline = 0.0
        elif plan.vector is None:
            scores = self.keyword.bm25(tokenize(query))
            # Keyword recall chosen shows only what matched; keyword recall fallen back to
            # (the model failed) ranks the rest after the matches, in catalogue order, so a
            # request sharing no word with the catalogue is not left with no tools.
            fallback = plan.verdict.outcome is not Outcome.APPLIED
            picked = top_k(scores, k, floor=-np.inf if fallback else 0.0)
            picked_scores, baseline = scores[picked], 0.0
        else:
            picked, picked_scores, baseline = self._scored(
                tokenize(query), plan.vector, k, plan.strategy, plan.weights, plan.cosines
            )
        return Ranking(
            tool_ids=tuple(self.ids[i] for i in picked),
            scores=tuple(float(score) for score in picked_scores),
            strategy=plan.strategy,
            outcome=plan.verdict.outcome,
            reason=plan.verdict.reason,
            baseline=baseline,
            tier=plan.tier,
        )

    def _scored(
        self,
        tokens: list[str],
        query_vector: Vector,
        k: int,
        strategy: Strategy,
        weights: FusionWeights,
        cosines: Scores | None = None,
    ) -> tuple[Indices, Scores, float]:
        """The ``k`` best rows by cosine (``semantic``) or fused score, their scores and the
        catalogue's mean score (the policy's baseline). ``cosines``: the query vector's
        cosine with every row, computed already (a burst scored as one product)."""
        assert self.vectors is not None
        combined = strategy is Strategy.COMBINED
        # Learned evidence lifts cosines the int8 candidates do not see: fp32 then.
        if self.int8 is not None and self.learned is None and cosines is None:
            # The same rows and scores as below: int8 picks candidates, fp32 re-scores them.
            bonus = None
            if combined:
                bonus = keyword_terms(
                    self.keyword.coverage(tokens), self.keyword.name_coverage(tokens), weights
                )
            picked, picked_scores = self.int8.ranked(query_vector, k, bonus)
            return picked, picked_scores, self.int8.baseline(query_vector, bonus)
        cosine = self.vectors.scores(query_vector) if cosines is None else cosines
        if self.learned is not None:
            cosine = self.learned.semantic(cosine, query_vector)
        if combined:
            coverage, names = self.keyword.coverage(tokens), self.keyword.name_coverage(tokens)
            scores = fuse(cosine, coverage, names, weights)
        else:
            scores = cosine
        picked = top_k(scores, k)
        finite = scores[np.isfinite(scores)]
        return picked, scores[picked], float(finite.mean()) if finite.size else 0.0

    # -- selection ----------------------------------------------------------------------------

    def select(
        self,
        query: str,
        query_vector: Vector | RequestVector | None,
        *,
        strategy: Strategy | str | None = None,
        reason: str = "",
        max_tools: int = 5,
        threshold: float | None = None,
        adaptive: bool = True,
        always_active: Sequence[str] = (),
        related: Mapping[str, Sequence[str]] | None = None,
        max_related: int = 5,
        tool_sets: Sequence[ToolSet] = (),
        forced_sets: Sequence[str] = (),
        policy: Policy | None = None,
        explain: bool | Sequence[str] = False,
        allow: Sequence[str] | None = None,
        deny: Sequence[str] | None = None,
        tenant: ToolAccess | None = None,
    ) -> Selection:
        """The tools to show the model for ``query``, ranked with ``query_vector``.

        Args:
            query: the user's request (or the text extracted from a conversation).
            query_vector: as ``rank``.
            strategy: as ``rank``.
            reason: as ``rank``.
            policy: a prepared ``Policy``; when given, the policy keyword arguments are ignored.
            explain: ``True`` to explain every shown tool (``Selection.explanations``); a list
                of tool ids to explain those too when they are hidden.
            allow: the only tools that may be shown (narrows before recall).
            deny: tools never shown, whatever else would add them.
            tenant: the tenant's ``ToolAccess``; ``allow``/``deny`` narrow it further.
            Other arguments build the ``Policy`` (see its attributes).

        Returns:
            A ``Selection``; ``outcome`` is ``degraded`` when recall fell back to keywords,
            ``skipped`` for an empty query (then only ``always_active`` tools are returned).

        Raises:
            ConfigError: ``query`` is not a string, or an option is out of range, of the
                wrong type (``max_tools=2.5``, ``threshold=nan``) or names a tool not in the
                catalogue.

        **Fail-open:** a missing vector is never an exception here: recall falls back to
        keywords, the ``threshold`` is not applied (it is on the strategy's scale) and the
        selection is ``degraded`` with the reason.
        """
        started = time.perf_counter()
        query = query_text(query)
        chosen = chosen_strategy(strategy, has_embedder=self.vectors is not None, strict=False)
        ask = explain_ask(explain)
        access = request_access(allow, deny, tenant)
        if policy is None:
            policy = policy_from_options(
                max_tools=max_tools,
                threshold=threshold,
                adaptive=adaptive,
                always_active=always_active,
                related=related,
                max_related=max_related,
                tool_sets=tool_sets,
                forced_sets=forced_sets,
            )
        if ask is not None:
            check_known(ask, self.catalog, "explain")
        plan = self.plan(query, chosen, policy)
        request = request_vector(query_vector, reason)
        return self.selected(query, request, chosen, plan, access, ask, started)

    def selected(
        self,
        query: str,
        request: RequestVector | None,
        strategy: Strategy,
        plan: SelectPlan,
        access: ToolAccess,
        ask: tuple[str, ...] | None,
        started: float,
    ) -> Selection:
        """``select`` once its arguments are checked, the plan made and the request's vector
        at hand (``ToolIndex.select`` embeds in between)."""
        wanted = recall_depth(plan.wanted, access, len(self.catalog))
        ranking = self.ranked(query, request, wanted, strategy)
        explain = None if ask is None else ExplainRequest(ask=ask, index=self, query=query)
        return select(ranking, plan.policy, started, explain=explain, access=access)

    def plan(self, query: str, strategy: Strategy, policy: Policy) -> SelectPlan:
        """The selection plan for ``query`` over this catalogue (``plan_select``).

        Raises:
            ConfigError: ``policy`` names a tool or tool set the catalogue does not have.
        """
        return plan_select(query, strategy, policy, self.catalog, catalogue_size=len(self.catalog))


def request_vector(query_vector: Vector | RequestVector | None, reason: str = "") -> RequestVector:
    """What a caller handed in as a ``RequestVector``: an array is the full model's vector,
    ``None`` none (``reason`` says why)."""
    if isinstance(query_vector, RequestVector):
        return query_vector
    if query_vector is None:
        return RequestVector.missing(reason)
    return RequestVector.full(query_vector)


def embed_into(
    embedder: Embedder,
    texts: Sequence[str],
    vectors: npt.NDArray[np.float32],
    rows: npt.NDArray[np.intp],
    progress: Progress | None = None,
    step: int | None = None,
) -> Iterator[int]:
    """Embed ``texts[rows]`` into ``vectors[rows]`` a step at a time.

    Yields the number of rows done after each step, so a caller can keep what was embedded
    when a later step raises (whatever the embedder raises, or ``ValueError`` for vectors of
    the wrong shape). ``progress(done, total)`` is called before the first step and after
    each one.
    """
    total = len(rows)
    if progress is not None:
        progress(0, total)
    # A few model batches between progress reports, unless the caller says otherwise.
    step = step or max(1, int(embedder.max_batch)) * 4
    for start in range(0, total, step):
        chunk = rows[start : start + step]
        vectors[chunk] = checked_vectors(embedder.embed([texts[i] for i in chunk]), len(chunk))
        done = min(start + step, total)
        if progress is not None:
            progress(done, total)
        yield done


def checked_vectors(vectors: object, count: int) -> npt.NDArray[np.float32]:
    """``vectors`` as a float32 matrix of ``count`` rows, or ``ValueError``."""
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2 or array.shape[0] != count:
        raise ValueError(f"embedder returned shape {array.shape}, expected ({count}, dim)")
    return array


def checked_query_vectors(vectors: object, count: int, dim: int) -> npt.NDArray[np.float32]:
    """Request vectors as a float32 matrix: ``count`` rows of width ``dim``, finite and
    non-zero, or ``ValueError`` saying which check failed."""
    array = checked_vectors(vectors, count)
    if array.shape[1] != dim:
        raise ValueError(
            f"embedder returned vectors of width {array.shape[1]}, the tool vectors have width {dim}"
        )
    if not np.isfinite(array).all():
        raise ValueError("embedder returned NaN or infinite values")
    if not np.abs(array).sum(axis=1).all():
        raise ValueError("embedder returned a zero vector (no evidence) for the query")
    return array


def brief(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:200]}"

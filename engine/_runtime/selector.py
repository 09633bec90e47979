"""Selection for one request: recall from the current snapshot, an optional re-rank by the
generator, then the selection policy; publishes ``selection.finished``."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

import attrs

from .._core.config import EngineConfig
from .._core.errors import ConfigError
from .._core.events import Event, FailOpen, SelectionFinished, query_hash
from .._core.outcome import Outcome
from .._core.recall.index import Strategy
from .._core.select.access import OPEN, ToolAccess, recall_depth
from .._core.select.explain import (
    ExplainRequest,
    check_known,
    explain_ask,
    hidden_before_ranking,
)
from .._core.select.policy import Policy, select
from .._core.select.selection import Ranking, Selection
from .._core.select.steps import anchored
from .._core.select.toolsets import ToolSet
from .._judge.rerank import RERANK_TOOL_LIMIT, rerank, rerank_pool_size, reranked_ranking
from .catalog_keeper import CatalogKeeper
from .recall import Recall
from .tool_index import ToolIndex

if TYPE_CHECKING:
    from ..providers import Generator


class FromConfig(enum.Enum):
    """A selection option left to the engine's config (``selection``): ``threshold=None``
    means "no threshold", so "not given" needs its own value."""

    FROM_CONFIG = "from config"

    def __repr__(self) -> str:
        return "FROM_CONFIG"


#: The default of ``Engine.select(threshold=...)``: the config's ``selection.threshold``.
FROM_CONFIG: Final = FromConfig.FROM_CONFIG


@attrs.frozen(kw_only=True)
class SelectOptions:
    """``Engine.select``'s policy arguments as given; ``None`` (``FROM_CONFIG`` for the
    threshold) leaves one to the config."""

    max_tools: int | None = None
    threshold: float | FromConfig | None = FROM_CONFIG
    adaptive: bool | None = None
    always_active: Sequence[str] | None = None
    related: Mapping[str, Sequence[str]] | None = None
    max_related: int = 5
    tool_sets: Sequence[ToolSet] | None = None
    forced_sets: Sequence[str] = ()

    def policy(self, config: EngineConfig, served_sets: Sequence[ToolSet]) -> Policy:
        """The ``Policy`` these options and ``config``'s selection defaults make.

        Raises:
            ConfigError: an option is out of range or of the wrong type.
        """
        defaults = config.selection
        try:
            return Policy(
                max_tools=defaults.max_tools if self.max_tools is None else self.max_tools,
                threshold=(defaults.threshold if self.threshold is FROM_CONFIG else self.threshold),
                adaptive=defaults.adaptive if self.adaptive is None else self.adaptive,
                always_active=(
                    defaults.always_active if self.always_active is None else self.always_active
                ),
                related=self.related or {},
                max_related=self.max_related,
                tool_sets=served_sets if self.tool_sets is None else self.tool_sets,
                forced_sets=self.forced_sets,
            )
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"invalid selection option: {exc}") from None


class Selector:
    """``Engine.select`` behind the facade."""

    def __init__(
        self,
        keeper: CatalogKeeper,
        recall: Recall,
        *,
        config: EngineConfig,
        generator: Generator | None,
        publish: Callable[[Event], None],
        key: bytes,
    ) -> None:
        self._keeper = keeper
        self._recall = recall
        self._config = config
        self._generator = generator
        self._publish = publish
        self._key = key

    async def select(
        self,
        query: str,
        strategy: Strategy | None,
        policy: Policy | None,
        options: SelectOptions,
        explain: bool | Sequence[str] = False,
        access: ToolAccess = OPEN,
    ) -> Selection:
        started = time.perf_counter()
        ask = explain_ask(explain)
        snapshot = self._keeper.snapshot
        policy = snapshot.served_policy(policy or options.policy(self._config, snapshot.tool_sets))
        index = snapshot.index
        policy.check_ids(index.catalog)
        request, hidden = None, None
        if ask is not None:
            check_known(ask, snapshot.source, "explain")
            request = ExplainRequest(ask=ask, index=index, query=query)
            hidden = hidden_before_ranking(ask, representative=snapshot.representative)
        wanted = max(policy.max_tools, 1) * (3 if policy.tool_sets else 1)
        reranking = self._generator is not None and self._config.rerank.enabled and query.strip()
        if reranking:
            wanted = max(wanted, rerank_pool_size(policy.max_tools, len(index.catalog)))
        wanted = recall_depth(wanted, access, len(index.catalog))
        ranking = await self._recall.rank(
            index, query, wanted, strategy, warming=not self._keeper.is_ready
        )
        if access.restricts:  # the re-ranker never sees what may not be shown
            ranking = ranking.only(access.only(ranking.tool_ids))
        if reranking:
            ranking, policy = await self._reranked(index, query, ranking, policy, access)
        selection = select(ranking, policy, started, explain=request, hidden=hidden, access=access)
        include = self._config.events.include_queries
        self._publish(
            SelectionFinished(
                query_hash=query_hash(query, self._key),
                query=query if include else None,
                tool_ids=selection.tool_ids,
                scores=selection.scores,
                strategy=selection.strategy,
                outcome=selection.outcome,
                degraded=selection.outcome is Outcome.DEGRADED,
                latency_ms=selection.latency_ms,
                reason=selection.reason,
            )
        )
        return selection

    async def _reranked(
        self, index: ToolIndex, query: str, ranking: Ranking, policy: Policy, access: ToolAccess
    ) -> tuple[Ranking, Policy]:
        """``ranking`` re-ordered by the generator, and the policy for re-ranked scores."""
        assert self._generator is not None
        ids = ranking.tool_ids
        if policy.threshold is not None and ranking.outcome is Outcome.APPLIED:
            # toolpick applies the threshold first; afterwards scores are on another scale.
            ids = tuple(
                i for i, s in zip(ids, ranking.scores, strict=True) if s >= policy.threshold
            )
        candidates = [index.catalog[i] for i in ids]
        if len(index.catalog) <= RERANK_TOOL_LIMIT:
            # A small catalogue is shown whole: the model may find what recall missed.
            shown = set(ids)
            candidates += [t for t in index.catalog if t.id not in shown and access.permits(t.id)]
        result = await rerank(
            query,
            candidates,
            self._generator,
            limit=policy.max_tools,
            deadline_s=self._config.rerank.deadline_s,
        )
        if result.outcome is Outcome.DEGRADED:
            self._publish(
                FailOpen(operation="select", what_failed="reranker", reason=result.reason)
            )
        activated = anchored(ranking, policy.tool_sets)  # floors read recall's cosine scores
        policy = attrs.evolve(
            policy, threshold=None, adaptive=False, forced_sets=(*policy.forced_sets, *activated)
        )
        return reranked_ranking(ranking, result), policy

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
from .._core.recall.index import RecallIndex
from .._core.select.access import OPEN, ToolAccess, recall_depth
from .._core.select.explain import (
    ExplainRequest,
    check_known,
    explain_ask,
    hidden_before_ranking,
)
from .._core.select.no_tool import no_tool_selection
from .._core.select.plan import (
    chosen_strategy,
    plan_select,
    policy_after_rerank,
    policy_from_options,
    rerank_candidates,
)
from .._core.select.policy import Policy, select
from .._core.select.selection import Ranking, Selection, Strategy
from .._core.select.toolsets import ToolSet
from .._judge.rerank import rerank, reranked_ranking
from .catalog_keeper import CatalogKeeper
from .decision_service import DecisionService
from .no_tool import ask_no_tool
from .recall import Recall
from .request_context import current

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
        return policy_from_options(
            max_tools=defaults.max_tools if self.max_tools is None else self.max_tools,
            threshold=(defaults.threshold if self.threshold is FROM_CONFIG else self.threshold),
            adaptive=defaults.adaptive if self.adaptive is None else self.adaptive,
            always_active=(
                defaults.always_active if self.always_active is None else self.always_active
            ),
            related={} if self.related is None else self.related,
            max_related=self.max_related,
            tool_sets=served_sets if self.tool_sets is None else self.tool_sets,
            forced_sets=self.forced_sets,
        )


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
        decisions: DecisionService | None = None,
    ) -> None:
        self._decisions = decisions  # asked "any tool needed?" when ``selection.no_tool``
        self._keeper = keeper
        self._recall = recall
        self._config = config
        self._generator = generator
        self._publish = publish
        self._key = key

    async def select(
        self,
        query: str,
        strategy: Strategy | str | None,
        policy: Policy | None,
        options: SelectOptions,
        explain: bool | Sequence[str] = False,
        access: ToolAccess = OPEN,
    ) -> Selection:
        started = time.perf_counter()
        ask = explain_ask(explain)
        snapshot = self._keeper.snapshot
        if policy is None:
            policy = options.policy(self._config, snapshot.tool_sets)
        elif not isinstance(policy, Policy):
            raise ConfigError(f"policy must be a Policy or None, got {type(policy).__name__}")
        policy = snapshot.served_policy(policy)
        index = snapshot.index
        request, hidden = None, None
        if ask is not None:
            check_known(ask, snapshot.source, "explain")
            request = ExplainRequest(ask=ask, index=index, query=query)
            hidden = hidden_before_ranking(ask, representative=snapshot.representative)
        plan = plan_select(
            query,
            chosen_strategy(strategy, has_embedder=self._recall.has_embedder, strict=False),
            policy,
            index.catalog,
            catalogue_size=len(index.catalog),
            can_rerank=self._generator is not None and self._config.rerank.enabled,
        )
        wanted = recall_depth(plan.wanted, access, len(index.catalog))
        ranking = await self._recall.rank(
            index, query, wanted, plan.strategy, warming=not self._keeper.is_ready
        )
        if access.restricts:  # the re-ranker never sees what may not be shown
            ranking = ranking.only(access.only(ranking.tool_ids))
        policy = plan.policy
        if plan.rerank:
            self._recall.finished()  # the generator's wait is not event-loop time
            ranking, policy = await self._reranked(index, query, ranking, policy, access)
        selection = select(ranking, policy, started, explain=request, hidden=hidden, access=access)
        self._recall.finished()
        if selection.outcome is not Outcome.SKIPPED:
            verdict = await ask_no_tool(
                self._decisions,
                self._config,
                query,
                index.catalog,
                ranking.tool_ids,
                access,
                operation="select",
                publish=self._publish,
            )
            if verdict.no_tool:
                selection = no_tool_selection(selection, verdict.reason)
        include = self._config.events.include_queries
        tag = current()
        self._publish(
            SelectionFinished(
                request_id=tag.request_id if tag is not None else None,  # no copy to stamp it
                query_hash=query_hash(query, self._key),
                query=query if include else None,
                tool_ids=selection.tool_ids,
                scores=selection.scores,
                strategy=selection.strategy,
                outcome=selection.outcome,
                degraded=selection.outcome is Outcome.DEGRADED,
                latency_ms=selection.latency_ms,
                reason=selection.reason,
                no_tool_needed=selection.no_tool_needed,
            )
        )
        return selection

    async def _reranked(
        self, index: RecallIndex, query: str, ranking: Ranking, policy: Policy, access: ToolAccess
    ) -> tuple[Ranking, Policy]:
        """``ranking`` re-ordered by the generator, and the policy for re-ranked scores."""
        assert self._generator is not None
        ids = [
            i for i in rerank_candidates(ranking, policy, index.catalog.ids) if access.permits(i)
        ]
        result = await rerank(
            query,
            [index.catalog[i] for i in ids],
            self._generator,
            limit=policy.max_tools,
            deadline_s=self._config.rerank.deadline_s,
        )
        if result.outcome is Outcome.DEGRADED:
            self._publish(
                FailOpen(operation="select", what_failed="reranker", reason=result.reason)
            )
        return reranked_ranking(ranking, result), policy_after_rerank(policy, ranking)

"""What the engine serves at one moment, as one frozen object.

The catalogue keeper swaps the whole snapshot with one attribute assignment, so a request
reads either the old one or the new one, never a mix of a new index and an old dedup map.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from .._core.catalog.catalog import Catalog
from .._core.catalog.dedup import DedupResult
from .._core.errors import ConfigError
from .._core.recall.index import RecallIndex
from .._core.select.policy import Policy
from .._core.select.steps import served_ids
from .._core.select.toolsets import ToolSet


@attrs.frozen(kw_only=True)
class Snapshot:
    """One consistent view of what the engine serves.

    Attributes:
        source: the catalogue as given (after updates), tools dedup removed included.
        dedup: what the dedup pass kept and removed.
        index: the served tools' index (keyword-only until warm-up brings vectors).
        representative: removed tool id → the tool that stands for it.
        tool_sets: the engine's tool sets as served (removed members replaced by their
            representative; members an update removed dropped).
    """

    source: Catalog
    dedup: DedupResult
    index: RecallIndex
    representative: Mapping[str, str]
    tool_sets: tuple[ToolSet, ...]

    @classmethod
    def build(
        cls, source: Catalog, dedup: DedupResult, index: RecallIndex, given: Sequence[ToolSet]
    ) -> Snapshot:
        """The snapshot of ``index`` over ``source`` after ``dedup``, serving ``given`` sets."""
        representative = {removed.name: removed.duplicate_of for removed in dedup.removed}
        sets = tuple(_served_set(s, representative, index.catalog) for s in given)
        return cls(
            source=source,
            dedup=dedup,
            index=index,
            representative=representative,
            tool_sets=sets,
        )

    def with_index(self, index: RecallIndex, given: Sequence[ToolSet]) -> Snapshot:
        """The same catalogue and dedup, served from ``index``."""
        return Snapshot.build(self.source, self.dedup, index, given)

    def served_ids(self, ids: Sequence[str]) -> tuple[str, ...]:
        """``ids`` with every tool dedup removed replaced by its representative."""
        return served_ids(ids, self.representative)

    def served_policy(self, policy: Policy) -> Policy:
        """``policy`` naming representatives instead of removed tools (which cannot be shown)."""
        if not self.representative:
            return policy
        related: dict[str, tuple[str, ...]] = {}
        for key, targets in policy.related.items():
            head = self.representative.get(key, key)
            related[head] = self.served_ids((*related.get(head, ()), *targets))
        return attrs.evolve(
            policy,
            always_active=self.served_ids(policy.always_active),
            related=related,
            tool_sets=[_served_set(s, self.representative) for s in policy.tool_sets],
        )

    def providers_of(self, tool_id: str) -> tuple[str, ...]:
        """The tools ``tool_id`` stands for, its representative first.

        Raises:
            ConfigError: ``tool_id`` is not in the catalogue.
        """
        head = self.representative.get(tool_id, tool_id)
        if head not in self.index.catalog:
            raise ConfigError(f"no tool with id {tool_id!r} in the catalogue")
        return self.dedup.providers.get(head, (head,))


def _served_set(
    tool_set: ToolSet, representative: Mapping[str, str], catalog: Catalog | None = None
) -> ToolSet:
    def ids(values: tuple[str, ...]) -> tuple[str, ...]:
        served = served_ids(values, representative)
        return served if catalog is None else tuple(i for i in served if i in catalog)

    return attrs.evolve(tool_set, members=ids(tool_set.members), anchors=ids(tool_set.anchors))

"""The state a new subscriber first receives (``subscription.started``).

Read from the snapshot and the services' counters, with no round trip and no checkpoint, so
the hub can take it in the same tick as it registers the subscriber: every later event is a
change from this state.
"""

from __future__ import annotations

from .._core.events import SubscriptionStarted
from .catalog_keeper import CatalogKeeper
from .recall import Recall

__all__ = ["subscription_state"]


def subscription_state(keeper: CatalogKeeper, recall: Recall) -> SubscriptionStarted:
    """The engine's warm-up, catalogue and fast-tier state now."""
    index = keeper.snapshot.index
    if not keeper.needs_warm_up:
        warmup = "none"
    elif not keeper.is_ready:
        warmup = "pending"
    elif index.degraded_reason or (recall.has_embedder and index.vectors is None):
        warmup = "degraded"
    else:
        warmup = "finished"
    recall_now = recall.statistics()
    if recall.fast_tier is None:
        fast_tier = "off"
    elif recall_now.fast_tier_ready:
        fast_tier = "ready"
    elif recall_now.fast_tier_open:
        fast_tier = "open"
    else:
        fast_tier = "building"
    return SubscriptionStarted(
        warmup=warmup,
        warmup_reason=index.degraded_reason if warmup == "degraded" else "",
        catalog_version=keeper.version,
        tools=len(index.catalog),
        fast_tier=fast_tier,
    )

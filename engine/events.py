"""What the engine tells its subscribers: frozen, tagged, JSON-serialisable events.

::

    from toolroute.events import SelectionFinished, to_json

    async with engine.subscribe() as deliveries:
        async for delivery in deliveries:          # a Delivery: the event and the drop count
            print(to_json(delivery.event))
"""

from ._core.events import CatalogUpdated as CatalogUpdated
from ._core.events import DecisionFinished as DecisionFinished
from ._core.events import Event as Event
from ._core.events import EventsDropped as EventsDropped
from ._core.events import FailOpen as FailOpen
from ._core.events import RoutingFinished as RoutingFinished
from ._core.events import SelectionFinished as SelectionFinished
from ._core.events import ServiceRestarted as ServiceRestarted
from ._core.events import StepFinished as StepFinished
from ._core.events import SubscriptionStarted as SubscriptionStarted
from ._core.events import WarmupFinished as WarmupFinished
from ._core.events import WarmupProgress as WarmupProgress
from ._core.events import from_json as from_json
from ._core.events import to_json as to_json
from ._core.public import publish as _publish
from ._runtime.hub import Delivery as Delivery

__all__ = [
    "CatalogUpdated",
    "DecisionFinished",
    "Delivery",
    "Event",
    "EventsDropped",
    "FailOpen",
    "RoutingFinished",
    "SelectionFinished",
    "ServiceRestarted",
    "StepFinished",
    "SubscriptionStarted",
    "WarmupFinished",
    "WarmupProgress",
    "from_json",
    "to_json",
]

_publish(__name__, globals())

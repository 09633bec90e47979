"""Read past the snapshot every engine subscription starts with.

A subscription's first delivery is ``subscription.started`` (the engine's state). A test
that reads the events of the calls it makes skips it explicitly, and checks it is there:
skipping anything else would hide the event the test is about.
"""

from __future__ import annotations

import trio

from toolroute.events import Delivery, SubscriptionStarted


def skip_snapshot(deliveries: trio.MemoryReceiveChannel[Delivery]) -> SubscriptionStarted:
    """Take the snapshot a subscription holds from the moment it is entered."""
    first = deliveries.receive_nowait()
    if not isinstance(first.event, SubscriptionStarted):
        raise AssertionError(f"expected subscription.started first, got {first.event.type}")
    return first.event

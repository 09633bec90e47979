"""Events and catalogue changes on Redis Streams.

Every node appends its engine's events to ``<namespace>:events`` (``XADD … MAXLEN ~``, so the
stream stays bounded), each entry with two fields: ``node`` and ``event`` (the event's JSON,
``toolroute.events.to_json``). Consumers read it through consumer groups: each group sees
every event, each event goes to one consumer of a group, and an entry is acknowledged once
the consumer asks for the next one (at-least-once delivery).

Catalogue changes travel the same way on ``<namespace>:catalog``: the node that changes its
catalogue appends the change, and every other node applies it to its own engine.

**Fail-open:** while Redis is down a node keeps up to ``backlog`` events (and every catalogue
change) and sends them, in order, when Redis returns; events past the backlog are counted as
dropped, as are the events a slow publisher's subscription lost.
"""

from __future__ import annotations

import contextlib
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..._core.catalog.tool import Tool
from ..._core.errors import ToolrouteError
from ..._core.events import Event, from_json, to_json
from ..._core.public import NoPublicConstructor
from .link import UNAVAILABLE, RedisLink

if TYPE_CHECKING:
    import coredis

#: Events kept while Redis is down.
BACKLOG: Final = 10_000
#: Entries sent per call when a backlog drains.
BATCH: Final = 100
#: Milliseconds a catalogue follower's read waits for a change.
FOLLOW_BLOCK_MS: Final = 500


def _xadd(
    client: coredis.Redis[bytes], key: str, fields: Mapping[str, str], maxlen: int
) -> Awaitable[Any]:
    from coredis.tokens import PureToken

    return client.xadd(
        key,
        dict(fields),
        trim_strategy=PureToken.MAXLEN,
        threshold=maxlen,
        trim_operator=PureToken.APPROXIMATELY,
    )


async def _send_all(
    link: RedisLink, key: str, entries: Sequence[Mapping[str, str]], maxlen: int
) -> bool:
    """Append ``entries`` in one pipeline; false when Redis did not take them."""

    async def send(client: coredis.Redis[bytes]) -> None:
        async with client.pipeline(transaction=False) as pipe:
            for fields in entries:
                _xadd(pipe, key, fields, maxlen)  # type: ignore[arg-type]

    return await link.call("stream append", send) is not UNAVAILABLE


class EventPublisher:
    """Appends one engine's events to the fleet's event stream.

    Args:
        link: the node's Redis link.
        node: this node's name, written with every event.
        maxlen: the stream's approximate bound (``MAXLEN ~``).
        backlog: events kept while Redis is down.
    """

    def __init__(self, link: RedisLink, node: str, *, maxlen: int, backlog: int = BACKLOG) -> None:
        self._link = link
        self._node = node
        self._maxlen = maxlen
        self._key = link.key("events")
        self._backlog: deque[dict[str, str]] = deque()
        self._limit = backlog
        self.pending = lambda: len(self._backlog)
        self._stop = False
        self._sending = trio.Lock()
        self._waiting = trio.CancelScope()
        self.stopped = trio.Event()

    async def run(
        self,
        deliveries: trio.MemoryReceiveChannel[Any],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Publish every delivery (``toolroute.events.Delivery``: an event and how many were
        lost before it) until ``stop`` (then what the subscription holds is sent too) or the
        subscription ends."""
        self._stop = False
        self.stopped = trio.Event()
        task_status.started()
        try:
            while True:
                # Only the wait for the next event is cut short by ``stop``, never a send.
                with trio.CancelScope() as self._waiting:
                    if self._stop:
                        self._waiting.cancel()
                    try:
                        first = await deliveries.receive()
                    except (trio.EndOfChannel, trio.ClosedResourceError):
                        return
                    self._take(first)
                if self._stop:
                    self._drain(deliveries)
                    await self.flush()
                    return
                self._drain(deliveries, BATCH)  # what else came goes in the same pipeline
                await self.flush()
        finally:
            self.stopped.set()

    def stop(self) -> None:
        """Finish: send what the subscription holds and return."""
        self._stop = True
        self._waiting.cancel()

    def close(self) -> None:
        """Count what never reached Redis as dropped (the node is leaving)."""
        self._link.counters.events_dropped += len(self._backlog)
        self._backlog.clear()

    def _take(self, delivery: Any) -> None:
        self._link.counters.events_dropped += delivery.dropped
        self._keep({"node": self._node, "event": to_json(delivery.event)})

    def _drain(self, deliveries: trio.MemoryReceiveChannel[Any], most: int | None = None) -> None:
        while most is None or len(self._backlog) < most:
            try:
                self._take(deliveries.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return

    async def flush(self) -> None:
        """Send the backlog, oldest first, while Redis takes it (the publisher and the
        link's resync may both ask: one sends at a time, so nothing goes twice)."""
        async with self._sending:
            while self._backlog and self._link.up:
                batch = [self._backlog[i] for i in range(min(BATCH, len(self._backlog)))]
                if not await _send_all(self._link, self._key, batch, self._maxlen):
                    return
                for _ in batch:
                    self._backlog.popleft()
                self._link.counters.events_published += len(batch)

    def _keep(self, fields: dict[str, str]) -> None:
        self._backlog.append(fields)
        if len(self._backlog) > self._limit:
            self._backlog.popleft()
            self._link.counters.events_dropped += 1


@attrs.frozen(kw_only=True)
class StreamedEvent:
    """One event read from the fleet's stream.

    Attributes:
        entry_id: the stream entry's id (``<ms>-<seq>``).
        node: the node that published it.
        event: the event (``toolroute.events``).
    """

    entry_id: str
    node: str
    event: Event


class EventConsumer(metaclass=NoPublicConstructor):
    """Reads the fleet's events through a consumer group (see the module docstring).

    Iterating yields ``StreamedEvent``s; the previous one is acknowledged when the next is
    asked for. Entries that do not hold a readable event are acknowledged and counted in
    ``unreadable``.
    """

    _way_in = "toolroute.redis.open_event_consumer(url, group=..., consumer=...)"

    def __init__(
        self,
        client: coredis.Redis[bytes],
        *,
        namespace: str,
        group: str,
        consumer: str,
        block_ms: int = 1000,
    ) -> None:
        self._client = client
        self._key = f"{namespace}:events"
        self.group = group
        self.consumer = consumer
        self._block_ms = block_ms
        self.unreadable = 0

    async def create_group(self, start: str = "$") -> None:
        """Create the group at ``start`` ("$": new events only; "0": the whole stream) unless
        it exists (then it goes on where it was)."""
        import coredis.exceptions

        # A group that exists goes on where it was.
        with contextlib.suppress(coredis.exceptions.StreamDuplicateConsumerGroupError):
            await self._client.xgroup_create(self._key, self.group, start, mkstream=True)

    async def read(self, count: int = 100) -> list[StreamedEvent]:
        """The next events for this consumer (waiting up to ``block_ms`` for one). A group
        that is gone (Redis restarted empty, the stream deleted) is made again over what the
        stream holds: what came since."""
        import coredis.exceptions

        try:
            reply = await self._read(count)
        except coredis.exceptions.StreamConsumerGroupError:
            await self.create_group("0")
            reply = await self._read(count)
        events: list[StreamedEvent] = []
        unreadable: list[str] = []
        for entries in (reply or {}).values():
            for entry in entries:
                entry_id = _text(entry.identifier)
                fields = {_text(k): v for k, v in entry.field_values.items()}
                try:
                    event = from_json(fields["event"])
                except (KeyError, ValueError):
                    unreadable.append(entry_id)
                    continue
                node = _text(fields.get("node", b""))
                events.append(StreamedEvent(entry_id=entry_id, node=node, event=event))
        if unreadable:
            self.unreadable += len(unreadable)
            await self.ack(*unreadable)
        return events

    async def _read(self, count: int) -> Any:
        return await self._client.xreadgroup(
            self.group, self.consumer, {self._key: ">"}, count=count, block=self._block_ms
        )

    async def ack(self, *entry_ids: str) -> None:
        """Acknowledge entries (they leave the group's pending list)."""
        if entry_ids:
            await self._client.xack(self._key, self.group, entry_ids)

    async def __aiter__(self) -> AsyncIterator[StreamedEvent]:
        while True:
            for item in await self.read():
                yield item
                await self.ack(item.entry_id)


def _text(value: Any) -> str:
    """A stream entry's id or field as text. Bytes that are not UTF-8 (another program's
    entry: toolroute never writes them) come out replaced, so they are never read as a
    notice or an event, and never stop the reader."""
    if not isinstance(value, bytes):
        return str(value)
    try:
        return value.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return value.decode("utf-8", "replace")


def tool_to_json(tool: Tool) -> dict[str, Any]:
    return attrs.asdict(tool, recurse=False) | {
        "parameters": dict(tool.parameters),
        "annotations": dict(tool.annotations),
    }


def tool_from_json(data: Mapping[str, Any]) -> Tool:
    return Tool(**{f.name: data[f.name] for f in attrs.fields(Tool) if f.name in data})


#: What a node does with a catalogue change another node made: ``engine.update``.
ApplyChange = Callable[[Sequence[Tool], Sequence[str], Sequence[Tool]], Awaitable[None]]


async def follow(
    link: RedisLink,
    key: str,
    operation: str,
    handle: Callable[[Mapping[Any, Any]], Awaitable[None]],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``handle`` every entry of the stream ``key`` added from now on (its raw fields), in
    stream order; while Redis is down it waits, then goes on from the last entry it read."""
    # From the newest entry now (a concrete id: "$" read again later would skip what came
    # in between); an empty or unreachable stream is read from its start.
    last = "0-0"

    async def newest(client: coredis.Redis[bytes]) -> tuple[Any, ...]:
        return tuple(await client.xrevrange(key, count=1))

    async def after(client: coredis.Redis[bytes]) -> Any:
        return await client.xread({key: last}, count=100, block=FOLLOW_BLOCK_MS)

    reply = await link.call(operation, newest)
    if reply is not UNAVAILABLE and reply:
        last = _text(reply[0].identifier)
    task_status.started()
    while True:
        if not link.up:
            await trio.sleep(link.probe_interval_s)
            continue
        got = await link.call(operation, after, blocks_s=FOLLOW_BLOCK_MS / 1000)
        if got is UNAVAILABLE:
            # Late, failed, or refused for what the key holds (the link stays up then):
            # read again after a pause, not at once.
            await trio.sleep(link.probe_interval_s)
            continue
        if not got:
            continue
        for entries in got.values():
            for entry in entries:
                last = _text(entry.identifier)
                await handle(entry.field_values)


class CatalogFeed:
    """Catalogue changes shared between nodes (see the module docstring)."""

    def __init__(self, link: RedisLink, node: str, *, maxlen: int = 10_000) -> None:
        self._link = link
        self._node = node
        self._key = link.key("catalog")
        self._maxlen = maxlen
        self._unsent: list[dict[str, str]] = []
        self.applied = 0  # changes from other nodes applied here
        self.unreadable = 0
        link.on_resync(self._resync, lambda: len(self._unsent))

    async def publish(
        self, add: Sequence[Tool], remove: Sequence[str], replace: Sequence[Tool]
    ) -> None:
        """Tell the other nodes about a change this node made (sent on recovery when Redis
        is down)."""
        change = {
            "add": [tool_to_json(t) for t in add],
            "remove": list(remove),
            "replace": [tool_to_json(t) for t in replace],
        }
        self._unsent.append({"node": self._node, "change": json.dumps(change)})
        await self._resync()

    async def _resync(self) -> None:
        if self._unsent and await _send_all(self._link, self._key, self._unsent, self._maxlen):
            self._link.counters.writes_resynced += len(self._unsent)
            self._unsent = []

    async def run_follower(
        self, apply: ApplyChange, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Apply every other node's changes, in stream order, from now on."""

        async def handle(fields: Mapping[Any, Any]) -> None:
            await self._apply(fields, apply)

        await follow(self._link, self._key, "catalog follow", handle, task_status=task_status)

    async def _apply(self, raw: Mapping[Any, Any], apply: ApplyChange) -> None:
        fields = {_text(k): _text(v) for k, v in raw.items()}
        if fields.get("node") == self._node:
            return  # this node's own change, applied when it was made
        try:
            change = json.loads(fields["change"])
            add = [tool_from_json(t) for t in change["add"]]
            replace = [tool_from_json(t) for t in change["replace"]]
            remove = [str(r) for r in change["remove"]]
        except (KeyError, ValueError, TypeError):
            self.unreadable += 1
            return
        try:
            await apply(add, remove, replace)
        except ToolrouteError:  # a change this node's catalogue cannot take (an id it lacks)
            self.unreadable += 1
            return
        self.applied += 1

"""``toolroute events``: the fleet's events from its Redis Stream, one JSON line each."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

import attrs

from .._core.errors import ConfigError, leaves
from .._core.events import from_json, to_json
from .._stores.redis.streams import _text

if TYPE_CHECKING:
    import coredis


def add_events_command(commands: Any) -> None:
    """Add ``events`` to the ``toolroute`` command's subcommands."""
    events = commands.add_parser(
        "events",
        help="print the events every node published to Redis (the redis extra)",
        description=(
            "Print the events of every node that shares the Redis at --redis, one JSON line "
            "each with the node's name and the stream entry id. Without --follow, print the "
            "events the stream holds and stop."
        ),
    )
    events.add_argument("--redis", required=True, metavar="URL", help="redis://host:port/db")
    events.add_argument("--namespace", default="toolroute", help="the nodes' key prefix")
    events.add_argument("--follow", action="store_true", help="keep printing new events")
    events.add_argument(
        "--group",
        help="read as a consumer of this consumer group (each event to one consumer of the "
        "group, acknowledged once printed); without it every new event is printed",
    )
    events.add_argument("--consumer", default="cli", help="this reader's name in --group")
    events.add_argument(
        "--from-start",
        action="store_true",
        help="with --follow: begin with the events the stream already holds; with --group: "
        "a new group begins there (without either, every held event is printed anyway)",
    )
    events.set_defaults(run=run_events)


def run_events(args: argparse.Namespace) -> int:
    from .._stores.redis.urls import checked_url

    checked_url(args.redis, "--redis")
    if args.from_start and not (args.follow or args.group is not None):
        # It would change nothing: a read without --follow already begins at the start.
        raise ConfigError(
            "--from-start goes with --follow or --group; without them every event the "
            "stream holds is printed already"
        )
    try:
        import coredis.exceptions
    except ImportError as exc:
        raise ConfigError("toolroute events needs coredis: pip install 'toolroute[redis]'") from exc
    import trio

    from .._stores.redis.urls import refusal, refused, shown

    try:
        trio.run(_print_events, args)
    except Exception as exc:
        if (refusing := refusal(exc)) is not None:
            raise refused(args.redis, refusing) from None
        if (mistake := _found(exc, ConfigError)) is not None:
            raise mistake from None  # said inside the client's exception group
        if (wrong := _found(exc, coredis.exceptions.WrongTypeError)) is not None:
            raise ConfigError(
                f"{args.namespace}:events in {shown(args.redis)} is not a stream ({wrong}): "
                "another program's key, or another --namespace"
            ) from None
        failure = _connection_failure(exc)
        if failure is None:
            raise
        # Refused, unreachable, reset: one line naming the server, not a traceback.
        raise ConfigError(f"cannot read events from {shown(args.redis)}: {failure}") from None
    return 0


def _connection_failure(exc: BaseException) -> BaseException | None:
    """The connection error inside ``exc`` (the client raises it inside exception groups)."""
    import coredis.exceptions

    return _found(exc, (OSError, coredis.exceptions.ConnectionError))


def _found(
    exc: BaseException, kinds: type[BaseException] | tuple[type[BaseException], ...]
) -> BaseException | None:
    """``exc``, or the first exception in its groups, when it is one of ``kinds``."""
    return next((leaf for leaf in leaves(exc) if isinstance(leaf, kinds)), None)


#: Seconds between attempts to reach Redis again while ``--follow`` has lost it.
RECONNECT_S = 1.0


@attrs.define
class _Reading:
    """Where a read of the stream is: the last entry printed, whether Redis answered, and
    whether ``--follow`` lost it since."""

    url: str
    last: str
    answered: bool = False
    lost: bool = False

    def answer(self) -> None:
        from .._stores.redis.urls import shown

        self.answered = True
        if self.lost:
            self.lost = False
            sys.stderr.write(f"toolroute events: following {shown(self.url)} again\n")
            sys.stderr.flush()


async def _print_events(args: argparse.Namespace) -> None:
    """Print the events; with ``--follow``, a Redis lost after it answered (restarted, its
    connections dropped) is read again from the last event printed once it answers."""
    import trio

    from .._stores.redis.urls import shown

    reading = _Reading(args.redis, last="0-0" if args.from_start or not args.follow else "$")
    while True:
        try:
            await _read_events(args, reading)
            return
        except Exception as exc:
            failure = _connection_failure(exc)
            if failure is None or not args.follow or not reading.answered:
                raise
            if not reading.lost:
                sys.stderr.write(
                    f"toolroute events: lost {shown(args.redis)} ({failure}); "
                    "following again once it answers\n"
                )
                sys.stderr.flush()
                reading.lost = True
        await trio.sleep(RECONNECT_S)


async def _read_events(args: argparse.Namespace, reading: _Reading) -> None:
    from .._stores.redis.urls import check_speaks_tls, client_from

    key = f"{args.namespace}:events"
    if args.group is not None:
        from ..redis import open_event_consumer

        # A group that exists goes on where it was; one a restart lost is made again over
        # what the stream holds since.
        start = "0" if args.from_start or reading.answered else "$"
        async with open_event_consumer(
            args.redis,
            group=args.group,
            consumer=args.consumer,
            namespace=args.namespace,
            start=start,
        ) as consumer:
            while True:
                batch = await consumer.read()
                reading.answer()
                for item in batch:
                    _print(item.node, item.entry_id, to_json(item.event))
                await consumer.ack(*(item.entry_id for item in batch))
                if not args.follow and not batch:
                    return
    await check_speaks_tls(args.redis)
    client: coredis.Redis[bytes] = client_from(args.redis, "--redis")
    async with client:
        if reading.last == "$":
            # From the newest entry now, as a concrete id: "$" read again after an empty
            # wait would skip what came in between.
            newest = await client.xrevrange(key, count=1)
            reading.last = _text(newest[0].identifier) if newest else "0-0"
        while True:
            reply = await client.xread(
                {key: reading.last}, count=100, block=1000 if args.follow else None
            )
            reading.answer()
            entries = [entry for batch in (reply or {}).values() for entry in batch]
            for entry in entries:
                reading.last = _text(entry.identifier)
                fields = {_text(k): _text(v) for k, v in entry.field_values.items()}
                try:
                    event = to_json(from_json(fields.get("event", "")))
                except ValueError:
                    continue  # not an event toolroute wrote
                _print(fields.get("node", ""), reading.last, event)
            if not args.follow and not entries:
                return


def _print(node: str, entry_id: str, event_json: str) -> None:
    event = json.loads(event_json)
    sys.stdout.write(json.dumps({"node": node, "id": entry_id, **event}, ensure_ascii=False) + "\n")
    sys.stdout.flush()

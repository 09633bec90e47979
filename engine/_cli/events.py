"""``toolroute events``: the fleet's events from its Redis Stream, one JSON line each."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .._core.errors import ConfigError
from .._core.events import from_json, to_json


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
    if not args.redis.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(
            f"--redis must be a redis://, rediss:// or unix:// URL, got {args.redis!r}"
        )
    if args.from_start and not (args.follow or args.group is not None):
        # It would change nothing: a read without --follow already begins at the start.
        raise ConfigError(
            "--from-start goes with --follow or --group; without them every event the "
            "stream holds is printed already"
        )
    try:
        import coredis
        import coredis.exceptions
    except ImportError as exc:
        raise ConfigError("toolroute events needs coredis: pip install 'toolroute[redis]'") from exc
    import trio

    try:
        trio.run(_print_events, args)
    except Exception as exc:
        failure = _connection_failure(exc, (OSError, coredis.exceptions.ConnectionError))
        if failure is None:
            raise
        # Refused, unreachable, reset: one line naming the server, not a traceback.
        raise ConfigError(f"cannot read events from {args.redis}: {failure}") from None
    return 0


def _connection_failure(
    exc: BaseException, kinds: tuple[type[BaseException], ...]
) -> BaseException | None:
    """The connection error inside ``exc`` (the client raises it inside exception groups)."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _connection_failure(inner, kinds)) is not None:
                return found
        return None
    return exc if isinstance(exc, kinds) else None


async def _print_events(args: argparse.Namespace) -> None:
    import coredis

    key = f"{args.namespace}:events"
    if args.group is not None:
        from ..redis import open_event_consumer

        start = "0" if args.from_start else "$"
        async with open_event_consumer(
            args.redis,
            group=args.group,
            consumer=args.consumer,
            namespace=args.namespace,
            start=start,
        ) as consumer:
            while True:
                batch = await consumer.read()
                for item in batch:
                    _print(item.node, item.entry_id, to_json(item.event))
                await consumer.ack(*(item.entry_id for item in batch))
                if not args.follow and not batch:
                    return
    client: coredis.Redis[bytes] = coredis.Redis.from_url(args.redis)
    async with client:
        last = "0-0" if args.from_start or not args.follow else "$"
        while True:
            reply = await client.xread({key: last}, count=100, block=1000 if args.follow else None)
            entries = [entry for batch in (reply or {}).values() for entry in batch]
            for entry in entries:
                last = _text(entry.identifier)
                fields = {_text(k): _text(v) for k, v in entry.field_values.items()}
                try:
                    event = to_json(from_json(fields.get("event", "")))
                except ValueError:
                    continue  # not an event toolroute wrote
                _print(fields.get("node", ""), last, event)
            if not args.follow and not entries:
                return


def _print(node: str, entry_id: str, event_json: str) -> None:
    event = json.loads(event_json)
    sys.stdout.write(json.dumps({"node": node, "id": entry_id, **event}, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)

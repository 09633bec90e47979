"""``toolroute serve``: one engine over a catalogue file, as an HTTP service."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .._core.config import EngineConfig
from .._core.errors import ConfigError
from .inputs import positive_float, positive_int, read_catalog, read_json

DEFAULT_TOKEN_ENV = "TOOLROUTE_TOKEN"


def add_serve_command(commands: Any) -> None:
    serve = commands.add_parser(
        "serve", help="serve one engine over HTTP (select, prepare-step, route, events …)"
    )
    serve.add_argument("--catalog", required=True, help="tool definitions (any supported format)")
    serve.add_argument("--format", default=None, help="tool file format (auto-detected)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8765, help="port; 0 picks a free one (8765)")
    serve.add_argument(
        "--token-env",
        default=DEFAULT_TOKEN_ENV,
        metavar="NAME",
        help=f"environment variable holding the bearer token ({DEFAULT_TOKEN_ENV}); required "
        "to listen beyond loopback",
    )
    serve.add_argument(
        "--embedder", choices=("minilm", "hashing", "none"), default="minilm", help="(minilm)"
    )
    serve.add_argument("--config", default=None, help="EngineConfig as a JSON file")
    serve.add_argument("--cache-dir", default=None, help="embedding cache directory")
    serve.add_argument(
        "--max-body-bytes",
        type=positive_int,
        default=1 << 20,
        help="largest request body accepted; larger is 413 (1048576)",
    )
    serve.add_argument(
        "--max-connections",
        type=positive_int,
        default=1000,
        metavar="N",
        help="connections served at once; past it a request is answered 503 with Retry-After "
        "(the probes still answer) (1000)",
    )
    serve.add_argument(
        "--request-timeout",
        type=positive_float,
        default=30.0,
        metavar="SECONDS",
        help="time a request (head and body together) has to arrive whole; past it 408 (30)",
    )
    serve.add_argument(
        "--head-timeout",
        type=positive_float,
        default=5.0,
        metavar="SECONDS",
        help="time a request's line and headers have to arrive (a new connection's, from the "
        "accept); past it 408, or a close if nothing came (5)",
    )
    serve.add_argument(
        "--grace",
        type=positive_float,
        default=10.0,
        help="seconds requests in flight get to finish after SIGINT/SIGTERM (10)",
    )
    serve.set_defaults(run=run_serve)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 0..65535, got {value}")
    return value


def _config(args: argparse.Namespace) -> EngineConfig:
    data = read_json(args.config, "config") if args.config else {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {args.config!r}: expected a JSON object")
    if args.cache_dir:
        data = {**data, "cache_dir": args.cache_dir}
    return EngineConfig.from_mapping(data)


def _embedder(name: str) -> Any:
    if name == "none":
        return None
    if name == "hashing":
        from ..providers import HashingEmbedder

        return HashingEmbedder()
    from ..providers import default_embedder

    return default_embedder()


def run_serve(args: argparse.Namespace) -> int:
    import trio

    from .._serve.run import check_token_rule, serve_catalog

    # Surrounding whitespace (a secret file's last newline) no header can carry: strip it.
    token = os.environ.get(args.token_env, "").strip() or None
    # Before any model loads: a refused start should be quick and say why.
    check_token_rule(args.host, token, args.token_env)
    catalog = read_catalog(args.catalog, args.format)
    engine_options = {"config": _config(args), "embedder": _embedder(args.embedder)}

    def announce(line: str) -> None:
        print(line, flush=True)

    trio.run(
        lambda: serve_catalog(
            catalog,
            engine_options,
            host=args.host,
            port=args.port,
            token=token,
            max_body_bytes=args.max_body_bytes,
            max_connections=args.max_connections,
            request_timeout_s=args.request_timeout,
            head_timeout_s=args.head_timeout,
            grace_s=args.grace,
            announce=announce,
        )
    )
    print("toolroute serve: stopped", file=sys.stderr, flush=True)
    return 0

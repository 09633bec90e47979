"""The ``toolroute`` command: select, eval, route, demo, bench, mcp, serve and events."""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from typing import Any, NoReturn, TextIO

import attrs

from .. import __version__
from .._core.catalog.catalog import Catalog
from .._core.errors import ConfigError, ToolrouteError
from .._core.evaluate import evaluate
from .._core.recall.index import STRATEGIES, Progress
from .._core.select.selection import Selection
from .._runtime.tool_index import ToolIndex
from .events import add_events_command
from .explaining import explanation_line, printable
from .gates import add_gate_options, gates_from, shortfalls
from .inputs import (
    check_expected_ids,
    finite_float,
    positive_float,
    positive_int,
    read_catalog,
    read_queries,
)
from .mcp_gateway import add_mcp_command
from .serve import add_serve_command

EMBEDDERS = ("minilm", "hashing", "none")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if argv[:1] == ["bench"]:  # its options belong to the benchmark script
        args = argparse.Namespace(run=_run_bench, bench_args=argv[1:])
    else:
        args = _parse(parser, argv)
    _printable_streams()
    try:
        with _one_line_warnings():
            result: int = args.run(args)
        return result
    except ToolrouteError as exc:
        print(f"toolroute: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `toolroute ... | head` is not an error
        return 0


def _printable_streams() -> None:
    """A tool name the terminal's encoding lacks (``翻訳`` on an ASCII or cp1252 console) is
    printed escaped, not a ``UnicodeEncodeError`` halfway through the output."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


@contextmanager
def _one_line_warnings() -> Iterator[None]:
    """Print warnings (an unusable cache directory …) as one ``toolroute: warning:`` line,
    without the source line Python's default format adds."""

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        kind = "" if issubclass(category, UserWarning) else f"{category.__name__}: "
        print(f"toolroute: warning: {kind}{message}", file=sys.stderr if file is None else file)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are one line too, naming the help to read."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parse_args``, but an unknown option is named before a missing command: argparse
    would report ``toolroute --bogus`` as a missing COMMAND."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if not hasattr(args, "run"):
        parser.error("the following arguments are required: COMMAND")
    return args


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="toolroute", description="Choose the few tools an LLM agent should see.")
    parser.add_argument("--version", action="version", version=f"toolroute {__version__}")
    # Not required here: _parse names unknown options first, then a missing command.
    commands = parser.add_subparsers(required=False, metavar="COMMAND")

    select = commands.add_parser("select", help="pick tools for one or more requests")
    _index_options(select)
    select.add_argument("--max-tools", type=int, default=5, help="ceiling on ranked picks (5)")
    select.add_argument("--threshold", type=finite_float, default=None, help="minimum score")
    select.add_argument("--no-adaptive", action="store_true", help="do not cut at the elbow")
    select.add_argument("--json", action="store_true", help="print JSON lines")
    select.add_argument("--explain", action="store_true", help="say why each tool is shown")
    select.add_argument(
        "--explain-tool",
        action="append",
        default=[],
        metavar="TOOL_ID",
        help="say why this tool is shown or hidden (repeatable; implies --explain)",
    )
    select.add_argument("query", nargs="+", help="the request(s)")
    select.set_defaults(run=_run_select)

    ev = commands.add_parser("eval", help="score retrieval against labelled queries")
    _index_options(ev)
    ev.add_argument("--queries", required=True, help='[{"query": str, "expected": str | [str]}]')
    ev.add_argument("--k", default="1,3,5", type=_ks, help="cut-offs, comma separated (1,3,5)")
    ev.add_argument(
        "--split",
        choices=("all", "dev", "test"),
        default="all",
        help="the fixed sha1 split of the queries to score (all)",
    )
    ev.add_argument(
        "--sample", type=positive_int, default=None, help="score a seeded sample of N queries"
    )
    ev.add_argument("--seed", type=int, default=0, help="seed of --sample (0)")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    add_gate_options(ev)
    ev.set_defaults(run=_run_eval)

    bench = commands.add_parser(
        "bench",
        help="side-by-side benchmark against toolpick, semantic-router and bm25s",
        add_help=False,
    )
    bench.set_defaults(run=_run_bench)

    route = commands.add_parser(
        "route", help="which MCP servers a request needs (a decision provider from the env)"
    )
    route.add_argument(
        "--tools", default=None, help="tool definitions with servers (the demo catalogue)"
    )
    route.add_argument("--format", default=None, help="tool file format (auto-detected)")
    route.add_argument(
        "--provider", default=None, help="decision provider name (from the environment)"
    )
    route.add_argument(
        "--deadline", type=positive_float, default=15.0, help="seconds for the call (15)"
    )
    route.add_argument("--json", action="store_true", help="print JSON lines")
    route.add_argument("query", nargs="+", help="the request(s)")
    route.set_defaults(run=_run_route)

    demo = commands.add_parser("demo", help="route scripted requests over a bundled catalogue")
    demo.add_argument("--embedder", choices=EMBEDDERS, default="minilm", help="(minilm)")
    demo.add_argument("--cache-dir", default=None, help="embedding cache directory")
    demo.add_argument(
        "--json", action="store_true", help="stream the agent part's events as JSON lines"
    )
    demo.set_defaults(run=_run_demo)
    add_mcp_command(commands)
    add_serve_command(commands)
    add_events_command(commands)
    return parser


def _index_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tools", required=True, help="tool definitions (any supported format)")
    parser.add_argument("--format", default=None, help="tool file format (auto-detected)")
    parser.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default=None,
        help="recall strategy (combined; keyword with --embedder none)",
    )
    parser.add_argument("--embedder", choices=EMBEDDERS, default="minilm", help="(minilm)")
    parser.add_argument("--cache-dir", default=None, help="embedding cache directory")
    parser.add_argument("--no-cache", action="store_true", help="do not cache embeddings")


def _ks(text: str) -> list[int]:
    try:
        ks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not ks or ks[0] < 1:
        raise argparse.ArgumentTypeError(f"cut-offs must be positive integers, got {text!r}")
    return ks


def _build(
    args: argparse.Namespace, catalog: Catalog, progress: Progress | None = None
) -> ToolIndex:
    embedder: Any
    if args.embedder == "none":
        embedder = None
    elif args.embedder == "hashing":
        from ..providers import HashingEmbedder

        embedder = HashingEmbedder()
    else:
        from ..providers import default_embedder

        embedder = default_embedder()
    kwargs: dict[str, Any] = {"embedder": embedder, "progress": progress}
    if getattr(args, "no_cache", False):
        kwargs["cache"] = None
    elif args.cache_dir:
        kwargs["cache"] = args.cache_dir
    # otherwise ToolIndex uses the user cache directory
    return ToolIndex(catalog, strategy=getattr(args, "strategy", None), **kwargs)


def _run_select(args: argparse.Namespace) -> int:
    index = _build(args, read_catalog(args.tools, args.format))
    explain: bool | list[str] = args.explain_tool or args.explain
    for query in args.query:
        selection = index.select(
            query,
            max_tools=args.max_tools,
            threshold=args.threshold,
            adaptive=not args.no_adaptive,
            explain=explain,
        )
        # What recall read, when misspellings were corrected (``ToolIndex`` corrects them).
        read = index.recall.spelled(query)
        if args.json:
            said = {"query": query, **({"read_as": read} if read != query else {})}
            print(json.dumps({**said, **_selection_json(selection)}, ensure_ascii=False))
        else:
            _print_selection(query, selection, index.catalog, read)
    return 0


def _selection_json(selection: Selection) -> dict[str, Any]:
    data = attrs.asdict(selection, filter=lambda field, _: field.name != "explanations")
    if selection.explanations:
        data["explanations"] = [e.to_json() for e in selection.explanations]
    data["outcome"] = str(selection.outcome)
    data["latency_ms"] = round(selection.latency_ms, 3)
    return data


def _print_selection(query: str, selection: Selection, catalog: Catalog, read: str) -> None:
    """One selection as text; ``read`` is the request as recall read it."""
    status = (
        "" if selection.outcome == "applied" else f"  [{selection.outcome}: {selection.reason}]"
    )
    print(f"{query}\n  {selection.strategy}, {selection.latency_ms:.1f} ms{status}")
    if read != query:
        print(f"  read as: {read}")
    for rank, (tool_id, score, source) in enumerate(
        zip(selection.tool_ids, selection.scores, selection.sources, strict=True), 1
    ):
        shown = "    -" if score is None else f"{score:5.3f}"
        note = "" if source == "ranked" else f"  ({source})"
        server = catalog[tool_id].server
        where = f"  [{printable(server)}]" if server else ""
        print(f"  {rank:2d}. {shown}  {printable(tool_id)}{where}{note}")
    if not selection.tool_ids:
        print("  (no tool)")
    for explanation in selection.explanations:
        print(f"  {printable(explanation_line(explanation))}")


def _run_eval(args: argparse.Namespace) -> int:
    gates = gates_from(args)
    catalog = read_catalog(args.tools, args.format)
    queries = read_queries(args.queries)
    check_expected_ids(queries, catalog, args.queries)
    if args.split != "all":
        queries = [q for q in queries if q.split == args.split]
    if args.sample is not None and args.sample < len(queries):
        queries = random.Random(args.seed).sample(queries, args.sample)
    _check_scorable(queries, args)
    index = _build(args, catalog, None if args.json else _progress_printer())
    k = max([*args.k, 5])
    rankings, latencies = [], []
    for query in queries:
        started = time.perf_counter()
        ranking = index.search(query.text, k)
        latencies.append((time.perf_counter() - started) * 1000.0)
        rankings.append(ranking.tool_ids)
    report = evaluate(queries, rankings, latencies, ks=args.k)
    report["build_s"] = index.build_s
    report["strategy"] = index.strategy
    report["degraded"] = index.degraded_reason
    if gates and 5 not in args.k:  # the @5 gates read cut-off 5 whatever --k prints
        at5 = evaluate(queries, rankings, latencies, ks=[5])
        gated = {**report, "hit@5": at5["hit@5"], "recall@5": at5["recall@5"]}
    else:
        gated = report
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        _print_eval(report, args, catalog, index)
    missed = shortfalls(gates, gated)
    if missed:
        print(f"toolroute: gate failed: {'; '.join(missed)}", file=sys.stderr)
        return 1
    return 0


def _print_eval(
    report: dict[str, Any], args: argparse.Namespace, catalog: Catalog, index: ToolIndex
) -> None:
    print(
        f"{report['n']} queries ({report['n_no_tool']} without an expected tool skipped), "
        f"{len(catalog)} tools, strategy {index.strategy}, build {index.build_s:.2f} s"
    )
    ci: dict[str, list[float]] = report["ci"]
    for key in ["top1"] + [f"{m}@{k}" for k in args.k for m in ("hit", "recall", "completeness")]:
        interval = ci.get("hit@1" if key == "top1" else key)
        band = f"  [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""
        print(f"  {key:16s} {report[key]:.3f}{band}")
    latency: dict[str, float] = report["latency_ms"]
    print(f"  {'mrr':16s} {report['mrr']:.3f}")
    print(f"  latency ms       p50 {latency['p50']:.2f}  p95 {latency['p95']:.2f}")


def _check_scorable(queries: Sequence[object], args: argparse.Namespace) -> None:
    """Metrics over zero labelled queries would print as zeros that mean nothing."""
    where = f"{args.queries!r}" + ("" if args.split == "all" else f" ({args.split} split)")
    if not queries:
        raise ConfigError(f"no queries to score in {where}")
    if not any(getattr(q, "groups", ()) for q in queries):
        raise ConfigError(
            f"none of the {len(queries)} queries in {where} names an expected tool: "
            "nothing to score"
        )


def _progress_printer(stream: TextIO | None = None) -> Progress:
    """Embedding progress on ``stream`` (stderr): one line redrawn in place on a terminal.

    A log or a pipe cannot redraw, and a carriage return there leaves one unterminated line, so
    off a terminal each tenth of the way is printed as a whole line of its own.
    """
    out = sys.stderr if stream is None else stream
    redraw = out.isatty()
    printed = -1  # the last tenth printed as a line

    def report(done: int, total: int) -> None:
        nonlocal printed
        if total == 0:
            return
        if redraw:
            end = "\n" if done >= total else ""
            print(f"\rembedding tools: {done}/{total}", end=end, file=out, flush=True)
            return
        tenth = min(done * 10 // total, 10)
        if tenth > printed:
            printed = tenth
            print(f"embedding tools: {done}/{total}", file=out, flush=True)

    return report


def _run_demo(args: argparse.Namespace) -> int:
    catalog = Catalog.demo()
    data = resources.files("toolroute") / "data"
    requests = json.loads((data / "demo_requests.json").read_text("utf-8"))
    print(
        f"Demo catalogue: {len(catalog)} tools on {len(catalog.servers)} servers "
        f"({', '.join(s.id for s in catalog.servers)})"
    )
    embedded = []
    printer = _progress_printer()

    def progress(done: int, total: int) -> None:
        embedded.append(total)
        printer(done, total)

    index = _build(args, catalog, progress)
    print(
        f"Index ready in {index.build_s:.2f} s ({_index_source(index, embedded)}); "
        f"strategy {index.strategy}\n"
    )
    found = total = 0
    for item in requests:
        selection = index.select(item["query"])
        _print_selection(item["query"], selection, catalog, index.recall.spelled(item["query"]))
        wanted = [_tool_id(catalog, server, name) for server, name in item.get("expected", [])]
        hits = [w for w in wanted if w in selection.tool_ids]
        found += len(hits)
        total += len(wanted)
        if wanted:
            print(f"  expected: {', '.join(wanted)} -> {len(hits)}/{len(wanted)} shown\n")
    print(f"{found}/{total} expected tools shown across {len(requests)} requests")
    print("\nAgent conversation through the trio engine (prepare_step), with its events:")
    from .demo import run_agent_demo

    run_agent_demo(catalog, index.embedder, args.cache_dir, args.json)
    return 0


def _index_source(index: ToolIndex, embedded: Sequence[int]) -> str:
    """Where the demo index's tool vectors came from (``embedded`` holds the totals its
    embedding progress reported: none when every vector was cached)."""
    if index.embedder is None:
        return "keyword only: no embedder, no tool vectors"
    if index.degraded_reason:
        return f"keyword only: {index.degraded_reason}"
    fresh = embedded[0] if embedded else 0
    return f"embedded {fresh} tools" if fresh else "all tool vectors from the cache"


def _run_route(args: argparse.Namespace) -> int:
    import trio

    from .._routing.pipeline import RoutingConfig, route_servers
    from ..providers import default_decider

    catalog = read_catalog(args.tools, args.format) if args.tools else Catalog.demo()
    if not catalog.servers:  # not an error: every tool stays, but the user should know why
        print(f"toolroute: warning: {_no_servers(args.tools)}", file=sys.stderr)
    decider = default_decider(args.provider)
    config = RoutingConfig(deadline_s=args.deadline, decision_deadline_s=args.deadline)
    if not args.json:
        print(
            f"{len(catalog.servers)} server{'' if len(catalog.servers) == 1 else 's'}; "
            "decision provider: "
            f"{decider.name if decider else 'none configured (every server is kept)'}"
        )

    async def run() -> None:
        for query in args.query:
            outcome = await route_servers(query, catalog, decider=decider, config=config)
            if args.json:
                print(json.dumps({"query": query, **_routing_json(outcome)}))
                continue
            print(
                f"\n{query}\n  {outcome.outcome} via {outcome.strategy}"
                f" in {outcome.latency_ms:.0f} ms {outcome.reason}".rstrip()
            )
            print(f"  kept:    {printable(', '.join(outcome.selected)) or '-'}")
            print(f"  dropped: {printable(', '.join(outcome.excluded)) or '-'}")
        if decider is not None:
            await decider.aclose()

    trio.run(run)
    return 0


def _no_servers(path: str) -> str:
    """Why ``route`` has nothing to route, and how a tool file names its servers (the readers
    take a tool's own ``server`` field, or the servers of an ``mcp-servers`` file)."""
    return (
        f"tool file {path!r} names no servers, so there is nothing to route: give each tool "
        'a "server" field (in OpenAI Chat Completions tools, inside "function"), or list '
        'them per server as {"servers": [{"name": ..., "tools": [...]}]}'
    )


def _routing_json(outcome: Any) -> dict[str, Any]:
    return {
        "selected": list(outcome.selected),
        "excluded": list(outcome.excluded),
        "strategy": outcome.strategy,
        "outcome": str(outcome.outcome),
        "reason": outcome.reason,
        "latency_ms": round(outcome.latency_ms, 3),
        "answered": outcome.answered,
    }


def _run_bench(args: argparse.Namespace) -> int:
    """Run the side-by-side benchmark (its peers are the ``bench`` extra)."""
    from .._bench.side_by_side import main as bench_main

    return bench_main(args.bench_args)


def _tool_id(catalog: Catalog, server: str, name: str) -> str:
    for tool in catalog:
        if tool.server == server and tool.name == name:
            return tool.id
    return f"{server}/{name}"

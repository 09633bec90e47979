"""Which dedup mode finds what, and how long it takes: real catalogues and synthetic ones at scale.

    python tests/bench/dedup_modes.py [--datasets ../shared/datasets] [--out tests/bench/results]
                                      [--no-scale] [--sizes 1000,10000,100000]

Part 1, real catalogues: for the bundled LiveMCPBench and BFCL catalogues and each
mode/threshold, how many tools are removed, how long it takes (embedding mode: embedding the
tools with the offline default embedder included), and a few examples (removed tool -> kept
tool, similarity).

Part 2, scale (on by default, ``--no-scale`` skips it): synthetic catalogues of 1k / 10k / 100k
tools built from the bundled real tool definitions, 10 % of them planted twins of another tool
of the catalogue (see ``planted_catalog``). For each mode at thresholds 0.9 (the default) and
0.7: tools removed, planted pairs found (both tools end up in one cluster), other removals,
seconds, and the process's peak RSS during the call. Embedding mode is timed on its similarity
pass only: the vectors are computed beforehand (that time is reported in its own column) and
handed to ``dedupe_tools`` by an embedder that returns them. They come from the default MiniLM
embedder up to ``--minilm-max`` tools (10k by default; 100k texts would take ~13-17 min here, so
that row says "not run" with the projected embedding time) and from
``HashingEmbedder(dim=384)`` at every size; 384 is MiniLM's width, so the similarity pass costs
the same as it would with MiniLM vectors, but the hashing cosine scale is not MiniLM's, so its
removed counts are not comparable with MiniLM's. A setting whose time, extrapolated from the
previous size (quadratic for embedding mode), exceeds ``--time-box`` seconds is skipped and
marked so in the table.

``--out DIR`` writes everything printed to ``DIR/dedup_modes.md``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from toolroute import Catalog, dedupe_tools
from toolroute._core.catalog.catalog import Tool
from toolroute._core.text import embedding_text, split_identifier
from toolroute.providers import HashingEmbedder, default_embedder

HERE = Path(__file__).resolve().parent
SETTINGS = [
    ("signature", 0.9),
    ("signature", 0.7),
    ("content", 0.9),
    ("content", 0.7),
    ("embedding", 0.95),
    ("embedding", 0.9),
]
SCALE_THRESHOLDS = (0.9, 0.7)
POOL = ("bfcl", "livemcpbench", "metatool", "toolpick-saas")
EDITS = ("renamed", "reordered", "word changed")
TWIN_SHARE = 0.1
HASHING_DIM = 384
#: Share of a base tool's description words and parameter names replaced by other real ones.
REPLACE = 0.5

Emit = Callable[[str], None]


# Real catalogues ----------------------------------------------------------------------------


def real_catalogues(root: Path, emit: Emit) -> None:
    embedder = default_embedder()
    for name in ("livemcpbench", "bfcl"):
        catalog = Catalog.from_file(root / name / "tools.json")
        emit(f"\n### {name} ({len(catalog)} tools)\n")
        emit("| mode | threshold | removed | seconds | examples (removed → kept, similarity) |")
        emit("|---|---:|---:|---:|---|")
        for mode, threshold in SETTINGS:
            started = time.perf_counter()
            result = dedupe_tools(catalog, mode=mode, threshold=threshold, embedder=embedder)  # type: ignore[arg-type]
            seconds = time.perf_counter() - started
            examples = "; ".join(
                f"`{r.name}` → `{r.duplicate_of}` ({r.similarity:.2f})" for r in result.removed[:3]
            )
            emit(f"| {mode} | {threshold} | {len(result.removed)} | {seconds:.2f} | {examples} |")


# Synthetic catalogues with planted twins ----------------------------------------------------


class Planted:
    """A synthetic catalogue and its planted (base id, twin id, edit) pairs."""

    def __init__(self, catalog: Catalog, pairs: list[tuple[str, str, str]], sources: int) -> None:
        self.catalog = catalog
        self.pairs = pairs
        #: How many real tools the bases were made from.
        self.sources = sources


def planted_catalog(root: Path, size: int, seed: int = 0) -> Planted:
    """``size`` tools: 90 % distinct base tools, 10 % planted twins of a base, shuffled.

    A base tool is a bundled real tool (of BFCL, LiveMCPBench, MetaTool and toolpick-saas, those
    whose description has at least 3 words) whose description words are each replaced, with
    probability 1/2, by a word drawn from all real descriptions (by frequency), and whose
    parameter names are likewise mixed with real parameter names. So bases keep real names,
    lengths, vocabulary and word frequencies, yet two bases from the same real tool share only
    about a quarter of their description. Bases can still collide by chance (short
    descriptions, shared schemas); dedup removing those shows up as "other removed".

    A twin copies its base, on another server, with one small edit, cycling through: renamed
    (the name's words rotated and camel-cased: ``get_current_weather`` →
    ``currentWeatherGet``), reordered (description words shuffled, same name) and word changed
    (one description word replaced by another real word, same name).
    """
    sources: list[Tool] = []
    for name in POOL:
        sources.extend(Catalog.from_file(root / name / "tools.json"))
    words = [w for tool in sources for w in tool.description.split()]
    prop_names = [p for tool in sources for p in _properties(tool)]
    sources = [tool for tool in sources if len(tool.description.split()) >= 3]
    rng = random.Random(seed)
    twins = round(size * TWIN_SHARE)
    bases = size - twins
    servers = max(2, size // 20)
    tools: list[Tool] = []
    for i in range(bases):
        source = rng.choice(sources)
        description = " ".join(
            rng.choice(words) if rng.random() < REPLACE else w for w in source.description.split()
        )
        server = f"server{i % servers}"
        tools.append(
            Tool(
                id=f"{server}__{source.name}#{i}",
                name=source.name,
                description=description,
                parameters=_mix_parameters(source.parameters, prop_names, rng),
                server=server,
            )
        )
    pairs: list[tuple[str, str, str]] = []
    for k, base in enumerate(rng.sample(tools, twins)):
        edit = EDITS[k % len(EDITS)]
        name, description = base.name, base.description
        if edit == "renamed":
            name = _rename(name)
        elif edit == "reordered":
            description = _reorder(description, rng)
        else:
            description = _change_word(description, words, rng)
        home = int((base.server or "server0").removeprefix("server"))
        server = f"server{(home + 1 + rng.randrange(servers - 1)) % servers}"
        twin = Tool(
            id=f"{server}__{name}#twin{k}",
            name=name,
            description=description,
            parameters=base.parameters,
            server=server,
        )
        tools.append(twin)
        pairs.append((base.id, twin.id, edit))
    rng.shuffle(tools)
    return Planted(Catalog(tools), pairs, len(sources))


def _properties(tool: Tool) -> list[str]:
    properties = tool.parameters.get("properties") if tool.parameters else None
    return list(properties) if isinstance(properties, dict) else []


def _mix_parameters(
    parameters: Any, prop_names: Sequence[str], rng: random.Random
) -> dict[str, Any]:
    if not parameters or not isinstance(parameters.get("properties"), dict):
        return dict(parameters or {})
    properties: dict[str, Any] = {}
    renamed: dict[str, str] = {}
    for prop, definition in parameters["properties"].items():
        new = rng.choice(prop_names) if rng.random() < REPLACE else prop
        renamed[prop] = new if new not in properties else prop
        properties[renamed[prop]] = definition
    mixed = {**parameters, "properties": properties}
    if isinstance(parameters.get("required"), list):
        mixed["required"] = [renamed.get(p, p) for p in parameters["required"]]
    return mixed


def _rename(name: str) -> str:
    parts = split_identifier(name) or [name]
    parts = [*parts[1:], parts[0]] if len(parts) > 1 else ["do", *parts]
    renamed = parts[0].lower() + "".join(p[:1].upper() + p[1:] for p in parts[1:])
    return renamed if renamed != name else f"{name}V2"


def _reorder(description: str, rng: random.Random) -> str:
    words = description.split()
    shuffled = words[:]
    for _ in range(10):
        rng.shuffle(shuffled)
        if shuffled != words:
            break
    return " ".join(shuffled)


def _change_word(description: str, words: Sequence[str], rng: random.Random) -> str:
    out = description.split()
    position = rng.randrange(len(out))
    replacement = out[position]
    while replacement.lower() in {w.lower() for w in out}:
        replacement = rng.choice(words)
    out[position] = replacement
    return " ".join(out)


class Precomputed:
    """An embedder that hands back vectors computed beforehand, so only the pass is timed."""

    max_batch = 1 << 30

    def __init__(self, vectors: npt.NDArray[np.float32], identity: str) -> None:
        self.vectors, self.dim, self.identity = vectors, vectors.shape[1], identity

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        assert len(texts) == len(self.vectors), "vectors were computed for another catalogue"
        return self.vectors


def _rss(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0), so each row reports its own peak."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def scale(root: Path, sizes: list[int], minilm_max: int, time_box: float, emit: Emit) -> None:
    emit(
        "\n## Scale: synthetic catalogues with planted twins\n\n"
        f"Catalogues built from the bundled real tool definitions; {TWIN_SHARE:.0%} of the tools "
        "are planted twins of another tool (one edit each, in equal shares: renamed, words "
        "reordered, one word changed; see `planted_catalog`). *planted found*: planted pairs "
        "merged into one cluster (recall), overall and per edit; *other removed*: removals "
        "that are not a planted twin collapsing into its own base (chance collisions between "
        "bases). *seconds*: one `dedupe_tools` call. For embedding mode that is the similarity "
        "pass only, with vectors precomputed by the embedder named in the mode column; the time "
        "to compute them is the *embed s* column (once per catalogue and embedder). "
        f"`hashing-{HASHING_DIM}` is `HashingEmbedder(dim={HASHING_DIM})`, as wide as MiniLM, so "
        "its pass costs what MiniLM's would; its cosine scale differs, so its counts are not "
        "MiniLM's. *peak RSS*: the process's peak resident memory during the call, and in "
        "brackets its rise over the RSS before the call (catalogue, vectors and model loaded "
        "before).\n\n"
        f"Timings are from a shared {os.cpu_count()}-core machine (load average "
        f"{os.getloadavg()[0]:.1f} at the start of this part), single runs, not medians: expect up to 2× between runs.\n"
    )
    emit(
        "| tools | mode | threshold | removed | planted found | renamed / reordered / word "
        "changed | other removed | seconds | embed s | peak RSS MB |"
    )
    emit("|---:|---|---:|---:|---:|---|---:|---:|---:|---:|")
    previous: dict[tuple[str, float], tuple[int, float]] = {}
    build_times: list[str] = []
    sources = 0
    minilm_rate = 0.0
    for size in sizes:
        started = time.perf_counter()
        planted = planted_catalog(root, size)
        build_s = time.perf_counter() - started
        catalog = planted.catalog
        pair_of = {frozenset((b, t)) for b, t, _ in planted.pairs}
        texts = [embedding_text(tool) for tool in catalog]
        embedders: list[tuple[str, Any, float]] = []
        if size <= minilm_max:
            minilm = default_embedder()
            minilm.embed(["warm up"])
            started = time.perf_counter()
            vectors = np.asarray(minilm.embed(texts), np.float32)
            embedders.append(("MiniLM", vectors, time.perf_counter() - started))
            minilm_rate = size / embedders[-1][2]
        else:
            embedders.append(("MiniLM", None, size / minilm_rate if minilm_rate else 0.0))
        started = time.perf_counter()
        vectors = np.asarray(HashingEmbedder(HASHING_DIM).embed(texts), np.float32)
        embedders.append((f"hashing-{HASHING_DIM}", vectors, time.perf_counter() - started))
        settings: list[tuple[str, str, Any, float]] = [
            (mode, mode, None, 0.0) for mode in ("signature", "content")
        ]
        settings += [
            (
                f"embedding ({label})",
                "embedding",
                v if v is None else Precomputed(v, label),
                embed_s,
            )
            for label, v, embed_s in embedders
        ]
        for label, mode, embedder, embed_s in settings:
            for threshold in SCALE_THRESHOLDS:
                key = (label, threshold)
                embed_cell = f"{embed_s:.1f}" if embedder is not None else ""
                if mode == "embedding" and embedder is None:
                    guess = f"~{embed_s:.0f} (projected, not run)" if embed_s else "—"
                    emit(
                        f"| {size:,} | {label} | {threshold} | — | — | — | — | not run: MiniLM "
                        f"vectors only up to {minilm_max:,} tools (`--minilm-max`) | {guess} | — |"
                    )
                    continue
                if key in previous:
                    n0, s0 = previous[key]
                    power = 2 if mode == "embedding" else 1.3
                    projected = s0 * (size / n0) ** power
                    if projected > time_box:
                        emit(
                            f"| {size:,} | {label} | {threshold} | — | — | — | — | skipped: "
                            f"~{projected:.0f} s projected > {time_box:.0f} s time box "
                            f"| {embed_cell} | — |"
                        )
                        continue
                rss_before = _rss("VmRSS")
                reset = _reset_peak_rss()
                started = time.perf_counter()
                result = dedupe_tools(catalog, mode=mode, threshold=threshold, embedder=embedder)  # type: ignore[arg-type]
                seconds = time.perf_counter() - started
                peak = _rss("VmHWM")
                previous[key] = (size, seconds)
                leader = {r.name: r.duplicate_of for r in result.removed}
                found = Counter(
                    edit
                    for base, twin, edit in planted.pairs
                    if leader.get(base, base) == leader.get(twin, twin)
                )
                other = sum(
                    frozenset((r.name, r.duplicate_of)) not in pair_of for r in result.removed
                )
                per_edit = " / ".join(
                    f"{found[e]}/{sum(p[2] == e for p in planted.pairs)}" for e in EDITS
                )
                total = sum(found.values())
                rss = f"{peak:.0f} (+{peak - rss_before:.0f})" if reset else f"{peak:.0f} (process)"
                emit(
                    f"| {size:,} | {label} | {threshold} | {len(result.removed):,} | "
                    f"{total:,}/{len(planted.pairs):,} ({total / len(planted.pairs):.0%}) | "
                    f"{per_edit} | {other:,} | {seconds:.2f} | {embed_cell} | {rss} |"
                )
        build_times.append(f"{size:,} tools {build_s:.1f} s")
        sources = planted.sources
    emit(
        f"\nBases are made from {sources:,} real tools (those with 3+ description words), so at "
        f"{sizes[-1]:,} tools each real tool's name and about half its words recur in "
        f"{sizes[-1] * (1 - TWIN_SHARE) / max(1, sources):.1f} bases on average: the chance "
        f"collisions in *other removed* grow faster than the catalogue. Building the catalogues "
        f"(not timed above): {', '.join(build_times)}."
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", default=str(HERE.parents[2] / "shared" / "datasets"))
    parser.add_argument("--out", help="write the Markdown to OUT/dedup_modes.md")
    parser.add_argument(
        "--scale", action=argparse.BooleanOptionalAction, default=True, help="run part 2"
    )
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument(
        "--minilm-max", type=int, default=10_000, help="largest catalogue embedded with MiniLM"
    )
    parser.add_argument("--time-box", type=float, default=300.0, help="seconds per setting")
    args = parser.parse_args()
    root = Path(args.datasets)
    lines: list[str] = []

    def emit(line: str) -> None:
        if line:
            print(line, flush=True)
            lines.append(line)

    started = time.perf_counter()
    emit("## Real catalogues\n\nEmbedding mode: seconds include embedding with MiniLM.")
    real_catalogues(root, emit)
    if args.scale:
        sizes = [int(s) for s in re.split(r"[,\s]+", args.sizes.strip()) if s]
        scale(root, sizes, args.minilm_max, args.time_box, emit)
    emit(f"\nTotal run time: {time.perf_counter() - started:.0f} s.")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "dedup_modes.md").write_text("\n".join(lines) + "\n", "utf-8")


if __name__ == "__main__":
    main()

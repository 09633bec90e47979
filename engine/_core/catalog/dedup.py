"""Tool dedup: NeuroLink's signature Jaccard with greedy leader clustering, at scale.

The compatible default (``mode="signature"``) follows NeuroLink's ``dedupeTools``: each tool
becomes the signature ``name|description|sorted prop:type``, the signature is split on runs of
whitespace, ``|`` and ``,`` into a token *set*, and two tools are similar when the Jaccard
similarity of their sets is ``>=`` the threshold. Clustering is a greedy "leader" pass in input
order: the first tool of a cluster is kept, and a later tool is removed when it is similar to an
earlier *kept* tool (never through a chain of removed ones).

For thresholds of 0.5 and above the pass runs as an exact set-similarity join (prefix and size
filtering over an inverted index of kept tools, every candidate verified exactly), so its result
equals the all-pairs pass; below 0.5 the prefix filter stops paying off and the naive pass runs.

Plain tool definitions (OpenAI, Anthropic, Gemini, MCP dicts) are read with the catalogue
readers at the edge, so a caller's malformed definition is a ``CatalogError``, never a silent
fail-open: fail-open covers faults inside dedup (and the embedder's), not the caller's input.
"""

from __future__ import annotations

import math
import re
import types
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import attrs
import numpy as np
import numpy.typing as npt

from ..errors import CatalogError, ConfigError
from ..protocols import Embedder, check_provider
from ..text import embedding_text
from .catalog import Catalog, Tool

__all__ = ["DedupResult", "Removed", "dedupe_tools", "signature", "signature_tokens"]

DedupMode = Literal["signature", "content", "embedding"]
#: What ``dedupe_tools`` reads: tools, or plain definitions in any format the readers accept.
ToolsInput: TypeAlias = "Catalog | Iterable[Tool] | Sequence[Mapping[str, Any]] | Mapping[str, Any]"
MODES: tuple[str, ...] = ("signature", "content", "embedding")
DEFAULT_THRESHOLD = 0.9
#: At and above this threshold the exact join runs; below it, the all-pairs pass.
JOIN_MIN_THRESHOLD = 0.5

_WHITESPACE = re.compile(r"\s+")
_SPLIT = re.compile(r"[\s|,]+")
# Filters may only ever admit more candidates than exact arithmetic would: the final decision is
# the same float comparison the naive pass makes, so a slightly loose bound keeps the join exact.
_SLACK = 1e-9


@attrs.frozen(kw_only=True)
class Removed:
    """A tool dedup dropped.

    Attributes:
        name: the removed tool's id.
        duplicate_of: the id of the kept tool (the leader) it duplicates.
        similarity: the Jaccard similarity between the two, recomputed against the leader.
    """

    name: str
    duplicate_of: str
    similarity: float


@attrs.frozen(kw_only=True)
class DedupResult:
    """What ``dedupe_tools`` kept and dropped.

    Attributes:
        tools: the kept tools, in input order: a ``Catalog`` for a ``Catalog`` input, otherwise a
            tuple. It is the very object passed in when dedup is disabled, fails open, or (for a
            ``Catalog`` or tuple input) removes nothing.
        removed: one record per dropped tool, in input order.
        providers: for each leader that absorbed at least one tool, the ids of every tool it
            stands for, the leader first, then the absorbed ones in input order. A host uses it to
            call the representative on the server of whichever duplicate it prefers.
    """

    tools: Catalog | Sequence[Tool]
    removed: tuple[Removed, ...] = ()
    providers: Mapping[str, tuple[str, ...]] = attrs.field(
        factory=lambda: types.MappingProxyType({}), hash=False
    )


def signature(tool: Tool, *, mode: DedupMode = "signature") -> str:
    """The text dedup compares: NeuroLink's ``name|description|sorted prop:type``.

    ``mode="content"`` drops the name part (``description|sorted prop:type``), so two tools
    that differ only in name compare as identical.

    The name is ``tool.name`` (the name the model sees, case kept), not the id: twins that only
    differ by the ``server__`` prefix of their ids have identical signatures. The description is
    lower-cased with whitespace runs collapsed and trimmed; punctuation is kept. The schema is
    ``parameters["jsonSchema"]`` when that key is present, otherwise ``parameters``; each
    top-level property becomes ``prop:type`` when its definition has a string ``type`` and
    ``prop`` otherwise, sorted.
    """
    description = _WHITESPACE.sub(" ", (tool.description or "").lower()).strip()
    schema_part = ",".join(_schema_parts(tool.parameters))
    if mode == "content":
        return f"{description}|{schema_part}"
    return f"{tool.name}|{description}|{schema_part}"


def signature_tokens(tool: Tool, *, mode: DedupMode = "signature") -> frozenset[str]:
    """The token set of ``signature(tool, mode=mode)``: split on whitespace, ``|`` and ``,``."""
    return frozenset(token for token in _SPLIT.split(signature(tool, mode=mode)) if token)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|A ∩ B| / |A ∪ B|; two empty sets give 1, one empty set gives 0."""
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    common = len(a & b)
    return common / (len(a) + len(b) - common)


def dedupe_tools(
    tools: ToolsInput,
    *,
    enabled: bool = True,
    threshold: float | None = DEFAULT_THRESHOLD,
    mode: DedupMode = "signature",
    embedder: Embedder | None = None,
) -> DedupResult:
    """Drop tools that are near-duplicates of an earlier kept tool.

    Args:
        tools: a ``Catalog``, a sequence of ``Tool`` objects, or plain tool definitions in any
            format ``Catalog.from_data`` reads (a list of OpenAI, Anthropic, Gemini or MCP
            dicts, a ``tools/list`` result …), which are read into a ``Catalog`` first. The
            order decides who is kept. Pass a sequence, not a one-shot iterator: fail-open hands
            the input back.
        enabled: ``False`` returns ``tools`` itself, untouched, with nothing removed.
        threshold: Jaccard similarity at which a tool collapses into its leader (``>=``);
            clamped to [0, 1]. ``None`` means the default 0.9; NaN collapses nothing. The default
            rarely fires on short descriptions: tools that differ only in name share n tokens of
            n + 2, so use 0.5–0.7 or ``mode="content"`` for those.
        mode: ``"signature"`` (NeuroLink's, includes the name), ``"content"`` (description and
            schema, without the name) or ``"embedding"`` (cosine of the tools' embedding texts;
            ``threshold`` is then on the embedder's cosine scale).
        embedder: the ``Embedder`` for ``mode="embedding"``.

    Returns:
        A ``DedupResult``. Kept tools stay in input order; a ``Catalog`` (and plain definitions,
        read into one) comes back as a ``Catalog`` keeping its server descriptions, ``Tool``
        objects as a tuple.

    Raises:
        ConfigError: an unknown ``mode``, ``"embedding"`` without an embedder, or an
            ``embedder`` that is not an ``Embedder``.
        CatalogError: ``tools`` is not a collection of tools, mixes ``Tool`` objects with other
            entries, or holds a definition the catalogue readers refuse (the message names its
            index and field). Raised whether or not dedup is enabled.

    Fail-open:
        As upstream, any exception while deduplicating well-formed tools (a schema object that
        cannot be read, an embedder that fails) returns the tools unchanged, nothing removed:
        ``tools`` itself, or the ``Catalog`` read from plain definitions. Nothing is logged or
        warned; the unchanged result is the only sign.
    """
    if mode not in MODES:
        raise ConfigError(f"dedup mode must be one of {MODES}, got {mode!r}")
    if mode == "embedding" and embedder is None:
        raise ConfigError('dedup mode "embedding" needs an embedder')
    check_provider(embedder, "embedder", Embedder)
    read = _read_tools(tools)
    if not enabled:
        return DedupResult(tools=read)
    try:
        return _dedupe(read, threshold, mode, embedder)
    except Exception:
        return DedupResult(tools=read)


def _read_tools(tools: object) -> Catalog | Sequence[Tool]:
    """The caller's input as tools: the edge where caller mistakes become ``CatalogError``."""
    if isinstance(tools, Catalog | Mapping):
        return tools if isinstance(tools, Catalog) else Catalog.from_data(tools)
    if isinstance(tools, str | bytes | bytearray) or not isinstance(tools, Iterable):
        raise CatalogError(
            "expected a Catalog, a list of Tool objects or a list of tool definitions, "
            f"got {type(tools).__name__}"
        )
    entries = tools if isinstance(tools, Sequence) else tuple(tools)
    is_tool = [isinstance(entry, Tool) for entry in entries]
    if all(is_tool):
        return entries
    if any(is_tool):
        index = is_tool.index(False)
        raise CatalogError(
            f"tool {index}: expected a Tool like tool {is_tool.index(True)}, got "
            f"{type(entries[index]).__name__}; pass Tool objects or tool definitions, not both"
        )
    return Catalog.from_data(list(entries))


def _dedupe(
    original: Catalog | Sequence[Tool],
    threshold: float | None,
    mode: DedupMode,
    embedder: Embedder | None = None,
) -> DedupResult:
    entries: tuple[Tool, ...] = original.tools if isinstance(original, Catalog) else tuple(original)
    t = DEFAULT_THRESHOLD if threshold is None else float(threshold)
    if math.isnan(t) or len(entries) < 2:
        return _unchanged(original, entries)
    t = min(1.0, max(0.0, t))
    similarity: Callable[[int, int], float]
    if mode == "embedding":
        assert embedder is not None
        vectors = np.asarray(embedder.embed([embedding_text(tool) for tool in entries]), np.float32)
        leader_of = _leaders_by_cosine(vectors, t)

        def similarity(i: int, j: int) -> float:
            return float(vectors[i] @ vectors[j])

    else:
        token_sets = [signature_tokens(tool, mode=mode) for tool in entries]
        if t >= JOIN_MIN_THRESHOLD:
            leader_of = _leaders_join(token_sets, t)
        else:
            leader_of = _leaders_naive(token_sets, t)

        def similarity(i: int, j: int) -> float:
            return jaccard(token_sets[i], token_sets[j])

    if all(leader is None for leader in leader_of):
        return _unchanged(original, entries)

    kept: list[Tool] = []
    removed: list[Removed] = []
    providers: dict[str, list[str]] = {}
    for index, (tool, leader) in enumerate(zip(entries, leader_of, strict=True)):
        if leader is None:
            kept.append(tool)
            continue
        head = entries[leader]
        removed.append(
            Removed(name=tool.id, duplicate_of=head.id, similarity=similarity(index, leader))
        )
        providers.setdefault(head.id, [head.id]).append(tool.id)
    result_tools: Catalog | tuple[Tool, ...]
    if isinstance(original, Catalog):
        result_tools = Catalog(
            kept, server_descriptions={server.id: server.description for server in original.servers}
        )
    else:
        result_tools = tuple(kept)
    return DedupResult(
        tools=result_tools,
        removed=tuple(removed),
        providers=types.MappingProxyType({head: tuple(ids) for head, ids in providers.items()}),
    )


def _unchanged(original: Catalog | Sequence[Tool], entries: tuple[Tool, ...]) -> DedupResult:
    if isinstance(original, Catalog | tuple):
        return DedupResult(tools=original)
    return DedupResult(tools=entries)


def _schema_parts(parameters: Mapping[str, Any] | None) -> list[str]:
    if not parameters:
        return []
    schema = parameters.get("jsonSchema", parameters)
    if not isinstance(schema, Mapping):
        return []
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return []
    parts = []
    for prop, definition in properties.items():
        kind = definition.get("type") if isinstance(definition, Mapping) else None
        parts.append(f"{prop}:{kind}" if isinstance(kind, str) else str(prop))
    return sorted(parts)


def _leaders_naive(token_sets: Sequence[frozenset[str]], t: float) -> list[int | None]:
    """The all-pairs greedy pass: ``leader_of[i]`` is the kept tool that absorbed ``i``, if any.

    A tool is absorbed by the earliest kept tool before it that is similar enough. (A later tool
    cannot absorb an earlier one: had they been similar, the earlier one, being a leader first,
    would already have absorbed the later.)
    """
    leader_of: list[int | None] = []
    leaders: list[int] = []
    for index, tokens in enumerate(token_sets):
        leader = next((j for j in leaders if jaccard(token_sets[j], tokens) >= t), None)
        leader_of.append(leader)
        if leader is None:
            leaders.append(index)
    return leader_of


def _leaders_join(token_sets: Sequence[frozenset[str]], t: float) -> list[int | None]:
    """The same result as ``_leaders_naive`` for ``t >= 0.5``, via prefix filtering.

    Tokens get ids ordered by document frequency, rarest first, and each set becomes that sorted
    id list. If J(x, y) >= t then |x ∩ y| >= t·max(|x|, |y|), so the prefixes of length
    ``|r| - ceil(t·|r|) + 1`` of the two lists share a token (the prefix-filter lemma), whatever
    order the records are visited in. Only kept tools are indexed, so a large cluster of
    duplicates costs one probe per member, not quadratic work. Candidates also pass the size
    filter ``t·|y| <= |x| <= |y|/t`` and are then verified with the exact Jaccard, earliest first.
    """
    frequency = Counter(token for tokens in token_sets for token in tokens)
    rank = {
        token: rank
        for rank, (token, _) in enumerate(sorted(frequency.items(), key=lambda kv: (kv[1], kv[0])))
    }
    index: dict[int, list[int]] = {}
    sizes = [len(tokens) for tokens in token_sets]
    leader_of: list[int | None] = []
    first_empty: int | None = None
    for i, tokens in enumerate(token_sets):
        size = sizes[i]
        if size == 0:
            # Empty sets match only each other (similarity 1), never a non-empty set (0 < 0.5).
            leader_of.append(first_empty)
            if first_empty is None:
                first_empty = i
            continue
        ids = sorted(rank[token] for token in tokens)
        prefix = ids[: _prefix_length(size, t)]
        low, high = t * size - _SLACK, size / t + _SLACK
        candidates: set[int] = set()
        for token_id in prefix:
            for j in index.get(token_id, ()):
                if low <= sizes[j] <= high:
                    candidates.add(j)
        leader = None
        for j in sorted(candidates):
            if jaccard(token_sets[j], tokens) >= t:
                leader = j
                break
        leader_of.append(leader)
        if leader is None:
            for token_id in prefix:
                index.setdefault(token_id, []).append(i)
    return leader_of


def _prefix_length(size: int, t: float) -> int:
    # ceil(t·size) with slack, so float error can only lengthen the prefix, never shorten it.
    overlap = max(1, math.ceil(t * size - _SLACK))
    return size - overlap + 1


def _leaders_by_cosine(vectors: npt.NDArray[np.float32], t: float) -> list[int | None]:
    """Greedy leaders by cosine: each tool joins the earliest kept tool with cosine >= t.

    Similarities are computed in blocks of rows against all earlier rows, so memory stays
    bounded (block x n) while numpy does the arithmetic.
    """
    n = len(vectors)
    leader_of: list[int | None] = [None] * n
    for start in range(0, n, _BLOCK):
        stop = min(n, start + _BLOCK)
        block = vectors[start:stop] @ vectors[:stop].T
        for row, i in enumerate(range(start, stop)):
            for j in np.flatnonzero(block[row, :i] >= t - _SLACK).tolist():
                if leader_of[j] is None:  # only kept tools lead: no chaining
                    leader_of[i] = j
                    break
    return leader_of


_BLOCK = 512

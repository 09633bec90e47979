"""Learned evidence in recall: example requests per tool, and how they lift its score.

A tool's evidence is a bounded set of request vectors: its example requests (from the
catalogue or the API) and requests an agent served with it (``Engine.learn``, or the tool
calls a conversation shows). Two scores come from them:

- **nearest**: the cosine of the request with the tool's nearest example;
- **refined**: the cosine with the tool's refined vector, its description vector moved
  toward its examples' mean, ``normalise(d + REFINE_STEP * mean(examples))`` (Rocchio's
  update), so a tool with many agreeing examples is pulled further than by any one of them.

For a tool with evidence the semantic score is

    max(cosine, (1 - NEAREST - REFINED) * cosine + NEAREST * nearest + REFINED * refined)

and for a tool without it the plain cosine; the keyword terms (``fusion.fuse``) are added
afterwards as before. The ``max`` is the guard: evidence only ever lifts its own tool, so a
tool nothing was learned for keeps its score, never rises past one that matches the
request's words, and a tool whose examples are far from this request keeps its description
score. The weights were chosen on the dev splits (``tests/bench/bench_learning.py --sweep``:
the mean dev hit@5 over 1, 2, 5 and 10 examples per tool on MetaTool and BFCL).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

import attrs
import numpy as np
import numpy.typing as npt

from ..catalog.tool import Tool
from ..select.message_view import Turn
from ..stores import LearnedExample

Matrix = npt.NDArray[np.float32]
Scores = npt.NDArray[np.float32]
Rows = npt.NDArray[np.intp]

#: Weight of the nearest example's cosine in a tool's learned score.
NEAREST_WEIGHT = 0.1
#: Weight of the refined vector's cosine.
REFINED_WEIGHT = 0.9
#: How far the description vector moves toward its examples' mean (before normalising).
REFINE_STEP = 2.0
#: Evidence kept per tool. Scoring costs one dot product per kept example on every request
#: (32 examples x 1,000 tools is 32,000 rows, a few ms on one core), and on MetaTool hit@5
#: gains little past a few dozen examples per tool, so the oldest learned entries go first.
PER_TOOL = 32


def request_digest(text: str) -> str:
    """What identifies a request in the learning store instead of its text: a SHA-256 of
    the whitespace-normalised text (a repeat of a request is recognised, its text is not
    kept)."""
    return hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()


def calls_since_request(turns: Sequence[Turn]) -> tuple[str, tuple[str, ...]]:
    """The latest user request (its text) and the tools the assistant called since, in
    order: what a conversation shows an agent used for what (``record_calls``). ``("", ())``
    when there is no request or no call yet."""
    calls: list[str] = []
    for turn in reversed(turns):
        if turn.role == "user" and not turn.is_tool_result:
            if not turn.text or not calls:
                return "", ()
            return turn.text, tuple(dict.fromkeys(reversed(calls)))
        if turn.role == "assistant":
            calls.extend(reversed(turn.tool_calls))
    return "", ()


def merged(
    current: Sequence[LearnedExample], new: Sequence[LearnedExample], bound: int = PER_TOOL
) -> tuple[LearnedExample, ...]:
    """``current`` with ``new`` added, at most ``bound`` entries.

    A repeat (same digest) replaces its earlier entry and counts as the newest. Past the
    bound the oldest learned entries (``source="use"``) go first, then the oldest examples:
    examples a host gave are evidence it chose, what an agent used is evidence it happened.
    """
    by_digest: dict[str, LearnedExample] = {}
    for entry in (*current, *new):
        by_digest.pop(entry.digest, None)
        by_digest[entry.digest] = entry
    kept = list(by_digest.values())
    while len(kept) > bound:
        used = next((i for i, e in enumerate(kept) if e.source == "use"), 0)
        del kept[used]
    return tuple(kept)


@attrs.frozen(kw_only=True, eq=False)
class LearnedScores:
    """The evidence of one index's tools, aligned with its rows.

    Attributes:
        rows: the rows (tools) with evidence, ascending.
        examples: every kept example vector, grouped by tool in ``rows`` order.
        starts: where each tool's examples start in ``examples``.
        refined: one refined vector per row in ``rows``.
        examples_count: examples per row in ``rows``.
    """

    rows: Rows
    examples: Matrix
    starts: Rows
    refined: Matrix
    examples_count: npt.NDArray[np.intp]

    def semantic(self, cosine: Scores, query: Matrix) -> Scores:
        """``cosine`` (one score per tool, ``-inf`` for a tool without a usable vector)
        with the learned lift applied to the rows with evidence (see the module)."""
        query = np.asarray(query, dtype=np.float32)
        # einsum, not ``@``: a BLAS matrix-vector product spins on every core (VectorIndex).
        nearest = np.maximum.reduceat(np.einsum("ij,j->i", self.examples, query), self.starts)
        refined = np.einsum("ij,j->i", self.refined, query)
        base = cosine[self.rows]
        plain = np.where(np.isfinite(base), base, np.float32(0.0))
        learned = (
            np.float32(1.0 - NEAREST_WEIGHT - REFINED_WEIGHT) * plain
            + np.float32(NEAREST_WEIGHT) * nearest
            + np.float32(REFINED_WEIGHT) * refined
        )
        lifted: Scores = cosine.copy()
        # A tool whose description vector is broken counts as cosine 0 ("no semantic
        # evidence", as ``fuse`` reads it), so its own evidence can only lift it from there.
        lifted[self.rows] = np.maximum(plain, learned.astype(np.float32))
        return lifted


def example_texts(tools: Iterable[Tool], bound: int = PER_TOOL) -> list[tuple[str, str]]:
    """``(tool id, example)`` for every tool's examples, at most ``bound`` per tool."""
    return [(tool.id, text) for tool in tools for text in tool.examples[:bound]]


def grouped(pairs: Sequence[tuple[str, str]], vectors: Matrix) -> dict[str, Matrix]:
    """Tool id → its rows of ``vectors`` (row ``i`` is the vector of ``pairs[i]``)."""
    rows: dict[str, list[int]] = {}
    for i, (tool_id, _) in enumerate(pairs):
        rows.setdefault(tool_id, []).append(i)
    return {tool_id: vectors[picked] for tool_id, picked in rows.items()}


def learned_scores(
    ids: Sequence[str], tool_vectors: Matrix, evidence: Mapping[str, Matrix]
) -> LearnedScores | None:
    """The evidence of the tools ``ids`` (rows of ``tool_vectors``) from ``evidence`` (tool
    id → example vectors); ``None`` when no tool has any.

    Rows that are not finite unit-width vectors of ``tool_vectors``' width are left out (a
    store written by another model, or a broken vector, is no evidence); ids not in ``ids``
    are ignored (tools since removed).
    """
    dim = int(tool_vectors.shape[1])
    rows: list[int] = []
    blocks: list[Matrix] = []
    for row, tool_id in enumerate(ids):
        given = evidence.get(tool_id)
        if given is None or len(given) == 0:
            continue
        block = np.asarray(given, dtype=np.float32)
        if block.ndim != 2 or block.shape[1] != dim:
            continue
        norms = np.linalg.norm(block, axis=1)
        usable = np.isfinite(block).all(axis=1) & (norms > 0)
        if not usable.any():
            continue
        rows.append(row)
        blocks.append(block[usable] / norms[usable, None])
    if not rows:
        return None
    counts = np.array([len(b) for b in blocks], dtype=np.intp)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.intp)
    picked = np.array(rows, dtype=np.intp)
    description = np.asarray(tool_vectors, dtype=np.float32)[picked]
    description = np.where(np.isfinite(description), description, np.float32(0.0))
    means = np.stack([b.mean(axis=0) for b in blocks])
    refined = description + np.float32(REFINE_STEP) * means
    norms = np.linalg.norm(refined, axis=1, keepdims=True)
    refined = np.where(norms > 0, refined / np.maximum(norms, 1e-12), means)
    return LearnedScores(
        rows=picked,
        examples=np.ascontiguousarray(np.concatenate(blocks)),
        starts=starts,
        refined=np.ascontiguousarray(refined, dtype=np.float32),
        examples_count=counts,
    )

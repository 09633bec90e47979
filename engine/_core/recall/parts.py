"""Long requests read whole: a request longer than the model reads is embedded by parts.

MiniLM reads the first 128 word pieces of a text; the steps of a long, multi-step task that
come after them never reach its vector. A request the model cannot read whole is split at
its sentence and step boundaries, the pieces are packed greedily into parts the model reads
whole, each part is embedded with the other requests of the same model call, and the part
vectors are fused back into one unit vector, so every later stage (the query cache, scoring,
the fast tier's training pairs) sees one request vector as before.

The rule was chosen on the dev splits (``tests/bench/bench_long.py --choose``):

- *split*: sentence ends, line breaks and numbered steps, packed greedily up to the model's
  reach; a piece longer than that is cut at word boundaries;
- *fuse*: the mean of the part vectors, re-normalised (every part weighs the same; weighting
  by word pieces, the model's own mean pooling continued past its window, came second);
- *bound*: at most ``MAX_PARTS`` parts; the rest of a very long request is not read, so
  one pasted document costs a bounded number of model rows.

Pure: the caller brings the token counter (the embedder's tokenizer), nothing here loads a
model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final, Protocol, cast

import attrs
import numpy as np
import numpy.typing as npt

from ..protocols import CountsTokens
from ..text import MODEL_TEXT_CHARS, bounded

Vectors = npt.NDArray[np.float32]


class Embeds(Protocol):
    """What reading by parts needs of an embedder (the full model, or a stand-in)."""

    def embed(self, texts: Sequence[str]) -> Vectors: ...


#: Counts the word pieces of each text, special tokens excluded.
CountTokens = Callable[[Sequence[str]], Sequence[int]]

#: Parts one request is split into at most (the first ``MAX_PARTS`` parts are read).
MAX_PARTS: Final = 4
#: Whether a part weighs by its word pieces in the fusion (else every part weighs the same).
#: Equal weights found one more dev request's tool in the top 5 (64 vs 63 over the 65 dev
#: requests of BFCL, MetaTool and LiveMCPBench past the reach); word pieces a little more of
#: BFCL's multi-tool answers (recall@5 summed +3.75 vs +3.25 over 53): a near tie, decided
#: by hit@5.
WEIGH_BY_PIECES: Final = False
# Boundaries a request is split at: after a sentence end (not a step number such as "1."),
# at line breaks, before a numbered or bulleted step ("2. ", "3) ", "- "), or before
# "then"/"finally" joining two steps.
_BOUNDARY = re.compile(
    r"(?<=[^\d\s][.!?;])\s+|\s*\n+\s*|\s+(?=(?:\d{1,2}[.)]|[-*\u2022])\s)"
    r"|\s+(?=(?:then|finally|next|afterwards|after that),?\s)",
    re.IGNORECASE,
)
_SPACE = re.compile(r"\s+")
# Guards the division of a part's weighted sum; part vectors are unit rows, so a real
# request's fused sum is never this small.
_EPS: Final = 1e-12


def pieces(text: str) -> list[str]:
    """The sentences and steps of ``text``, in order, without empty ones."""
    return [piece for piece in _BOUNDARY.split(text) if piece and not piece.isspace()]


def request_parts(
    text: str, count: CountTokens, reach: int, *, max_parts: int = MAX_PARTS
) -> tuple[str, ...]:
    """``text`` as parts the model reads whole (``(text,)`` when it reads all of it).

    Args:
        text: the request.
        count: word pieces of each text, special tokens excluded.
        reach: word pieces the model reads of one text, special tokens excluded.
        max_parts: parts returned at most; later text is dropped.

    Raises:
        ValueError: ``reach`` or ``max_parts`` is below 1.
    """
    if reach < 1 or max_parts < 1:
        raise ValueError(f"reach and max_parts must be at least 1, got {reach} and {max_parts}")
    # A word piece covers at least one character, so a text no longer than the reach in
    # characters fits without asking the tokenizer (most requests: no extra work).
    if len(text) <= reach or count([text])[0] <= reach:
        return (text,)
    # Parts past ``max_parts`` are never read: splitting (and counting) more of a pasted
    # document would only cost time.
    found = pieces(bounded(text, max_parts * MODEL_TEXT_CHARS))
    sizes = list(count(found))
    parts: list[str] = []
    current: list[str] = []
    used = 0
    for piece, size in zip(found, sizes, strict=True):
        if current and used + size > reach:
            parts.append(" ".join(current))
            current, used = [], 0
            if len(parts) == max_parts:
                return tuple(parts)
        if size <= reach:
            current.append(piece)
            used += size
            continue
        for window in _word_windows(piece, count, reach):
            parts.append(window)
            if len(parts) == max_parts:
                return tuple(parts)
    if current:
        parts.append(" ".join(current))
    return tuple(parts[:max_parts])


def _word_windows(piece: str, count: CountTokens, reach: int) -> list[str]:
    """A piece longer than the reach, cut at word boundaries into windows that fit."""
    words = _SPACE.split(piece.strip())
    sizes = list(count(words))
    windows: list[str] = []
    current: list[str] = []
    used = 0
    for word, size in zip(words, sizes, strict=True):
        if current and used + size > reach:
            windows.append(" ".join(current))
            current, used = [], 0
        # One word past the reach (a blob): the model reads its first pieces, as before.
        current.append(word)
        used += size
    if current:
        windows.append(" ".join(current))
    return windows


def fused(vectors: Vectors, weights: Sequence[int]) -> Vectors:
    """One unit vector from the unit vectors of a request's parts: their mean weighted by
    ``weights``, re-normalised.

    Raises:
        ValueError: ``vectors`` is not one row per weight, or a weight is not positive.
    """
    rows = np.asarray(vectors, dtype=np.float32)
    if rows.ndim != 2 or rows.shape[0] != len(weights) or rows.shape[0] == 0:
        raise ValueError(
            f"expected one vector per part ({len(weights)} parts), got shape {rows.shape}"
        )
    if min(weights) < 1:
        raise ValueError(f"part weights must be positive, got {list(weights)}")
    mixed = np.asarray(weights, dtype=np.float32) @ rows
    norm = float(np.linalg.norm(mixed))
    if not np.isfinite(norm) or norm < _EPS:
        # Parts that cancel out: the first part is the request as the model read it before.
        first: Vectors = rows[0].copy()
        return first
    return np.asarray(mixed / norm, dtype=np.float32)


@attrs.frozen
class PartsPlan:
    """What one model call embeds for a batch of requests, and how rows fold back.

    Attributes:
        texts: every part of every request, request by request.
        owners: for each text, the position of its request.
        weights: for each text, its weight in the fusion (1 each unless ``WEIGH_BY_PIECES``).
        requests: how many requests the plan covers.
    """

    texts: tuple[str, ...]
    owners: tuple[int, ...]
    weights: tuple[int, ...]
    requests: int

    @property
    def split(self) -> bool:
        """Whether any request was split (otherwise ``texts`` are the requests)."""
        return len(self.texts) != self.requests

    def fold(self, vectors: Vectors) -> Vectors:
        """One row per request from one row per text (``fused`` over each request's parts).

        Raises:
            ValueError: ``vectors`` is not one row per text.
        """
        rows = np.asarray(vectors, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[0] != len(self.texts):
            raise ValueError(
                f"expected one vector per part ({len(self.texts)}), got shape {rows.shape}"
            )
        if not self.split:
            return rows
        out = np.empty((self.requests, rows.shape[1]), dtype=np.float32)
        owners = np.asarray(self.owners)
        for request in range(self.requests):
            mine = np.flatnonzero(owners == request)
            if len(mine) == 1:
                out[request] = rows[mine[0]]
            else:
                out[request] = fused(rows[mine], [self.weights[i] for i in mine])
        return out


def plan_parts(
    requests: Sequence[str], count: CountTokens, reach: int, *, max_parts: int = MAX_PARTS
) -> PartsPlan:
    """The parts of every request (see ``request_parts``), for one model call.

    Raises:
        ValueError: ``reach`` or ``max_parts`` is below 1.
    """
    texts: list[str] = []
    owners: list[int] = []
    weights: list[int] = []
    for position, request in enumerate(requests):
        parts = request_parts(request, count, reach, max_parts=max_parts)
        texts.extend(parts)
        owners.extend([position] * len(parts))
        if len(parts) > 1 and WEIGH_BY_PIECES:
            weights.extend(min(max(1, size), reach) for size in count(parts))
        else:
            weights.extend([1] * len(parts))
    return PartsPlan(tuple(texts), tuple(owners), tuple(weights), len(requests))


def _token_counter(embedder: Embeds) -> CountsTokens | None:
    """``embedder`` when it can count word pieces (``CountsTokens``), else ``None``; without
    the protocol's ``isinstance`` (~45 us on every request: a burst's fast-tier answers paid
    it 200 times on the event loop)."""
    if hasattr(embedder, "reach") and callable(getattr(embedder, "token_counts", None)):
        return cast(CountsTokens, embedder)
    return None


def request_vectors(embedder: Embeds, requests: Sequence[str]) -> Vectors:
    """``embedder``'s vectors of ``requests``, one row each, a request past the model's reach
    read by parts when the embedder can count word pieces (``CountsTokens``).

    Raises:
        ValueError: the embedder answered a matrix of the wrong shape.
        Exception: whatever the embedder raised.

    **Fail-open:** a token count that fails reads every request as the model alone would
    (its first word pieces), as before parts existed.
    """
    texts = list(requests)
    counter = _token_counter(embedder)
    if counter is None:
        return embedder.embed(texts)
    try:
        plan = plan_parts(texts, counter.token_counts, int(counter.reach))
    except Exception:  # the count is only an improvement: the request is still read
        return embedder.embed(texts)
    if not plan.split:
        return embedder.embed(texts)
    return plan.fold(embedder.embed(list(plan.texts)))

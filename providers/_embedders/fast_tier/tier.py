"""The fast tier: a request's vector as the mean of static token rows, in MiniLM's space.

Each token of the vendored BERT vocabulary gets one 384-d row. The rows start from the
*distilled* table (every token id run through the bundled MiniLM on its own), mapped linearly
into the full model's space (``SpaceMap``), and are
then *learned*: ridge least squares (``_ridge``) fits them so that the mean of a text's
rows matches the full model's sentence vector for that text. A
request's fast vector therefore lives in the full model's space and is scored against the
full tier's **tool** vectors: no second tool matrix. Embedding one request is a tokeniser call
and a mean of at most 128 rows (~0.1 ms).

The distilled table is a pure function of the model, so the bundled model's ships with the
package (``fast_tier_table.npz``: int8 rows with one float32 scale each, 11.7 MB, 10.3 MB in
the wheel; fp16 would cost 21.7 MB for the same dev-split hit@5, fp32 43.5 MB). It is used
only when its sha256 and the sha256 of the model and tokenizer it was distilled from match the
installed ones; any other model is distilled on first use (~16 s of CPU on two cores) and
cached.

The catalogue's tool texts are learned first (and fitted at once unless ``fit_from`` says
the tier could not answer yet); every request the full tier answers is a free training pair
(``learn``), and ``refit`` solves again from the running statistics. The table and the
statistics (never texts) persist in ``cache_dir/fast-tier/<model sha256>/``
(``files.py``); a missing, corrupt or mismatched file is rebuilt from the installed
model. Nothing here uses the network.
"""

from __future__ import annotations

import hashlib
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

from ...._core.errors import CacheWarning
from ...._core.text import MODEL_TEXT_CHARS, bounded
from .files import Learned, SourceModel, load, save, shipped_table
from .ridge import RidgeStats, SpaceMap, Stopped, solve
from .table import MappedRows, TokenTable

if TYPE_CHECKING:
    from tokenizers import Tokenizer

F32 = npt.NDArray[np.float32]

#: Pull of the fit towards the distilled rows; chosen on the dev splits (0.01 vs 0.001).
DEFAULT_RIDGE: Final = 0.01
#: Ridge of the linear map into the full model's space; chosen on the dev splits (1e-5..1e-3).
MAP_RIDGE: Final = 1e-3
#: Conjugate-gradient steps of a fit on the catalogue's tool texts when the tier opens.
#: Chosen on the dev splits: 4, 8, 12 and 20 steps gave the same hit@5 (BFCL dev, fast tier
#: alone 0.808 / 0.807 / 0.808 / 0.807; MetaTool 0.484 / 0.484 / 0.484 / 0.483; and so the
#: cascade), and 4 take 1.9 s of CPU on BFCL's 1,702 tools where 20 took 4.1.
CATALOGUE_FIT_ITERATIONS: Final = 4
_MAX_TOKENS: Final = 128
_CLS, _SEP = 101, 102
# Tool texts learned between two ``should_stop`` calls (~50 ms of work at full speed; each
# slice also pays one small BLAS product, so not fewer texts).
_LEARN_SLICE: Final = 512
# Token ids run through the model per forward pass while distilling.
_DISTIL_BATCH: Final = 512


class FastTierStopped(Stopped):
    """A build or fit stopped between two steps because ``should_stop`` said so."""


class FastTier:
    """Request vectors from learned static token rows, in the full model's space.

    Build it with ``FastTier.open``. It satisfies the ``Embedder`` protocol for requests only:
    tool vectors must come from the full model it was distilled from.

    **Threads:** ``embed`` may run in any thread while ``learn`` and ``refit`` run in another:
    the table is swapped whole, never mutated in place. Run ``open``, ``learn``, ``refit``
    and ``save`` in a worker thread (``trio.to_thread.run_sync``): they take from
    milliseconds (``learn``) to about two seconds of CPU (a first fit on BFCL's 1,702
    tools), or tens of seconds for a model the package ships no table for (distilled).
    """

    dim: int
    max_batch: int
    identity: str

    def __init__(
        self,
        tokenizer: Tokenizer,
        distilled: F32,
        stats: RidgeStats,
        table: TokenTable,
        *,
        model_sha256: str,
        directory: Path | None,
        ridge: float = DEFAULT_RIDGE,
        tool_digests: set[bytes] | None = None,
        space: SpaceMap | None = None,
        shipped: bool = False,
    ) -> None:
        self._tokenizer = tokenizer
        self._distilled = distilled
        self._shipped = shipped  # the distilled table is the package's: the cache needs no copy
        self._stats = stats
        self._table = table
        self._fit_lock = threading.Lock()
        self._tool_digests: set[bytes] = set(tool_digests or ())
        self._space = space if space is not None else SpaceMap(int(distilled.shape[1]))
        self.model_sha256 = model_sha256
        self.directory = directory
        self.ridge = ridge
        self.dim = int(distilled.shape[1])
        self.max_batch = 256
        self.identity = f"fast-tier:{model_sha256[:16]}"

    @classmethod
    def open(
        cls,
        embedder: SourceModel,
        *,
        cache_dir: str | os.PathLike[str] | None,
        tool_texts: Sequence[str] = (),
        tool_vectors: F32 | None = None,
        ridge: float = DEFAULT_RIDGE,
        max_pairs: int = 4_000_000,
        should_stop: Callable[[], bool] | None = None,
        fit_from: int = 0,
    ) -> FastTier:
        """The fast tier of ``embedder``'s model: loaded from ``cache_dir`` or built.

        Args:
            embedder: the full model; its files are the only input (no network).
            cache_dir: where the table and statistics live; ``None`` keeps them in memory.
            tool_texts: the catalogue's embedding texts; those the cache has not learned
                yet are learned (``learn_tools``) and the table refitted.
            tool_vectors: the full model's vectors of ``tool_texts`` (embedded when omitted).
            ridge: the fit's pull towards the distilled rows.
            max_pairs: bound of the co-occurrence statistics (see ``RidgeStats``).
            should_stop: asked between distillation batches and fitting steps (from the
                worker thread); true stops the build, so a shutting-down engine does not
                wait for it.
            fit_from: fit new tool texts at once only if the tier has served at least this
                many requests; otherwise they are learned and wait for the next ``refit``
                (and nothing is saved until then). An engine that answers from the tier
                only past ``min_served`` requests passes it here: a fit on fewer would
                never answer a request (BFCL: ~2 s of CPU a first engine no longer spends).

        Raises:
            EmbedderError: the model failed while distilling.
            FastTierStopped: ``should_stop`` said so.

        **Fail-open:** an unreadable, corrupt or mismatched cache is rebuilt, never trusted.
        """
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(embedder.tokenizer_path))
        tokenizer.no_padding()
        tokenizer.enable_truncation(_MAX_TOKENS)
        sha = embedder.model_sha256
        directory = Path(cache_dir) / "fast-tier" / sha if cache_dir is not None else None
        try:
            shipped = shipped_table(embedder, should_stop=should_stop)
        except Stopped as exc:
            raise FastTierStopped(str(exc)) from None
        saved = _load(directory, sha, shipped) if directory is not None else None
        if saved is not None:
            distilled = saved[0]
        elif shipped is not None:
            distilled = shipped
        else:
            distilled = distil(embedder, should_stop=should_stop)
        learned = saved[1] if saved is not None else None
        if learned is not None:
            stats, table, known, space = learned
            stats.max_pairs = max_pairs
        else:
            vocab = int(distilled.shape[0])
            stats = RidgeStats(vocab, int(distilled.shape[1]), max_pairs=max_pairs)
            table, known, space = _unfitted(distilled), set(), SpaceMap(int(distilled.shape[1]))
        tier = cls(
            tokenizer, distilled, stats, table, model_sha256=sha, directory=directory,
            ridge=ridge, tool_digests=known, space=space, shipped=distilled is shipped,
        )  # fmt: skip
        new = tier.unlearned_tools(tool_texts)
        if new:
            texts = [tool_texts[i] for i in new]
            if tool_vectors is None:
                vectors = embedder.embed(texts)
            else:
                vectors = np.asarray(tool_vectors, dtype=np.float32)[new]
            tier.learn_tools(texts, vectors, should_stop=should_stop)
            if tier.served_texts < fit_from:
                return tier  # learned, not fitted: the first refit on traffic fits them
            tier.refit(iterations=CATALOGUE_FIT_ITERATIONS, should_stop=should_stop)
        if learned is None or new:
            tier.save()
        return tier

    def unlearned_tools(self, texts: Sequence[str]) -> list[int]:
        """Positions of the tool texts the statistics do not hold yet."""
        return [i for i, text in enumerate(texts) if _text_digest(text) not in self._tool_digests]

    def learn_tools(
        self, texts: Sequence[str], vectors: F32, *, should_stop: Callable[[], bool] | None = None
    ) -> None:
        """``learn`` for catalogue texts: each distinct tool text counts once, across restarts
        (the cache keeps their sha256, not the texts), so reopening never double-counts.

        Raises:
            ValueError: ``vectors`` is not one finite row of width ``dim`` per text.
            FastTierStopped: ``should_stop`` said so (asked between slices of texts); the
                texts learned so far stay learned.
        """
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.shape[0] != len(texts):
            raise ValueError(f"expected {len(texts)} vectors, got shape {vectors.shape}")
        fresh: dict[bytes, int] = {}
        for i in self.unlearned_tools(texts):
            fresh.setdefault(_text_digest(texts[i]), i)
        digests = list(fresh)
        for first in range(0, len(digests), _LEARN_SLICE):
            if should_stop is not None and should_stop():
                raise FastTierStopped("the fast tier's build was stopped")
            part = digests[first : first + _LEARN_SLICE]
            rows = [fresh[digest] for digest in part]
            self.learn([texts[i] for i in rows], vectors[rows])
            self._tool_digests.update(part)

    @property
    def learned_texts(self) -> int:
        """How many (text, vector) pairs the statistics hold."""
        return self._stats.texts

    @property
    def served_texts(self) -> int:
        """How many learned pairs are not catalogue tool texts (requests the full tier served).

        Before any traffic the fast tier knows only the catalogue's phrasing: on MetaTool's
        paraphrased requests (test split, fused with keyword) it scores 0.656 hit@5 against
        the full tier's 0.789, then 0.688 / 0.759 / 0.788 after 100 / 1k / 10k served
        requests (``tests/bench/bench_load.py``, section 2).
        """
        return self._stats.texts - len(self._tool_digests)

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids the fast tier reads for each text (bounded, at most 128)."""
        encodings = self._tokenizer.encode_batch([bounded(t, MODEL_TEXT_CHARS) for t in texts])
        return [e.ids for e in encodings]

    def embed(self, texts: Sequence[str]) -> F32:
        """Unit vectors of ``texts`` in the full model's space.

        Returns:
            float32 ``(len(texts), dim)``, rows L2-normalised.
        """
        table = self._table  # one read: a concurrent refit swaps the whole table
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for row, ids in enumerate(self.token_ids(texts)):
            vector = table.mean(ids)
            out[row] = vector / max(float(np.linalg.norm(vector)), 1e-12)
        return out

    def learn(self, texts: Sequence[str], vectors: F32) -> None:
        """Add (text, full-model vector) pairs to the statistics; ``refit`` uses them.

        Raises:
            ValueError: ``vectors`` is not one finite row of width ``dim`` per text.
        """
        ids = self.token_ids(texts)
        targets = np.asarray(vectors, dtype=np.float32)
        self._stats.add(ids, targets)  # checks the shapes first
        features = np.stack([self._distilled[row].mean(axis=0) for row in ids]) if ids else None
        if features is not None:
            self._space.add(features, targets)

    def refit(self, *, iterations: int = 20, should_stop: Callable[[], bool] | None = None) -> None:
        """Solve the ridge fit from the statistics and swap in the new table.

        Raises:
            FastTierStopped: ``should_stop`` said so; the old table keeps serving.

        **Cancellation:** ``should_stop`` is asked between the fit's steps (each well under
        0.1 s on BFCL's catalogue), so a shutting-down engine waits for one step at most.
        """
        with self._fit_lock:
            try:
                start = MappedRows(self._distilled, self._space.mapping(MAP_RIDGE))
                tokens, rows = solve(
                    self._stats.system(),
                    start,
                    vocab_size=int(self._distilled.shape[0]),
                    ridge=self.ridge,
                    iterations=iterations,
                    should_stop=should_stop,
                )
            except Stopped as exc:
                raise FastTierStopped(str(exc)) from None
            self._table = TokenTable(start, tokens, rows)

    def save(self) -> None:
        """Write the table and statistics to the cache directory (no-op without one).

        **Fail-open:** a cache that cannot be written costs only a rebuild next time.
        """
        if self.directory is None:
            return
        keys, values, tokens, rows, texts = self._stats.snapshot()
        files: dict[str, npt.NDArray[np.generic]] = {
            "keys.npy": keys,
            "values.npy": values,
            "tokens.npy": tokens,
            "rows.npy": rows,
            "table_rows.npy": self._table[tokens],
            "map_xtx.npy": self._space.snapshot()[0],
            "map_xty.npy": self._space.snapshot()[1],
            "tool_digests.npy": np.frombuffer(b"".join(sorted(self._tool_digests)), np.uint8)
            .reshape(-1, 32)
            .copy(),
        }
        if not self._shipped:
            files["distilled.npy"] = self._distilled
        try:
            save(self.directory, self.model_sha256, files, texts, shipped=self._shipped)
        except OSError as exc:
            warnings.warn(
                CacheWarning(
                    f"cannot write the fast tier's cache in {self.directory} ({exc}); "
                    "it is fitted again on the next start"
                ),
                stacklevel=2,
            )


def distil(embedder: SourceModel, *, should_stop: Callable[[], bool] | None = None) -> F32:
    """Every vocabulary token on its own (``[CLS] t [SEP]``) through the model: ``(V, 384)``.

    Raises:
        EmbedderError: the model failed.
        FastTierStopped: ``should_stop`` returned true between two batches.
    """
    vocab = embedder.vocab_size
    table = np.empty((vocab, embedder.dim), dtype=np.float32)
    for start in range(0, vocab, _DISTIL_BATCH):
        if should_stop is not None and should_stop():
            raise FastTierStopped("the fast tier's build was stopped")
        ids = np.arange(start, min(vocab, start + _DISTIL_BATCH), dtype=np.int64)
        batch = np.stack([np.full_like(ids, _CLS), ids, np.full_like(ids, _SEP)], axis=1)
        table[start : start + len(ids)] = embedder.embed_token_ids(batch)
    table.setflags(write=False)
    return table


def _unfitted(distilled: F32) -> TokenTable:
    """The table before any fit: the distilled rows as they are."""
    return TokenTable(
        MappedRows(distilled, None),
        np.zeros(0, np.int64),
        np.zeros((0, distilled.shape[1]), np.float32),
    )


def _text_digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _load(directory: Path, sha: str, shipped: F32 | None) -> tuple[F32, Learned | None] | None:
    """The cache's ``(distilled, learned)`` (see ``load``), mapped with ``MAP_RIDGE``."""
    return load(directory, sha, shipped, map_ridge=MAP_RIDGE)

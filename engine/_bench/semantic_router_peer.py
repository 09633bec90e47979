"""semantic-router (aurelio-labs, PyPI ``semantic-router``) as a tool-ranking peer.

How it is run (the ``how`` string of the result says the same):

- Encoder: ``ToolrouteEncoder``, a ``semantic_router.encoders.DenseEncoder`` subclass that wraps
  all-MiniLM-L6-v2 as published (``published_minilm()``: offline, 384-d unit rows; not
  toolroute's tool-tuned default), so the comparison isolates the router logic from the
  embedding model semantic-router's users would have.
- One ``Route`` per tool, named by the tool name, with one utterance: ``"<name>: <description>"``
  (the raw name, not split; the description as given).
- No thresholds: ``confidence_threshold=None`` on the router and on every route, which in the
  installed API (1.x ``BaseRouter._bar`` / ``_choose``) means every route passes, so it never
  abstains. No calibrator (``fit`` is not called).
- Router: ``IndexedRouter(encoder, routes, index=LocalIndex(), top_k=k, aggregation="mean")``;
  ranking from its public call ``router(query, limit=k)``, which returns the routes sorted by
  their aggregated score. ``top_k`` is the number of utterance neighbours the index returns; with
  one utterance per route ``top_k=k`` gives exactly the k best routes (the others score 0.0).
- Dense only by default. The hybrid router's default sparse encoder ``BM25Encoder()`` loads the
  ``google-bert/bert-base-uncased`` tokenizer from the Hugging Face hub, a download, so it is not
  used. ``run_hybrid`` is an optional variant: ``BM25Encoder`` with the same uncased WordPiece
  vocabulary read from toolroute's local MiniLM ``tokenizer.json`` (no download),
  ``HybridLocalIndex``, ``alpha=0.7`` (its default).
- Build time = constructing the router (encoding every route utterance, building the index,
  fitting the sparse encoder for the hybrid). Latency = one ``router(query, limit=k)`` call per
  query (query embedding included) after 10 warm-up queries.
"""

from __future__ import annotations

import time
from importlib import metadata
from typing import Any

from .peer import PeerResult, PeerUnavailable, time_queries

WARMUP = 10


def route_text(tool: dict[str, Any]) -> str:
    return f"{tool['name']}: {tool.get('description') or ''}"


def _import() -> Any:
    try:
        from semantic_router import IndexedRouter, Route
        from semantic_router.encoders import BM25Encoder, DenseEncoder
        from semantic_router.index import HybridLocalIndex, LocalIndex
        from semantic_router.tokenizers import PretrainedTokenizer
    except Exception as exc:
        raise PeerUnavailable(
            f"semantic-router import failed: {type(exc).__name__}: {exc}".splitlines()[0]
        ) from exc
    return (
        IndexedRouter,
        Route,
        DenseEncoder,
        BM25Encoder,
        LocalIndex,
        HybridLocalIndex,
        PretrainedTokenizer,
    )


def _encoder_class(DenseEncoder: Any) -> Any:
    import asyncio

    from pydantic import PrivateAttr  # installed with semantic-router

    class ToolrouteEncoder(DenseEncoder):  # type: ignore[misc, valid-type, unused-ignore]
        """semantic-router dense encoder wrapping toolroute's offline default embedder."""

        name: str = "toolroute-default"
        type: str = "toolroute"
        _embedder: Any = PrivateAttr(default=None)

        def __init__(self, embedder: Any, **kwargs: Any) -> None:
            super().__init__(name=str(getattr(embedder, "identity", "toolroute-default")), **kwargs)
            self._embedder = embedder

        def __call__(self, docs: list[Any]) -> list[list[float]]:
            vectors: list[list[float]] = self._embedder.embed([str(d) for d in docs]).tolist()
            return vectors

        async def acall(self, docs: list[Any]) -> list[list[float]]:
            return await asyncio.to_thread(self.__call__, docs)

    return ToolrouteEncoder


def _local_wordpiece(PretrainedTokenizer: Any, embedder: Any) -> Any:
    """The bert-base-uncased WordPiece tokenizer BM25Encoder wants, read from a local file.

    all-MiniLM-L6-v2 ships the same 30,522-token uncased vocabulary; toolroute keeps its
    ``tokenizer.json`` on disk (``embedder.tokenizer_path``).
    """
    from tokenizers import Tokenizer

    path = getattr(embedder, "tokenizer_path", None)
    if not path:
        raise PeerUnavailable("no local tokenizer.json for the hybrid router's BM25Encoder")

    class LocalWordPiece(PretrainedTokenizer):  # type: ignore[misc, valid-type, unused-ignore]
        def __init__(self, file: str) -> None:  # no super().__init__: it downloads
            self.add_special_tokens = False
            self.model_ident = f"file:{file}"
            self.pad = True
            self.tokenizer = Tokenizer.from_file(str(file))
            self.tokenizer.no_truncation()
            self.tokenizer.enable_padding(direction="right", pad_id=0)

    return LocalWordPiece(str(path))


def _run(
    tools: list[dict[str, Any]], queries: list[str], k: int, *, hybrid: bool, embedder: Any = None
) -> PeerResult:
    (
        IndexedRouter,
        Route,
        DenseEncoder,
        BM25Encoder,
        LocalIndex,
        HybridLocalIndex,
        PretrainedTokenizer,
    ) = _import()
    from .models import published_minilm

    version = metadata.version("semantic-router")
    embedder = embedder or published_minilm()
    encoder = _encoder_class(DenseEncoder)(embedder)
    k_eff = min(k, len(tools))
    routes = [
        Route(name=str(t["name"]), utterances=[route_text(t)], confidence_threshold=None)
        for t in tools
    ]
    sparse = None
    if hybrid:
        sparse = BM25Encoder(tokenizer=_local_wordpiece(PretrainedTokenizer, embedder))

    started = time.perf_counter()
    if hybrid:
        router = IndexedRouter(
            encoder,
            routes,
            index=HybridLocalIndex(),
            sparse_encoder=sparse,
            alpha=0.7,
            top_k=k_eff,
            aggregation="mean",
            confidence_threshold=None,
        )
    else:
        router = IndexedRouter(
            encoder,
            routes,
            index=LocalIndex(),
            top_k=k_eff,
            aggregation="mean",
            confidence_threshold=None,
        )
    build_s = time.perf_counter() - started

    def one(query: str) -> list[str]:
        picks = router(query, limit=k_eff)
        return [p.name for p in picks if p.name is not None]

    rankings, latencies = time_queries(one, queries, WARMUP)

    short = sum(len(r) < k_eff for r in rankings)
    mode = (
        "hybrid: HybridLocalIndex + BM25Encoder(k1=1.5, b=0.75) with the bert-base-uncased "
        "WordPiece vocab loaded from toolroute's local MiniLM tokenizer.json (the default "
        "BM25Encoder() would download google-bert/bert-base-uncased from the HF hub), alpha=0.7"
        if hybrid
        else "dense only, LocalIndex (the hybrid router's default BM25Encoder() downloads the "
        "google-bert/bert-base-uncased tokenizer from the HF hub, so it is not used)"
    )
    how = (
        f"semantic-router {version} IndexedRouter, encoder = DenseEncoder subclass wrapping "
        f"all-MiniLM-L6-v2 ({getattr(embedder, 'identity', '?')}); one Route per tool "
        "named by the tool name with one utterance '<name>: <description>' (raw name, description "
        "as given); confidence_threshold=None on router and routes (no bar: every route passes, "
        "never abstains), no fit/calibrator; "
        f"{mode}; top_k={k_eff} utterance neighbours, aggregation='mean'; ranking = "
        f"[c.name for c in router(query, limit={k_eff})]; build = router construction "
        f"(encode utterances + index); latency = one router call per query incl. query embedding, "
        f"{WARMUP} warm-up queries; {short} of {len(rankings)} queries returned fewer than "
        f"{k_eff} routes."
    )
    return PeerResult(rankings, latencies, build_s, version, how)


def run(
    tools: list[dict[str, Any]], queries: list[str], k: int, *, embedder: Any = None
) -> PeerResult:
    """Dense semantic-router (the comparison run); ``embedder`` defaults to toolroute's."""
    return _run(tools, queries, k, hybrid=False, embedder=embedder)


def run_hybrid(tools: list[dict[str, Any]], queries: list[str], k: int) -> PeerResult:
    """Optional variant: its hybrid router with an offline BM25 sparse encoder."""
    return _run(tools, queries, k, hybrid=True)

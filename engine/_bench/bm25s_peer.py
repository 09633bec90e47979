"""bm25s as the plain keyword control (docs/reference/peers-and-benchmarks.md §4.1, "name+desc").

Tool text = the tool name (any ``<server>__`` prefix removed) split on ``_ - . / :`` and
camelCase, plus the description, plus the server name when the tool dict has a ``server`` key
(LiveMCPBench). Tokenised with ``bm25s.tokenize(..., stopwords="en")``, lower-cased,
``[a-z0-9]+`` tokens (non-Latin text is dropped), no stemmer. ``BM25(k1=1.5, b=0.75)``
(method "lucene"). Queries are retrieved one at a time; the latency of each includes its
tokenisation.
"""

from __future__ import annotations

import re
import time
from importlib import metadata
from typing import Any

from .peer import PeerResult, PeerUnavailable, time_queries

TOKEN_PATTERN = r"[a-z0-9]+"
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEP = re.compile(r"[_\-./:\s]+")
WARMUP = 10


def split_name(name: str) -> str:
    """``"AclApi.add_mapping"`` -> ``"Acl Api add mapping"``."""
    words = [w for w in _SEP.split(name) if w]
    return " ".join(part for w in words for part in _CAMEL.split(w) if part)


def tool_text(tool: dict[str, Any]) -> str:
    name = str(tool.get("name", ""))
    server = tool.get("server")
    if server and name.startswith(f"{server}__"):
        name = name[len(server) + 2 :]
    parts = [split_name(name), str(tool.get("description") or "")]
    if server:
        parts.append(split_name(str(server)))
    return "\n".join(p for p in parts if p)


def run(tools: list[dict[str, Any]], queries: list[str], k: int) -> PeerResult:
    try:
        import bm25s
    except Exception as exc:  # pragma: no cover - depends on the environment
        raise PeerUnavailable(f"bm25s import failed: {type(exc).__name__}: {exc}") from exc
    version = metadata.version("bm25s")
    names = [str(t["name"]) for t in tools]
    k_eff = min(k, len(names))

    def tok(texts: list[str]) -> Any:
        return bm25s.tokenize(
            texts,
            lower=True,
            token_pattern=TOKEN_PATTERN,
            stopwords="en",
            return_ids=False,
            show_progress=False,
        )

    started = time.perf_counter()
    corpus_tokens = tok([tool_text(t) for t in tools])
    retriever = bm25s.BM25(k1=1.5, b=0.75)
    retriever.index(corpus_tokens, show_progress=False)
    build_s = time.perf_counter() - started
    vocab = retriever.vocab_dict

    def one(query: str) -> list[str]:
        q = [t for t in tok([query])[0] if t in vocab]
        if not q:  # nothing to score: every tool scores 0, keep catalogue order
            return names[:k_eff]
        docs, _scores = retriever.retrieve([q], k=k_eff, show_progress=False, n_threads=1)
        return [names[int(i)] for i in docs[0]]

    rankings, latencies = time_queries(one, queries, WARMUP)

    how = (
        f"bm25s {version} BM25(k1=1.5, b=0.75, method='lucene'); tool text = name (server prefix "
        "removed) split on _ - . / : and camelCase + description (+ server name when given); "
        "bm25s.tokenize(lower=True, token_pattern='[a-z0-9]+', stopwords='en'), no stemmer; "
        f"one query at a time via retriever.retrieve(k={k_eff}), query tokenisation included "
        f"in latency, {WARMUP} warm-up queries; queries with no indexed token return catalogue order."
    )
    return PeerResult(rankings, latencies, build_s, version, how)

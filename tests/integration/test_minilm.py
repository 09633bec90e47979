"""The bundled all-MiniLM-L6-v2 int8 embedder, run for real."""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from toolroute import (
    Catalog,
    EmbedderError,
    EngineConfig,
    ModelIntegrityError,
    ToolIndex,
    open_engine,
)
from toolroute._core.text import MODEL_TEXT_CHARS, bounded
from toolroute.providers import Embedder
from toolroute.providers._embedders import minilm as _minilm
from toolroute.providers._embedders.minilm import (
    MINILM_MODEL_SHA256,
    MINILM_TOKENIZER_SHA256,
    MiniLMEmbedder,
    default_embedder,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def emb() -> MiniLMEmbedder:
    return default_embedder()


def test_satisfies_the_embedder_protocol(emb: MiniLMEmbedder) -> None:
    assert isinstance(emb, Embedder)
    assert emb.dim == 384
    assert emb.max_batch == 16
    assert emb.identity == "all-MiniLM-L6-v2-int8:" + MINILM_MODEL_SHA256[:16]


def test_tokenizer_is_the_packaged_file(emb: MiniLMEmbedder) -> None:
    assert emb.tokenizer_path == Path(_minilm.__file__).parent / "tokenizer.json"


def test_shape_dtype_and_unit_norms(emb: MiniLMEmbedder) -> None:
    out = emb.embed(["send an email", "what is the weather in Paris?", "x"])
    assert out.shape == (3, 384)
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


def test_empty_list_gives_zero_rows(emb: MiniLMEmbedder) -> None:
    out = emb.embed([])
    assert out.shape == (0, 384)
    assert out.dtype == np.float32


def test_empty_strings_embed_to_unit_vectors(emb: MiniLMEmbedder) -> None:
    out = emb.embed(["", "hello", ""])
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(out[0], out[2], atol=1e-6)
    np.testing.assert_allclose(emb.embed([""])[0], out[0], atol=1e-5)


def test_same_text_gives_the_same_vector(emb: MiniLMEmbedder) -> None:
    text = "book a table for two at an italian restaurant"
    first = emb.embed([text])
    np.testing.assert_array_equal(first, emb.embed([text]))
    np.testing.assert_allclose(emb.embed([text, text])[1], first[0], atol=1e-5)


def test_long_texts_are_truncated_not_rejected(emb: MiniLMEmbedder) -> None:
    long_text = " ".join(["token"] * 2000)
    out = emb.embed([long_text, "short"])
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(emb.embed([long_text])[0], out[0], atol=1e-5)


def test_batches_restore_the_callers_order_and_match_single_calls() -> None:
    rng = random.Random(7)
    words = ["alpha", "beta", "tool", "search", "file", "weather", "flight", "hotel", "send"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 60))) for _ in range(75)]
    small_batches = MiniLMEmbedder(max_batch=4)  # many batches of mixed lengths
    batch = small_batches.embed(texts)
    singles = np.vstack([small_batches.embed([t]) for t in texts])
    np.testing.assert_allclose(batch, singles, atol=1e-5)
    np.testing.assert_allclose(default_embedder().embed(texts), singles, atol=1e-5)


def test_similar_sentences_are_closer_than_unrelated_ones(emb: MiniLMEmbedder) -> None:
    a, b, c = emb.embed(
        [
            "What's the weather like in Berlin tomorrow?",
            "Get the weather forecast for a city",
            "Transfer money between two bank accounts",
        ]
    )
    assert a @ b > a @ c + 0.2


def test_embeds_from_several_threads(emb: MiniLMEmbedder) -> None:
    texts = [f"query number {i}" for i in range(8)]
    expected = emb.embed(texts)
    results: dict[int, np.ndarray] = {}

    def run(i: int) -> None:
        results[i] = emb.embed([texts[i]])[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, row in results.items():
        np.testing.assert_allclose(row, expected[i], atol=1e-5)


# --- loading ----------------------------------------------------------------------------


def test_model_with_another_hash_raises_integrity_error(tmp_path: Path) -> None:
    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"not the model")
    found = hashlib.sha256(b"not the model").hexdigest()
    with pytest.raises(ModelIntegrityError) as info:
        MiniLMEmbedder(model_path=fake)
    message = str(info.value)
    assert str(fake) in message
    assert MINILM_MODEL_SHA256 in message
    assert found in message


def test_tokenizer_with_another_hash_raises_integrity_error(tmp_path: Path) -> None:
    fake = tmp_path / "tokenizer.json"
    fake.write_text("{}")
    with pytest.raises(ModelIntegrityError, match=MINILM_TOKENIZER_SHA256) as info:
        MiniLMEmbedder(tokenizer_path=fake)
    assert hashlib.sha256(b"{}").hexdigest() in str(info.value)


def test_hash_is_checked_against_the_expected_value_given(tmp_path: Path) -> None:
    # With the right expected hash the check passes and the runtime rejects the bytes:
    # proves the check compares against the argument, before anything is loaded.
    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"garbage model")
    with pytest.raises(EmbedderError, match="onnxruntime cannot load") as info:
        MiniLMEmbedder(model_path=fake, model_sha256=hashlib.sha256(b"garbage model").hexdigest())
    assert not isinstance(info.value, ModelIntegrityError)


def test_missing_file_raises_embedder_error_with_a_fix(tmp_path: Path) -> None:
    with pytest.raises(EmbedderError, match="reinstall") as info:
        MiniLMEmbedder(model_path=tmp_path / "absent.onnx")
    assert not isinstance(info.value, ModelIntegrityError)


def test_rejects_a_non_positive_batch() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        MiniLMEmbedder(max_batch=0)


def test_default_embedder_loads_once_under_concurrent_first_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[object] = []

    class SlowToLoad:
        def __init__(self) -> None:
            time.sleep(0.05)
            built.append(self)

    monkeypatch.setattr(_minilm, "_default", None)
    monkeypatch.setattr(_minilm, "MiniLMEmbedder", SlowToLoad)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(default_embedder())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1
    assert got == built * 8


def test_default_embedder_is_shared(emb: MiniLMEmbedder) -> None:
    assert default_embedder() is emb


# -- bounded work per text ----------------------------------------------------------------------

DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"


def _dataset_texts() -> list[str]:
    from toolroute import Catalog
    from toolroute._core.text import embedding_text

    texts: list[str] = []
    for folder in sorted(DATASETS.iterdir()):
        texts.extend(embedding_text(tool) for tool in Catalog.from_file(folder / "tools.json"))
        for queries in sorted(folder.glob("*queries*.json")):
            texts.extend(item["query"] for item in json.loads(queries.read_text("utf-8")))
    return texts


@pytest.mark.skipif(not DATASETS.is_dir(), reason="needs ../shared/datasets")
def test_the_character_bound_changes_nothing_the_model_reads_on_any_dataset() -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(_minilm._default_tokenizer_path()))
    tokenizer.no_padding()
    tokenizer.enable_truncation(128)
    texts = _dataset_texts()
    assert len(texts) > 20_000
    whole = tokenizer.encode_batch(texts)
    cut = tokenizer.encode_batch([bounded(t, MODEL_TEXT_CHARS) for t in texts])
    changed = [t[:80] for t, a, b in zip(texts, whole, cut, strict=True) if a.ids != b.ids]
    assert changed == []


def test_lone_surrogates_embed_as_replacement_characters(emb: MiniLMEmbedder) -> None:
    """What ``surrogateescape`` makes of a Latin-1 argument, or JSON's ``"\\udcff"``: once a
    ``TypeError`` from the tokenizer that switched semantic search off for the request."""
    texts = ["caf\udce9 weather forecast", "\udcff\udcfe", "\udcff weather"]
    out = emb.embed(texts)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    replaced = [t.replace("\udce9", "\ufffd").replace("\udcff", "\ufffd") for t in texts]
    np.testing.assert_array_equal(out, emb.embed([r.replace("\udcfe", "\ufffd") for r in replaced]))
    assert emb.token_counts(texts) == emb.token_counts([bounded(t, 100) for t in texts])


def test_a_query_with_lone_surrogates_is_ranked_with_embeddings(emb: MiniLMEmbedder) -> None:
    tools = Catalog.from_plain(
        [
            {"name": "get_forecast", "description": "Weather forecast for a city"},
            {"name": "send_email", "description": "Send an email message to a person"},
            {"name": "read_file", "description": "Read a file from disk \udcff"},
        ]
    )
    index = ToolIndex(tools, embedder=emb, cache=None)
    assert index.degraded_reason == ""  # a tool text with one embeds too
    query = b"caf\xe9 weather forecast".decode("utf-8", "surrogateescape")
    selection = index.select(query)
    assert selection.outcome == "applied", selection.reason
    assert selection.tool_ids[0] == "get_forecast"
    only = index.select("\udcff\udcfe")  # nothing else to read: no word, so nothing to rank
    assert (only.outcome, only.reason, only.tool_ids) == ("skipped", "no words in the query", ())


async def test_the_engine_ranks_a_query_with_lone_surrogates(emb: MiniLMEmbedder) -> None:
    tools = Catalog.from_plain(
        [
            {"name": "get_forecast", "description": "Weather forecast for a city"},
            {"name": "send_email", "description": "Send an email message to a person"},
        ]
    )
    # A deadline a loaded machine always meets: this is about the text, not the time.
    config = EngineConfig.from_mapping({"cache": False, "deadlines": {"embed_s": 60}})
    async with open_engine(tools, config=config, embedder=emb, decider=None) as engine:
        await engine.ready()
        selection = await engine.select("\udcff weather forecast")
    assert selection.outcome == "applied", selection.reason
    assert selection.tool_ids[0] == "get_forecast"


def test_a_2mb_text_embeds_as_its_bounded_prefix(emb: MiniLMEmbedder) -> None:
    huge = "please summarise this quarterly report for the board. " * 40_000
    assert len(huge) > 2_000_000
    prefix = bounded(huge, MODEL_TEXT_CHARS)
    assert len(prefix) <= MODEL_TEXT_CHARS
    np.testing.assert_array_equal(emb.embed([huge]), emb.embed([prefix]))
    np.testing.assert_allclose(emb.embed([huge, "x"])[0], emb.embed([prefix])[0], atol=1e-5)
    # the model reads 128 word pieces: the prefix holds them all, so it is the same vector
    np.testing.assert_allclose(emb.embed([huge[:2_000]])[0], emb.embed([prefix])[0], atol=1e-6)


# -- both cores: parallel sessions ----------------------------------------------------------------


def test_two_sessions_give_the_vectors_of_one_from_many_threads(emb: MiniLMEmbedder) -> None:
    two = MiniLMEmbedder(sessions=2, threads=1)
    assert two.sessions == 2
    texts = [f"book {n} tickets to the opera" for n in range(24)]
    expected = emb.embed(texts)
    results: dict[int, np.ndarray] = {}

    def worker(part: int) -> None:
        results[part] = two.embed(texts[part::4])

    threads = [threading.Thread(target=worker, args=(part,)) for part in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for part in range(4):
        np.testing.assert_allclose(results[part], expected[part::4], atol=1e-5)


def test_rejects_fewer_than_one_session() -> None:
    with pytest.raises(ValueError, match="sessions must be at least 1, got 0"):
        MiniLMEmbedder(sessions=0)


def test_token_ids_are_checked_before_the_model_runs(emb: MiniLMEmbedder) -> None:
    with pytest.raises(ValueError, match=r"expected \(n, <= 128\) token ids"):
        emb.embed_token_ids(np.zeros((2, 129), dtype=np.int64))
    with pytest.raises(ValueError, match="token ids must be below 30522"):
        emb.embed_token_ids(np.array([[101, 40_000, 102]]))
    assert emb.embed_token_ids(np.zeros((0, 3), dtype=np.int64)).shape == (0, 384)

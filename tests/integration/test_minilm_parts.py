"""The bundled MiniLM reads a long request by parts: its token counts and the fused vector."""

from __future__ import annotations

import numpy as np
import pytest

from toolroute._core.protocols import CountsTokens
from toolroute._core.recall.parts import plan_parts, request_vectors
from toolroute._core.text import MODEL_TEXT_CHARS
from toolroute.providers._embedders.minilm import MiniLMEmbedder, default_embedder

pytestmark = pytest.mark.slow

STEPS = " ".join(
    f"Step {i}: open the quarterly sales spreadsheet and copy the totals of region {i}."
    for i in range(12)
)
LONG = STEPS + " Finally, send the summary by email to the finance team."


@pytest.fixture(scope="module")
def emb() -> MiniLMEmbedder:
    return default_embedder()


def test_counts_word_pieces_past_the_window(emb: MiniLMEmbedder) -> None:
    assert isinstance(emb, CountsTokens)
    assert emb.reach == 126
    (short, long_count) = emb.token_counts(["send an email", LONG])
    assert short == 3
    assert long_count > emb.reach  # the window would cut it; the count does not


def test_counting_reads_no_more_than_the_model_text_bound(emb: MiniLMEmbedder) -> None:
    (count,) = emb.token_counts(["word " * (MODEL_TEXT_CHARS // 2)])
    assert count <= MODEL_TEXT_CHARS // 5 + 1


def test_a_short_request_gets_exactly_the_models_vector(emb: MiniLMEmbedder) -> None:
    text = "what is the weather in Paris?"
    np.testing.assert_array_equal(request_vectors(emb, [text]), emb.embed([text]))


def test_a_long_request_is_read_by_parts_into_one_unit_vector(emb: MiniLMEmbedder) -> None:
    plan = plan_parts([LONG], emb.token_counts, emb.reach)
    assert plan.split
    assert all(n <= emb.reach for n in emb.token_counts(list(plan.texts)))
    whole = request_vectors(emb, [LONG, "send an email"])
    assert whole.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(whole, axis=1), 1.0, atol=1e-5)
    truncated = emb.embed([LONG])[0]
    email = emb.embed(["send the summary by email to the finance team"])[0]
    # The last step, past the window, now counts: the vector moves towards it.
    assert float(whole[0] @ email) > float(truncated @ email)

"""Spelling correction: a misspelled request word is read as the catalogue's word."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolroute import Catalog, ToolIndex
from toolroute._core.recall.keyword import KeywordIndex
from toolroute._core.recall.spelling import MAX_LOOKUPS, corrected, known_words
from toolroute._core.text import KEYWORD_TEXT_CHARS, tokenize
from toolroute.testing import ScriptedEmbedder

TEXTS = (
    "get_weather: current weather and forecast for a city",
    "get_stock_price: latest stock price of a ticker",
    "list_links: links found on a web page",
    "restaurant_search: find restaurants nearby",
)


def spelling(*texts: str) -> Callable[[str], str]:
    """Correction toward a keyword index over ``texts``, one document each."""
    index = KeywordIndex([tokenize(text) for text in texts])
    return lambda request: corrected(request, index)


spelled = spelling(*TEXTS)


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("the wether in Paris", "the weather in Paris"),  # a letter dropped
        ("the waether in Paris", "the weather in Paris"),  # two swapped
        ("the weathher in Paris", "the weather in Paris"),  # one doubled
        ("the weatjer in Paris", "the weather in Paris"),  # one changed
        ("Forcast for Oslo", "forecast for Oslo"),  # capitalised
        ("stok pirce of ACME", "stock price of ACME"),
        ("resturants nearby", "restaurants nearby"),  # folded as the index folds it
    ],
)
def test_a_word_one_edit_from_a_catalogue_word_is_read_as_it(written: str, read: str) -> None:
    assert spelled(written) == read


@pytest.mark.parametrize(
    "written",
    [
        "show the lines",  # an English word one edit from "links" stays itself
        "AAPL and MSFT",  # acronyms, tickers
        "call getWether now",  # an identifier
        "wthr",  # too short to tell
        "the weahtre",  # two edits away
        "Wetter in München",  # other scripts, and words no edit brings to the catalogue
        "",
    ],
)
def test_what_is_not_a_typo_of_a_catalogue_word_is_left_as_written(written: str) -> None:
    assert spelled(written) is written


def test_a_decomposed_accent_does_not_leave_an_ascii_word_to_correct() -> None:
    # "stocké" written with a combining accent (as macOS file names and some pastes are) is
    # the same word as the composed one: not the ASCII "stocke" one edit from "stock".
    decomposed = "cours stocke\u0301 hier"
    assert spelled(decomposed) is decomposed
    assert spelled("cours stocké hier") == "cours stocké hier"


def test_informal_words_are_not_read_as_other_words() -> None:
    chat = spelling("post a chat message", "count the tics", "ace of spades")
    assert chat("whats new") == "whats new"  # "what" with an s: English, not "chats"
    assert chat("my pics") == "my pics"  # folded to three letters: too short to tell
    assert chat("acme corp") == "acme corp"  # never read as a shorter word ("ace")


def test_the_word_most_tools_use_wins_a_tie() -> None:
    assert spelling("cart", "cart", "card")("carx") == "cart"
    assert spelling("cart", "card", "card")("carx") == "card"


def test_the_work_per_request_is_bounded() -> None:
    typos = " ".join(["wether"] * (MAX_LOOKUPS + 3))
    assert spelled(typos).split().count("weather") == MAX_LOOKUPS
    past = "x " * KEYWORD_TEXT_CHARS + "wether"
    assert spelled("wether " + past) == "weather " + past


def test_the_english_words_come_with_the_package() -> None:
    words = known_words()
    assert {"weather", "lines", "price"} <= words
    assert all(len(w) >= 4 and w.isascii() and w.isalpha() for w in words)


_TEXT = st.text(st.sampled_from("wether stok pirce linsk ab AAPL é 漢 -_.,!?\n 0123"), max_size=80)


@given(_TEXT)
def test_only_words_change_and_a_corrected_request_stays_corrected(written: str) -> None:
    read = spelled(written)
    assert re.sub(r"[A-Za-z]+", "", read) == re.sub(r"[A-Za-z]+", "", written)
    assert len(re.findall(r"[^\W\d_]+", read)) == len(re.findall(r"[^\W\d_]+", written))
    assert spelled(read) == read


CATALOG = Catalog.from_plain(
    [{"name": text.split(":")[0], "description": text.split(": ")[1]} for text in TEXTS]
)


def test_a_tool_index_ranks_a_misspelled_request_as_the_right_one() -> None:
    index = ToolIndex(CATALOG, embedder=None)
    request = "wether forcast"
    assert index.search(request, 1).tool_ids == ("get_weather",)
    assert index.search_many([request], 1)[0].tool_ids == ("get_weather",)
    assert index.select(request, max_tools=1).tool_ids == ("get_weather",)
    as_written = ToolIndex(CATALOG, embedder=None, correct_spelling=False)
    assert as_written.search(request, 1).tool_ids == ()


@pytest.mark.parametrize("correct", [True, False])
def test_the_model_reads_the_corrected_request(correct: bool) -> None:
    model = ScriptedEmbedder(dim=8)
    index = ToolIndex(CATALOG, embedder=model, cache=None, correct_spelling=correct)
    index.search("wether forcast")
    index.select("the stok pirce")
    read = (
        ["weather forecast", "the stock price"] if correct else ["wether forcast", "the stok pirce"]
    )
    assert model.texts[-2:] == read

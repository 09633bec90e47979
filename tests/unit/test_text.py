"""Tokenisation and the indexed text of a tool (engine/_text.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from toolroute import Catalog, Tool, ToolIndex
from toolroute._core.text import (
    KEYWORD_TEXT_CHARS,
    MODEL_TEXT_CHARS,
    STOPWORDS,
    bounded,
    embedding_text,
    keyword_document,
    split_identifier,
    tool_text,
)
from toolroute.evaluate import tokenize

# -- split_identifier ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("read_file", ["read", "file"]),
        ("__private__name__", ["private", "name"]),
        ("readFile", ["read", "File"]),
        ("ReadFileContents", ["Read", "File", "Contents"]),
        ("getHTTPResponse", ["get", "HTTP", "Response"]),
        ("getHTTPResponse_v2", ["get", "HTTP", "Response", "v2"]),
        ("parseURL", ["parse", "URL"]),
        ("HTMLParser", ["HTML", "Parser"]),
        ("base64Encode", ["base64", "Encode"]),
        ("sha256", ["sha256"]),
        ("v2_api", ["v2", "api"]),
        ("math.factorial", ["math", "factorial"]),
        ("spotify.playlist.addTrack", ["spotify", "playlist", "add", "Track"]),
        ("kebab-case-name", ["kebab", "case", "name"]),
        ("", []),
        ("___", []),
    ],
)
def test_split_identifier_splits_snake_camel_acronyms_digits_and_dots(
    name: str, parts: list[str]
) -> None:
    assert split_identifier(name) == parts


def test_split_identifier_keeps_case() -> None:
    assert split_identifier("XMLHttpRequest") == ["XML", "Http", "Request"]


# -- tokenize -----------------------------------------------------------------------------------


def test_tokenize_lower_cases() -> None:
    assert tokenize("Weather FORECAST Report") == ["weather", "forecast", "report"]


def test_tokenize_drops_stopwords() -> None:
    assert tokenize("What is the weather in the city") == ["weather", "city"]
    assert all(word not in tokenize(word) for word in STOPWORDS)


def test_tokenize_splits_identifiers_in_text() -> None:
    assert tokenize("call sendEmailMessage or read_file") == [
        "call",
        "send",
        "email",
        "message",
        "read",
        "file",
    ]


def test_tokenize_splits_acronyms_and_folds_their_case() -> None:
    assert tokenize("getHTTPResponse") == ["http", "response"]  # "get" is a stopword


def test_tokenize_keeps_unicode_letters() -> None:
    assert tokenize("café crème") == ["café", "crème"]
    assert tokenize("Zürich Straße") == ["zürich", "straße"]


def test_tokenize_keeps_combining_marks_inside_their_word() -> None:
    # Devanagari vowel signs, Arabic harakat and a decomposed accent are marks, not letters:
    # a word must not break into fragments at each one.
    assert tokenize("मौसम का पूर्वानुमान") == ["मौसम", "का", "पूर्वानुमान"]
    assert tokenize("الطَّقْس") == ["الطَّقْس"]
    assert split_identifier("मौसम_पूर्वानुमान") == ["मौसम", "पूर्वानुमान"]


def test_tokenize_reads_decomposed_and_full_width_text_as_its_usual_form() -> None:
    # NFKC: "e" + U+0301 (macOS file names, some pasted text) is "é"; full-width letters and
    # half-width katakana (typed with Japanese input methods) are the ordinary ones.
    assert tokenize("e\u0301te\u0301 cafe\u0301") == tokenize("été café") == ["été", "café"]
    assert tokenize("ＰＤＦを読む") == tokenize("PDFを読む")
    assert tokenize("ﾌｧｲﾙ") == tokenize("ファイル")


def test_a_devanagari_request_finds_its_tool_by_keyword() -> None:
    catalog = Catalog.from_plain(
        [
            {"name": "send_email", "description": "किसी को ईमेल भेजें"},
            {"name": "get_weather", "description": "शहर के मौसम का पूर्वानुमान"},
        ]
    )
    index = ToolIndex(catalog, embedder=None, cache=None)
    assert index.select("कल दिल्ली में मौसम कैसा रहेगा").tool_ids == ("get_weather",)


def test_tokenize_splits_cjk_into_characters() -> None:
    assert tokenize("搜索文件") == ["搜", "索", "文", "件"]
    assert tokenize("ファイル") == ["フ", "ァ", "イ", "ル"]


def test_tokenize_separates_latin_runs_from_cjk_characters() -> None:
    assert tokenize("PDF文件") == ["pdf", "文", "件"]


def test_tokenize_drops_stopwords_glued_to_cjk() -> None:
    # Chinese text often glues English words to Han characters; the docstring promises
    # stopwords are removed, so "the" must not survive just because "文件" follows it.
    assert tokenize("the文件") == ["文", "件"]


def test_tokenize_splits_identifiers_glued_to_cjk() -> None:
    assert tokenize("readFile文件") == ["read", "file", "文", "件"]


@pytest.mark.parametrize("text", ["", "   ", "🎉🔥✨", "!?.,;:", "___", "--> <--", "🎉 ... 🎉"])
def test_tokenize_emoji_and_punctuation_only_gives_nothing(text: str) -> None:
    assert tokenize(text) == []


def test_tokenize_keeps_words_next_to_emoji() -> None:
    assert tokenize("🎉party🎉") == ["party"]


@pytest.mark.parametrize(
    ("word", "token"),
    [
        ("files", "file"),
        ("searches", "search"),
        ("boxes", "box"),
        ("queries", "query"),
        ("messages", "message"),
        ("dishes", "dish"),
        ("status", "status"),
        ("class", "class"),
        ("address", "address"),
        ("gas", "gas"),
        ("file", "file"),
    ],
)
def test_tokenize_folds_plurals(word: str, token: str) -> None:
    assert tokenize(word) == [token]


def test_tokenize_plural_and_singular_meet() -> None:
    assert tokenize("Files") == tokenize("file")
    assert tokenize("SEARCHES") == tokenize("search")


def test_tokenize_leaves_digit_words_unstemmed() -> None:
    assert tokenize("v2s mp3s") == ["v2s", "mp3s"]


def test_tokenize_custom_stopwords() -> None:
    assert tokenize("the weather", stopwords=frozenset({"weather"})) == ["the"]


# -- tool_text ----------------------------------------------------------------------------------


def nested_schema(levels: int) -> dict[str, Any]:
    """``levels`` objects nested by ``field{n}``, each with a description ``about level n``."""
    schema: dict[str, Any] = {"type": "string"}
    for level in range(levels, 0, -1):
        schema = {
            "type": "object",
            "properties": {f"field{level}Name": {**schema, "description": f"about level {level}"}},
        }
    return schema


def test_tool_text_has_split_name_title_server_and_description() -> None:
    tool = Tool(
        id="x",
        name="sendEmail_now",
        description="Send an email message.",
        server="mailServer",
        title="Email sender",
    )
    assert tool_text(tool).split("\n") == [
        "send Email now",
        "Email sender",
        "mail Server",
        "Send an email message.",
    ]


def test_tool_text_includes_parameter_names_and_descriptions() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "cityName": {"type": "string", "description": "The city to look up"},
            "unit_system": {"type": "string"},
        },
    }
    text = tool_text(Tool("w", "get_weather", "Weather now", parameters=parameters))
    lines = text.split("\n")
    assert "city Name" in lines
    assert "The city to look up" in lines
    assert "unit system" in lines


def test_tool_text_includes_nested_parameters_up_to_the_depth() -> None:
    tool = Tool("t", "t", parameters=nested_schema(4))
    text = tool_text(tool)
    for level in range(1, 5):
        assert f"field{level} Name" in text
        assert f"about level {level}" in text


def test_tool_text_reads_parameters_behind_local_refs_and_unions() -> None:
    # What pydantic (FastMCP, OpenAPI generators) emits: models under $defs (or OpenAPI's
    # definitions), reached by $ref, optional ones through anyOf with null.
    parameters = {
        "$defs": {
            "Ticket": {
                "type": "object",
                "properties": {
                    "priority": {"type": "string", "description": "Urgency of the request"},
                    "parent": {"$ref": "#/$defs/Ticket"},  # recursive
                },
            },
            "Owner": {"type": "object", "properties": {"teamName": {"type": "string"}}},
        },
        "definitions": {"Tag": {"type": "object", "properties": {"colour": {"type": "string"}}}},
        "type": "object",
        "properties": {
            "ticket": {"$ref": "#/$defs/Ticket"},
            "owner": {"anyOf": [{"$ref": "#/$defs/Owner"}, {"type": "null"}]},
            "tags": {"type": "array", "items": {"allOf": [{"$ref": "#/definitions/Tag"}]}},
            "missing": {"$ref": "#/$defs/Nowhere"},
            "remote": {"$ref": "https://example.com/schema.json"},
        },
    }
    lines = tool_text(Tool("t", "create_ticket", parameters=parameters)).split("\n")
    for line in ("priority", "Urgency of the request", "team Name", "colour", "missing"):
        assert line in lines
    assert lines.count("priority") <= 4  # the recursive ref ends at the depth bound


def test_tool_text_stops_at_the_depth_bound() -> None:
    tool = Tool("t", "t", parameters=nested_schema(6))
    default = tool_text(tool)
    assert "field4 Name" in default
    assert "field5 Name" not in default
    assert "about level 5" not in default
    shallow = tool_text(tool, schema_depth=2)
    assert "field2 Name" in shallow
    assert "about level 2" in shallow
    assert "field3 Name" not in shallow
    assert "about level 3" not in shallow
    assert tool_text(tool, schema_depth=0) == "t"


def test_tool_text_reads_array_items() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "recipients": {
                "type": "array",
                "description": "Who gets it",
                "items": {
                    "type": "object",
                    "properties": {"emailAddress": {"type": "string", "description": "An address"}},
                },
            }
        },
    }
    text = tool_text(Tool("send", "send", parameters=parameters))
    assert "recipients" in text
    assert "Who gets it" in text
    assert "email Address" in text
    assert "An address" in text


def test_tool_text_array_items_count_against_the_depth() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "rows": {"type": "array", "items": {"type": "object", "properties": {"cell": {}}}}
        },
    }
    tool = Tool("t", "t", parameters=parameters)
    assert "cell" in tool_text(tool, schema_depth=3)
    assert "cell" not in tool_text(tool, schema_depth=2)  # properties -> items -> properties


def test_tool_text_ignores_malformed_schema_parts() -> None:
    parameters = {"properties": {"a": "not a schema", "b": {"description": 5}}, "items": [1]}
    assert tool_text(Tool("t", "t", parameters=parameters)).split("\n") == ["t", "a", "b"]


def test_embedding_text_has_split_name_description_and_top_level_parameter_names() -> None:
    tool = Tool("w", "get_weather", "Weather now", parameters=nested_schema(2))
    assert embedding_text(tool) == "get weather: Weather now (field1 Name)"
    assert embedding_text(Tool("p", "ping")) == "ping: "


def test_keyword_document_counts_the_name_twice() -> None:
    doc = keyword_document(Tool("s", "search_files", "Find documents"))
    assert doc.count("search") == 2
    assert doc.count("file") == 2
    assert doc.count("document") == 1


# -- bounded work per text ----------------------------------------------------------------------


def test_bounded_returns_a_short_text_itself() -> None:
    text = "find a flight to Paris"
    assert bounded(text, len(text)) is text


def test_bounded_cut_drops_a_partial_last_word() -> None:
    assert bounded("send an email now", 11) == "send an"  # "email" would be cut to "em"
    assert bounded("send an email now", 13) == "send an email"  # the cut falls on a space


def test_bounded_cuts_a_word_longer_than_the_tail_where_it_falls() -> None:
    blob = "x" * 500
    assert bounded(blob, 100) == "x" * 100


def test_bounded_replaces_lone_surrogates_which_no_tokeniser_accepts() -> None:
    argv = b"caf\xe9 forecast".decode("utf-8", "surrogateescape")  # "caf\udce9 forecast"
    assert bounded(argv, 100) == "caf\ufffd forecast"
    assert bounded("\udcff weather \ud800", 100) == "\ufffd weather \ufffd"
    assert bounded("\udcff" * 10, 4) == "\ufffd" * 4  # cut, then replaced
    bounded(argv, 100).encode("utf-8")  # valid text now
    text = "café ☀ 天气 😀"  # valid non-ASCII (a pair, not a lone surrogate) stays itself
    assert bounded(text, 100) is text
    assert tokenize("\udcff weather") == tokenize("weather")


def test_tokenize_reads_only_the_bounded_prefix() -> None:
    filler = "weather " * (KEYWORD_TEXT_CHARS // 8)
    assert "weather" in tokenize(filler + "zebra")
    assert "zebra" not in tokenize(filler + "zebra")
    huge = "word " * 1_000_000
    assert tokenize(huge) == tokenize(huge[:KEYWORD_TEXT_CHARS])
    assert len(tokenize(huge)) <= KEYWORD_TEXT_CHARS // 5 + 1


def test_split_identifier_reads_only_the_bounded_prefix() -> None:
    assert len(split_identifier("ab_" * 1_000_000)) <= KEYWORD_TEXT_CHARS // 3 + 1


def test_a_huge_description_is_cut_in_both_texts() -> None:
    tool = Tool("big", "read_file", "Reads a file. " + "lorem ipsum " * 500_000)
    assert len(tool_text(tool)) <= KEYWORD_TEXT_CHARS
    assert len(embedding_text(tool)) <= MODEL_TEXT_CHARS
    assert embedding_text(tool).startswith("read file: Reads a file. lorem ipsum")
    assert tool_text(tool).startswith("read file\nReads a file.")


def test_a_huge_schema_stops_the_tool_text_walk() -> None:
    properties = {f"field_{i}": {"description": f"value number {i}"} for i in range(100_000)}
    tool = Tool("wide", "wide", "Many fields", parameters={"properties": properties})
    text = tool_text(tool)
    assert len(text) <= KEYWORD_TEXT_CHARS
    assert text.startswith("wide\nMany fields\nfield 0\nvalue number 0")
    assert len(embedding_text(tool)) <= MODEL_TEXT_CHARS


def test_texts_within_the_bounds_are_unchanged_by_them() -> None:
    tool = Tool("w", "get_weather", "Weather " * 400, parameters=nested_schema(2))
    assert embedding_text(tool) == f"get weather: {'Weather ' * 400} (field1 Name)"
    assert tool_text(tool).split("\n")[1] == "Weather " * 400


def test_the_hashing_embedder_reads_the_bounded_prefix() -> None:
    from toolroute.providers import HashingEmbedder

    embedder = HashingEmbedder()
    filler = "weather " * (KEYWORD_TEXT_CHARS // 8)
    np.testing.assert_array_equal(embedder.embed([filler + "zebra"]), embedder.embed([filler]))

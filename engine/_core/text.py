"""Text shared by keyword search and dedup: tokenisation and the indexed text of a tool.

Every text is cut to a bounded number of characters before any tokeniser sees it (and its lone
surrogates, which no UTF-8 tokeniser accepts, become U+FFFD), so one
pasted document costs a bounded amount of work (measured over every dataset in
``../shared/datasets`` with ``tests/bench/bench_load.py --bounds``):

- ``MODEL_TEXT_CHARS`` (4,096) for the embedding model, which reads only its first 128
  word pieces: the most characters any dataset text needs to fill them is 1,060
  (LiveMCPBench's tool texts; English prose needs ~4-8 characters a piece), so the cut
  changes no text the model reads, with a margin of almost 4x for denser text.
- ``KEYWORD_TEXT_CHARS`` (16,384) for keyword search: 4x the longest tool text (3,976) and
  above every request but one (LiveMCPBench's 18,686-character dev request, a miss at any
  bound), so a 2 MB request tokenises in ~3 ms, not seconds. 32,768 would change nothing
  but costs ~6 ms of GIL-holding work, more than the 5 ms event-loop lag budget.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

from .catalog.catalog import Tool

# Runs of Unicode letters and digits; "_", punctuation and whitespace separate them.
_WORD = re.compile(r"[^\W_]+")
# camelCase and acronym boundaries: "getHTTPResponse" -> get HTTP Response.
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
# Scripts written without spaces: each character is a token, so a Chinese description is
# not one giant word that can never match.
_UNSPACED_CHARS = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_UNSPACED = re.compile(f"[{_UNSPACED_CHARS}]")
_PIECES = re.compile(f"[{_UNSPACED_CHARS}]|[^{_UNSPACED_CHARS}]+")

#: Characters of any text the embedding model is given (see the module docstring).
MODEL_TEXT_CHARS = 4096
#: Characters of any text the keyword tokeniser reads (see the module docstring).
KEYWORD_TEXT_CHARS = 16384
# A cut inside a word drops the partial word, unless the word is longer than this.
_WORD_TAIL = 64
# Lone surrogates: what ``surrogateescape`` makes of undecodable bytes (argv, file names), or
# JSON's "\udcff"; not Unicode scalar values, so UTF-8 tokenisers refuse the whole text.
_SURROGATE = re.compile("[\ud800-\udfff]")

STOPWORDS = frozenset(
    """
    a an the and or but if then else for of in on to from by with as at is are was were be been
    it this that these those not no can could should would may might do does did have has had
    you your i me my we our us he she his her they them their its am being into about over
    so than too very just also any all some each other such what which who whom whose when
    where why how there here please want need like get let make use using via will shall
    """.split()
)


def bounded(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, without a partial last word, with each
    lone surrogate replaced by U+FFFD.

    A cut that falls inside a word drops that word (unless it is longer than 64 characters,
    as in a base64 blob), so a bounded text never ends in a fragment that reads as a
    different word. Keyword search, the bundled embedders (and their fast tier) and the
    tool texts any embedder is given (``embedding_text``) read their text through here, so
    one undecodable character (``"caf\\udce9"`` from a ``surrogateescape``-decoded
    argument, ``"\\udcff"`` in JSON) costs that character, not the request's semantic
    search. Texts within the limit and without surrogates come back unchanged (the same
    object).
    """
    if len(text) > limit:
        cut = text[:limit]
        if not text[limit].isspace():
            space = max(cut.rfind(" ", limit - _WORD_TAIL), cut.rfind("\n", limit - _WORD_TAIL))
            if space > 0:
                cut = cut[:space]
        text = cut
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub("\ufffd", text)


def _words(text: str) -> list[str]:
    """The words of ``text``: runs of letters and digits, with the combining marks on them
    (a Devanagari vowel sign, Arabic harakat, a decomposed accent) inside their word."""
    return _WORD.findall(text) if text.isascii() else _marked_word().findall(text)


@lru_cache(maxsize=1)
def _marked_word() -> re.Pattern[str]:
    # Marks are not word characters to ``re``: those of the Basic Multilingual Plane (every
    # script in common use) make one class, built on the first text that is not ASCII.
    marks = "".join(
        chr(c) for c in range(0x300, 0x10000) if unicodedata.category(chr(c)).startswith("M")
    )
    return re.compile(f"[^\\W_]+(?:[{marks}]+[^\\W_]*)*")


def has_words(text: str) -> bool:
    """Whether ``text`` holds a word (a letter or digit of any script): a request of
    punctuation, symbols or emoji alone names no tool, so there is nothing to rank it by."""
    return _WORD.search(text) is not None


def split_identifier(name: str) -> list[str]:
    """``"getHTTPResponse_v2"`` -> ``["get", "HTTP", "Response", "v2"]`` (case kept).

    Reads at most the first ``KEYWORD_TEXT_CHARS`` characters.
    """
    parts: list[str] = []
    for word in _words(bounded(name, KEYWORD_TEXT_CHARS)):
        parts.extend(part for part in _CAMEL.split(word) if part)
    return parts


def tokenize(text: str, *, stopwords: frozenset[str] = STOPWORDS) -> list[str]:
    """Lower-cased word tokens of ``text`` with identifiers split and stopwords removed.

    Reads at most the first ``KEYWORD_TEXT_CHARS`` characters (see ``bounded``), each word
    in its NFKC form: a decomposed accent is the composed letter, full-width letters and
    half-width katakana are the usual ones.
    """
    tokens: list[str] = []
    for word in _words(bounded(text, KEYWORD_TEXT_CHARS)):
        if stopwords is STOPWORDS:
            tokens.extend(_word_tokens(word))  # words repeat: the common case is cached
        else:
            tokens.extend(
                t for w in _nfkc_words(word) for t in _split_word(w) if t not in stopwords
            )
    return tokens


@lru_cache(maxsize=65536)
def _word_tokens(word: str) -> tuple[str, ...]:
    return tuple(t for w in _nfkc_words(word) for t in _split_word(w) if t not in STOPWORDS)


def _nfkc_words(word: str) -> list[str]:
    """``word`` in NFKC form, as words again (``"ＰＤＦ"`` -> ``["PDF"]``; a form may split)."""
    if word.isascii() or unicodedata.is_normalized("NFKC", word):
        return [word]
    return _words(unicodedata.normalize("NFKC", word))


def _split_word(word: str) -> list[str]:
    """One run of letters and digits -> normalised parts (CJK characters stand alone)."""
    parts: list[str] = []
    for piece in _PIECES.findall(word) if _UNSPACED.search(word) else (word,):
        if _UNSPACED.match(piece):
            parts.append(piece)
            continue
        for part in _CAMEL.split(piece) if not piece.islower() else (piece,):
            token = _normal(part)
            if token:
                parts.append(token)
    return parts


@lru_cache(maxsize=65536)
def _normal(word: str) -> str:
    return stem(word.lower())


def stem(word: str) -> str:
    """Harman's S-stemmer (plus sibilant plurals): "files" -> "file", "searches" -> "search"."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and not word.endswith(("eies", "aies")):
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    if word.endswith("es") and not word.endswith(("aes", "ees", "oes")):
        return word[:-1]
    if word.endswith("s") and not word.endswith(("us", "ss")):
        return word[:-1]
    return word


def tool_text(tool: Tool, *, schema_depth: int = 4) -> str:
    """The text a tool is found by: split name, server, description, parameter names and
    parameter descriptions (nested objects and array items up to ``schema_depth``).

    At most about ``KEYWORD_TEXT_CHARS`` characters: the schema walk stops once the text is
    that long, so a huge description or schema costs no more than the keyword index reads.
    """
    parts: list[str] = []
    size = 0
    for part in _tool_parts(tool, schema_depth):
        part = bounded(part, KEYWORD_TEXT_CHARS - size)
        parts.append(part)
        size += len(part) + 1
        if size >= KEYWORD_TEXT_CHARS:
            break
    return "\n".join(parts)


def _tool_parts(tool: Tool, schema_depth: int) -> Iterator[str]:
    yield " ".join(split_identifier(tool.name))
    if tool.title:
        yield tool.title
    if tool.server:
        yield " ".join(split_identifier(tool.server))
    if tool.description:
        yield tool.description
    yield from schema_text(tool.parameters, depth=schema_depth)


def schema_text(schema: Mapping[str, Any], *, depth: int) -> Iterator[str]:
    """Parameter names (split) and descriptions of a JSON Schema, breadth-limited by depth.

    Local ``$ref`` s (``#/$defs/...``, ``#/definitions/...``: pydantic's and OpenAPI's models)
    are followed, each once, and ``anyOf``/``oneOf``/``allOf`` members read as the schema
    itself; a remote or missing reference reads as nothing.
    """
    return _schema_parts(schema, depth, schema, set())


_UNIONS = ("anyOf", "oneOf", "allOf")


def _schema_parts(
    schema: object, depth: int, root: Mapping[str, Any], seen: set[str]
) -> Iterator[str]:
    if depth <= 0:
        return
    schema = _referenced(schema, root, seen)
    if not isinstance(schema, Mapping):
        return
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for name, spec in properties.items():
            yield " ".join(split_identifier(str(name)))
            if isinstance(spec, Mapping):
                description = spec.get("description")
                if isinstance(description, str) and description:
                    yield description
                yield from _schema_parts(spec, depth - 1, root, seen)
    items = schema.get("items")
    if isinstance(items, Mapping):
        yield from _schema_parts(items, depth - 1, root, seen)
    for key in _UNIONS:
        members = schema.get(key)
        if isinstance(members, list):
            for member in members:
                yield from _schema_parts(member, depth, root, seen)


def _referenced(schema: object, root: Mapping[str, Any], seen: set[str]) -> object:
    """The schema a local ``$ref`` points to (a JSON pointer into ``root``); ``None`` for a
    reference followed already (a recursive model, or one used twice: its text is in once),
    remote or missing. Any other schema is itself."""
    ref = schema.get("$ref") if isinstance(schema, Mapping) else None
    if not isinstance(ref, str):
        return schema
    if ref in seen or not ref.startswith("#/"):
        return None
    seen.add(ref)
    target: object = root
    for part in ref[2:].split("/"):
        key = part.replace("~1", "/").replace("~0", "~")
        target = target.get(key) if isinstance(target, Mapping) else None
    return target


def embedding_text(tool: Tool, extra: str = "") -> str:
    """The text a tool is embedded from: ``"split name: description (parameter names)"``.

    Parameter names lift BFCL hit@5 by 3 points on the dev split; their descriptions are left
    to keyword search, since the embedder reads only the first 128 tokens. ``extra`` (the
    phrasings enrichment added) comes last, so a truncating model reads the original first.
    The result is at most ``MODEL_TEXT_CHARS`` characters (the model reads fewer).
    """
    name = " ".join(split_identifier(bounded(tool.name, MODEL_TEXT_CHARS)))
    text = f"{name}: {bounded(tool.description, MODEL_TEXT_CHARS)}"
    properties = tool.parameters.get("properties") if isinstance(tool.parameters, Mapping) else None
    if isinstance(properties, Mapping) and properties and len(text) < MODEL_TEXT_CHARS:
        names: list[str] = []
        size = len(text)
        for key in properties:
            names.append(" ".join(split_identifier(bounded(str(key), MODEL_TEXT_CHARS))))
            size += len(names[-1]) + 1
            if size >= MODEL_TEXT_CHARS:
                break
        text += " (" + " ".join(names) + ")"
    text = f"{text}. Also: {extra}" if extra.strip() else text
    return bounded(text, MODEL_TEXT_CHARS)


def keyword_document(tool: Tool, extra: str = "") -> list[str]:
    """Tokens a tool is indexed under: its name counts twice (a dev-split choice), plus those
    of ``extra`` (enrichment's phrasings)."""
    return (
        tokenize(" ".join(split_identifier(tool.name)))
        + tokenize(tool_text(tool))
        + tokenize(extra)
    )

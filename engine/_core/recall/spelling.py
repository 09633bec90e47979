"""Misspelled request words, corrected toward the catalogue's words before recall reads them.

A typo costs the model far more than it costs a reader: "get the wether in Paris" is cut
into word pieces the model never saw together, and the request's vector drifts from the
weather tool. Recall therefore reads the request with such words corrected: a word is
*misspelled* when neither the catalogue's keyword index nor ``data/words.txt`` (the whole
English words of the bundled model's vocabulary) holds it, and it is corrected when one
edit (a letter dropped, added, changed, or two swapped) turns it into a word of the
catalogue — the one most tools use when several do. The keyword index is the catalogue's
vocabulary (words as the tokeniser folds them: "forecasts" is "forecast"), so correction
costs nothing to build, and a lookup is one set intersection. Everything else is left as
written: short words (under ``MIN_LETTERS``, as written or folded), acronyms and identifiers
(``AAPL``, ``getWeather``), words of other scripts, informal forms of English words ("whats"
folds to "what"), and words no single edit brings to a catalogue word of ``MIN_LETTERS`` or
more.

Measured with a quarter of the words of four letters or more mistyped
(``tests/bench/bench_spelling.py``): hit@5 gets back about half of what the typos cost on
the test splits, and requests as written are unchanged within noise. The work is bounded:
words past ``KEYWORD_TEXT_CHARS`` are not looked at, and at most ``MAX_LOOKUPS`` unknown
words per request are looked up.
"""

from __future__ import annotations

import re
import string
import unicodedata
from functools import lru_cache
from importlib import resources

from ..text import KEYWORD_TEXT_CHARS, stem
from .keyword import KeywordIndex

#: Shorter words are left as written: one edit reaches too many other short words.
MIN_LETTERS = 4
#: Longer words are identifiers or pasted tokens more often than typos.
MAX_LETTERS = 16
#: Unknown words looked up per request: a request of many unknown words is not a typo.
MAX_LOOKUPS = 8

# Runs of letters of any script; only ASCII ones are ever corrected.
_WORD = re.compile(r"[^\W\d_]+")
_LETTERS = string.ascii_lowercase


@lru_cache(maxsize=1)
def known_words() -> frozenset[str]:
    """The lower-case English words (of ``MIN_LETTERS`` or more) no request corrects."""
    text = (resources.files("toolroute") / "data" / "words.txt").read_text("utf-8")
    return frozenset(text.split())


def corrected(request: str, keywords: KeywordIndex) -> str:
    """``request`` with its misspelled words corrected toward the words of ``keywords`` (the
    same string when none is)."""
    head, tail = request[:KEYWORD_TEXT_CHARS], request[KEYWORD_TEXT_CHARS:]
    if not head.isascii():  # a decomposed accent is part of its word, not an ASCII word's end
        head = unicodedata.normalize("NFC", head)
    lookups = 0

    def fix(match: re.Match[str]) -> str:
        nonlocal lookups
        word = match.group()
        if not _correctable(word):
            return word
        lower = word.lower()
        # The word as the index folds it: "resturants" is looked up as "resturant", and
        # its correction gets the "s" back.
        folded = stem(lower)
        if (
            len(folded) < MIN_LETTERS
            or {lower, folded} & known_words()  # "whats" is "what", an English word
            or folded in keywords.vocabulary
            or lookups >= MAX_LOOKUPS
        ):
            return word
        lookups += 1
        found = {w for w in keywords.vocabulary.keys() & _one_edit(folded) if len(w) >= MIN_LETTERS}
        if not found:
            return word
        best = max(found, key=lambda w: (keywords.document_frequency(w), w))
        return best + lower[len(folded) :] if lower.startswith(folded) else best

    fixed = _WORD.sub(fix, head)
    return request if fixed == head else fixed + tail


def _correctable(word: str) -> bool:
    """An ASCII word, lower-case or capitalised, of a typo's length (not ``AAPL``, not
    ``getWeather``)."""
    return (
        MIN_LETTERS <= len(word) <= MAX_LETTERS
        and word.isascii()
        and (word.islower() or (word[0].isupper() and word[1:].islower()))
    )


def _one_edit(word: str) -> set[str]:
    """Every string one deletion, transposition, substitution or insertion from ``word``."""
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    return (
        {a + b[1:] for a, b in splits if b}
        | {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
        | {a + c + b[1:] for a, b in splits if b for c in _LETTERS}
        | {a + c + b for a, b in splits for c in _LETTERS}
    )

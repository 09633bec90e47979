"""``toolroute select --explain``: one readable line per explained tool."""

from __future__ import annotations

import re

from .._core.select.explain import Explanation


def explanation_line(explanation: Explanation) -> str:
    """``why get_weather: shown, ranked #1 (score 0.820, cosine 0.626, full tier), matched
    forecast, weather`` — the record's fields that say something, in reading order."""
    state = "shown" if explanation.shown else "hidden"
    head = f"why {explanation.tool_id}: {state}, {explanation.reason}"
    if explanation.rank is not None:
        head += f" #{explanation.rank}"
    numbers = []
    if explanation.score is not None:
        numbers.append(f"score {explanation.score:.3f}")
    if explanation.cosine is not None:
        numbers.append(f"cosine {explanation.cosine:.3f}")
    if numbers:
        numbers.append(f"{explanation.tier} tier")
        head += f" ({', '.join(numbers)})"
    notes = [
        f"{label} {value}"
        for label, value in (
            ("set", explanation.tool_set),
            ("with", explanation.related_to),
            ("server", explanation.server),
            ("by", explanation.routing),
            ("duplicate of", explanation.duplicate_of),
        )
        if value
    ]
    if explanation.matched_words:
        notes.append(f"matched {', '.join(explanation.matched_words)}")
    return ", ".join([head, *notes])


# Control characters (a terminal's escape sequences, bell, newline) and the bidirectional
# controls that reorder what a line shows.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with its control characters escaped (``\\x1b``, ``\\u202e``): tool and server
    names come from tool files and MCP servers, and must not drive the terminal."""
    return _UNPRINTABLE.sub(lambda match: ascii(match.group())[1:-1], text)

"""The JSON value in a chat model's answer: fenced, bare, or inside prose."""

from __future__ import annotations

import itertools
import json
import re

#: How many ``{`` in a prose answer are tried as the start of the JSON.
_MAX_BRACES = 16
_DECODER = json.JSONDecoder()
_FENCE = re.compile(r"```[\w+-]*[ \t]*\n?(.*?)```", re.DOTALL)


def extract_json(text: str) -> object:
    """The JSON value in a model's answer.

    Tries the first fenced block (or else the whole text), then the object at
    each of its first few ``{``, so prose around the JSON does no harm.

    Raises:
        ValueError: nothing in ``text`` parses.
    """
    fenced = _FENCE.search(text)
    body = (fenced.group(1) if fenced else text).strip()
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        pass
    for brace in itertools.islice(re.finditer(r"\{", body), _MAX_BRACES):
        try:
            return _DECODER.raw_decode(body, brace.start())[0]
        except (ValueError, RecursionError):
            continue
    raise ValueError("no JSON value in the answer")

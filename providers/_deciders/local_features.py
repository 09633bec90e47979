"""What the local decider reads from a request: subjects per question, and their features.

Pure functions over texts and vectors; the decider (:mod:`.local`) embeds and calibrates.
A boolean question is about one *subject* (one server or tool, or the statement itself) or
about *any* of a list the state carries ("does the request need any of available_tools?").
Both kinds are scored by how close the request is to the subject's text, by embedding and by
shared words, and the calibration turns those features into a probability.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

import attrs
import numpy as np
import numpy.typing as npt

from ..._core.decide.types import BooleanQuestion, ChoiceQuestion, Question
from ..._core.text import bounded, split_identifier, tokenize

Kind: TypeAlias = Literal["one", "any"]
Floats: TypeAlias = npt.NDArray[np.float64]

#: State keys that list what questions may point at (``available_servers[3]``).
LIST_KEYS = ("available_servers", "available_tools", "tools", "servers", "candidates")
#: Characters of any one text embedded or tokenised: MiniLM reads 128 word pieces anyway.
MAX_TEXT_CHARS = 2_000

_INDEXED = re.compile(r"\b(" + "|".join(LIST_KEYS) + r")\[(\d+)\]")
_NAMED = re.compile(r"\b(" + "|".join(LIST_KEYS) + r")\b")

#: Feature names, in the order the calibration's weights are written, per question kind.
FEATURES: dict[Kind, tuple[str, ...]] = {
    # cosine to the subject; share of the request's words it contains; cosine minus the
    # best sibling subject's (positive for the closest subject, 0 when alone).
    "one": ("cosine", "coverage", "gap"),
    # the best item's cosine and coverage; best minus second best cosine; log of the items.
    # The request's own vector follows these in the row (the calibration may weigh it: how
    # much a request reads like one that needs a tool at all).
    "any": ("cosine", "coverage", "gap", "log_items"),
}


@attrs.frozen
class Subject:
    """What one question is about: a single text, or any of several; for a listed server
    the engine's routing annotated, ``(similar_uses, similar_requests)``."""

    kind: Kind
    texts: tuple[str, ...]
    uses: tuple[int, int] | None = None


def request_text(state: Any) -> str:
    """The request a state is about: the state itself when a string, its ``request`` or
    ``query`` when a mapping holds one, else the state as JSON."""
    if isinstance(state, str):
        return bounded(state, MAX_TEXT_CHARS)
    if isinstance(state, Mapping):
        for key in ("request", "query"):
            value = state.get(key)
            if isinstance(value, str):
                return bounded(value, MAX_TEXT_CHARS)
    return bounded(json.dumps(state, ensure_ascii=False, default=str), MAX_TEXT_CHARS)


def entry_text(entry: Any) -> str:
    """An item of a state list as text: its name in words, then what it does."""
    if isinstance(entry, str):
        return bounded(entry, MAX_TEXT_CHARS)
    if not isinstance(entry, Mapping):
        return bounded(json.dumps(entry, ensure_ascii=False, default=str), MAX_TEXT_CHARS)
    name = entry.get("name")
    words = " ".join(split_identifier(name)) if isinstance(name, str) else ""
    about = next((v for k in ("does", "description") if isinstance(v := entry.get(k), str)), "")
    return bounded(f"{words}: {about}" if about else words or str(name), MAX_TEXT_CHARS)


def _listed(state: Any, key: str) -> list[Any] | None:
    if isinstance(state, Mapping):
        value = state.get(key)
        if isinstance(value, list) and value:
            return value
    return None


def boolean_subject(question: BooleanQuestion, state: Any) -> Subject:
    """What a boolean question is about.

    ``available_servers[i]`` (or another listed key with an index) in the instructions is
    that entry; a listed key named without an index is any of its entries; anything else
    is the statement itself (the instructions and what ``true`` means).
    """
    text = question.instructions
    pointed = _INDEXED.search(text)
    if pointed:
        entries = _listed(state, pointed.group(1))
        index = int(pointed.group(2))
        if entries is not None and index < len(entries):
            return Subject("one", (entry_text(entries[index]),), _uses(state, entries[index]))
    else:
        named = _NAMED.search(text)
        entries = _listed(state, named.group(1)) if named else None
        if entries is not None:
            return Subject("any", tuple(entry_text(e) for e in entries))
    true = question.true if isinstance(question.true, str) else ""
    statement = (bounded(f"{text} {true}".strip(), MAX_TEXT_CHARS),)
    return Subject("one", statement, _uses(state, _quoted_server(state, text)))


def _quoted_server(state: Any, text: str) -> Any:
    """The listed server whose name the question quotes first (``the "fetch" server``)."""
    found, first = None, len(text)
    for entry in _listed(state, "available_servers") or ():
        if isinstance(entry, Mapping):
            at = text.find(f'"{entry.get("name")}"')
            if 0 <= at < first:
                found, first = entry, at
    return found


def _uses(state: Any, entry: Any) -> tuple[int, int] | None:
    """``(similar_uses, similar_requests)`` when the state carries both, well formed."""
    if not isinstance(entry, Mapping):
        return None
    used, of = entry.get("similar_uses"), state.get("similar_requests")
    if type(used) is int and type(of) is int and 0 <= used <= of and of > 0:
        return used, of
    return None


def usage_shifts(subjects: Sequence[Subject], pseudo: float) -> list[float | None]:
    """How much more (or less) often than an average sibling each subject was used by the
    similar learned requests, in log-odds; ``None`` for a subject without counts.

    With ``v`` of ``k`` similar requests using a server and ``r`` the siblings' mean share,
    the shift is ``logit((v + pseudo * r) / (k + pseudo)) - logit(r)``: 0 for an average
    server, and counts shrunk toward the average so a few requests move it little.
    """
    counted = [s.uses for s in subjects if s.uses is not None]
    if not counted:
        return [None] * len(subjects)
    base = sum(v for v, _ in counted) / sum(k for _, k in counted)
    if not 0 < base < 1:  # no sibling used at all (or every one always): nothing to tell
        return [None if s.uses is None else 0.0 for s in subjects]
    shifts: list[float | None] = []
    for subject in subjects:
        if subject.uses is None:
            shifts.append(None)
            continue
        used, of = subject.uses
        rate = (used + pseudo * base) / (of + pseudo)
        shifts.append(_logit(rate) - _logit(base))
    return shifts


def _logit(p: float) -> float:
    p = min(max(p, 1e-9), 1 - 1e-9)
    return math.log(p / (1 - p))


def option_subjects(question: ChoiceQuestion) -> list[tuple[str, Subject]]:
    """One single subject per option of a choice: its name in words and its description."""
    return [
        (name, Subject("one", (entry_text({"name": name, "description": about}),)))
        for name, about in question.options.items()
    ]


def coverage(request_tokens: frozenset[str], text: str) -> float:
    """The share of the request's distinct words that ``text`` contains (0 for no words)."""
    if not request_tokens:
        return 0.0
    return len(request_tokens & frozenset(tokenize(text))) / len(request_tokens)


def subject_features(
    subjects: Sequence[Subject], query: Floats, vectors: Mapping[str, Floats], request: str
) -> list[Floats]:
    """The feature row of each subject (``FEATURES[subject.kind]`` order; for ``any``,
    the request's vector after them).

    ``vectors`` maps every subject text to its unit vector, ``query`` is the request's.
    Single subjects of one request are siblings: each one's gap is measured against the
    best of the others, which is what tells "the closest of 70 servers" from "one of many
    equally far ones".
    """
    words = frozenset(tokenize(request))
    cosines = [np.array([float(vectors[t] @ query) for t in s.texts]) for s in subjects]
    singles = [float(c[0]) for s, c in zip(subjects, cosines, strict=True) if s.kind == "one"]
    rows: list[Floats] = []
    for subject, cos in zip(subjects, cosines, strict=True):
        best = float(cos.max())
        cover = max(coverage(words, t) for t in subject.texts)
        if subject.kind == "one":
            others = sorted(singles, reverse=True)
            # The best sibling other than this subject: drop one copy of its own score.
            others.remove(best)
            gap = best - others[0] if others else 0.0
            rows.append(np.array([best, cover, gap]))
        else:
            ranked = np.sort(cos)[::-1]
            gap = float(ranked[0] - ranked[1]) if len(ranked) > 1 else 0.0
            rows.append(np.r_[best, cover, gap, math.log(len(cos)), query])
    return rows


def question_subjects(questions: Mapping[str, Question], state: Any) -> dict[str, Any]:
    """Each question's subject, or for a choice the ``(option, subject)`` pairs."""
    found: dict[str, Any] = {}
    for key, question in questions.items():
        if isinstance(question, BooleanQuestion):
            found[key] = boolean_subject(question, state)
        elif isinstance(question, ChoiceQuestion):
            found[key] = option_subjects(question)
    return found

"""What a decision provider accepts, and the local checks made before any network call."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence

import attrs

from ..errors import DecisionError, DecisionErrorKind
from .types import JSON, DecisionRequest

#: Characters per token of the base estimate, and the safety margin on top.
CHARS_PER_TOKEN = 4
TOKEN_SAFETY_MARGIN = 0.05
#: Length assumed for a state that cannot be serialised (it is refused as oversized).
OVERSIZED_VALUE_FALLBACK_CHARS = 1_000_000

#: Connections in a remote provider's HTTP pool; the stateless decision actor admits as many
#: batches per provider, so a request never waits inside the pool (where nothing knows its
#: deadline, and the pool's queue costs work on the event loop for every waiting request).
#: 32, not httpx's 100: the pool's bookkeeping grows with the square of its connections on
#: every request, and 200 concurrent routings through one decider answered more of their
#: questions by the deadline with 32 in flight than with 64 or 100 (``docs/benchmarks.md``, decisions under a burst).
PROVIDER_CONNECTIONS = 32

_SYMBOLS = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


@attrs.frozen(kw_only=True)
class MediaLimits:
    """Images and video a provider reads.

    Attributes:
        max_images: images per request.
        video: whether a video is accepted.
        max_request_bytes: ceiling on the serialised request body.
        image_types: accepted MIME types of images.
    """

    max_images: int
    video: bool
    max_request_bytes: int
    image_types: frozenset[str] = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})


@attrs.frozen(kw_only=True)
class ModelLimits:
    """A per-model override of the state window and the non-ASCII rate."""

    max_state_tokens: int | None = None
    non_ascii_rate: float | None = None


@attrs.frozen(kw_only=True)
class DecisionLimits:
    """A provider's caps, its token-estimate rates and its default timeout.

    ``advisory`` limits are enforced by the server, so they are not checked
    locally. Rates are tokens per character of that class (see
    :func:`estimate_state_tokens`). The default timeout is
    ``timeout_s + per_question_s * questions + per_1000_state_tokens_s *
    (estimated state tokens // 1000)``.
    """

    max_state_tokens: int | None = None
    max_questions: int | None = None
    advisory: bool = False
    non_ascii_rate: float | None = None
    structured_non_ascii_rate: float | None = None
    digit_rate: float | None = None
    symbol_rate: float | None = None
    astral_rate: float | None = None
    models: Mapping[str, ModelLimits] = attrs.field(factory=dict)
    media: MediaLimits | None = None
    timeout_s: float = 5.0
    per_question_s: float = 0.0
    per_1000_state_tokens_s: float = 0.0

    def for_model(self, model: str | None) -> DecisionLimits:
        """These limits with ``model``'s overrides applied."""
        override = self.models.get(model or "")
        if override is None:
            return self
        return attrs.evolve(
            self,
            max_state_tokens=override.max_state_tokens or self.max_state_tokens,
            non_ascii_rate=override.non_ascii_rate or self.non_ascii_rate,
        )

    def default_timeout_s(self, questions: int, state_tokens: int) -> float:
        return (
            self.timeout_s
            + self.per_question_s * questions
            + self.per_1000_state_tokens_s * (state_tokens // 1000)
        )


def estimate_tokens(text: str) -> int:
    """The base estimate: a token per 4 characters, plus 5 %."""
    base = math.ceil(len(text) / CHARS_PER_TOKEN)
    return math.ceil(base * (1.0 + TOKEN_SAFETY_MARGIN))


def _serialise(state: JSON) -> tuple[str, bool]:
    """The text the provider will read, and whether it is the state itself (a string)."""
    if isinstance(state, str):
        return state, True
    try:
        return json.dumps(state, ensure_ascii=False, allow_nan=False), False
    except (TypeError, ValueError, RecursionError):
        return "x" * OVERSIZED_VALUE_FALLBACK_CHARS, False


@attrs.frozen
class CharCounts:
    """Characters of a text by the classes of :func:`estimate_state_tokens`.

    Counts add up: the counts of a concatenation are the sum of its pieces' counts, so a
    caller can price a list built from pieces without serialising it again.
    """

    escapes: int = 0
    astrals: int = 0
    non_ascii: int = 0
    digits: int = 0
    symbols: int = 0
    rest: int = 0

    def __add__(self, other: CharCounts) -> CharCounts:
        return CharCounts(
            escapes=self.escapes + other.escapes,
            astrals=self.astrals + other.astrals,
            non_ascii=self.non_ascii + other.non_ascii,
            digits=self.digits + other.digits,
            symbols=self.symbols + other.symbols,
            rest=self.rest + other.rest,
        )


_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_ASTRAL = re.compile(r"[\U00010000-\U0010ffff]")
_DIGITS = re.compile(r"[0-9]")
_SYMBOL_CLASS = re.compile("[" + re.escape("".join(sorted(_SYMBOLS))) + "]")


def _count(pattern: re.Pattern[str], text: str) -> int:
    # The length removed by a substitution: counted in C, with no list of matches.
    return len(text) - len(pattern.sub("", text))


def _rated(limits: DecisionLimits) -> bool:
    return any(
        rate is not None
        for rate in (
            limits.non_ascii_rate,
            limits.structured_non_ascii_rate,
            limits.digit_rate,
            limits.symbol_rate,
            limits.astral_rate,
        )
    )


def count_chars(text: str, limits: DecisionLimits, *, is_string: bool = False) -> CharCounts:
    """``text``'s characters by class (see :func:`estimate_state_tokens`); ``is_string``:
    the text is a string state itself, not JSON (its non-ASCII is not escaped)."""
    if not _rated(limits):
        return CharCounts(rest=len(text))
    escapes = astrals = non_ascii = wide = 0
    if not text.isascii():
        wide = _count(_NON_ASCII, text)
        astral = _count(_ASTRAL, text)
        if not is_string and limits.structured_non_ascii_rate is not None:
            escapes = wide + astral  # an astral character is two escapes on the wire
        elif limits.astral_rate is not None:
            astrals, non_ascii = astral, wide - astral
        else:
            non_ascii = wide
    # Digits and symbols are ASCII, so no character is counted twice.
    digits = _count(_DIGITS, text) if limits.digit_rate is not None else 0
    symbols = _count(_SYMBOL_CLASS, text) if limits.symbol_rate is not None else 0
    return CharCounts(
        escapes=escapes,
        astrals=astrals,
        non_ascii=non_ascii,
        digits=digits,
        symbols=symbols,
        rest=len(text) - wide - digits - symbols,
    )


def tokens_of(counts: CharCounts, limits: DecisionLimits) -> int:
    """The token estimate of a text with these ``counts`` (see :func:`estimate_state_tokens`)."""
    base = math.ceil(math.ceil(counts.rest / CHARS_PER_TOKEN) * (1.0 + TOKEN_SAFETY_MARGIN))
    if not _rated(limits):
        return base
    return (
        base
        + math.ceil(counts.digits * (limits.digit_rate or 0.0))
        + math.ceil(counts.symbols * (limits.symbol_rate or 0.0))
        + math.ceil(counts.astrals * (limits.astral_rate or 0.0))
        + math.ceil(counts.non_ascii * (limits.non_ascii_rate or 0.25))
        + math.ceil(counts.escapes * (limits.structured_non_ascii_rate or 0.0))
    )


def estimate_state_tokens(state: JSON, limits: DecisionLimits) -> int:
    """An upper estimate of the tokens the provider will count for ``state``.

    Without per-class rates this is :func:`estimate_tokens`. With them, each
    character goes to the first class that fits: non-ASCII inside a JSON state
    (escaped on the wire, 2 for an astral character), astral, other non-ASCII,
    digit, ASCII punctuation, the rest; each class has its rate and the rest
    gets the base estimate. Characters are counted by regular expressions, in C:
    a routing state of 200 servers costs well under a millisecond.
    """
    text, is_string = _serialise(state)
    return tokens_of(count_chars(text, limits, is_string=is_string), limits)


def fitting_runs(
    pieces: Sequence[str],
    *,
    head: str,
    tail: str,
    separator: str,
    window: int,
    limits: DecisionLimits,
) -> list[range]:
    """Cut ``pieces`` into the longest runs, in order, whose text fits ``window`` tokens.

    The text of a run ``pieces[i:j]`` is ``head + separator.join(pieces[i:j]) + tail``
    (how ``json.dumps`` writes a list inside an object), priced as
    :func:`estimate_state_tokens` prices it, from each piece's counts: linear in the total
    length, however many runs. A run holds at least one piece, even one that alone is over.
    """
    frame = count_chars(head, limits) + count_chars(tail, limits)
    gap = count_chars(separator, limits)
    runs: list[range] = []
    start = 0
    total = frame
    for index, piece in enumerate(pieces):
        counts = count_chars(piece, limits)
        grown = total + (gap if index > start else CharCounts()) + counts
        if index > start and tokens_of(grown, limits) > window:
            runs.append(range(start, index))
            start, grown = index, frame + counts
        total = grown
    if start < len(pieces):
        runs.append(range(start, len(pieces)))
    return runs


def check_state(state: JSON, *, vendor: str) -> None:
    """Refuse a state no vendor can be sent: it must be JSON, without NaN or infinity.

    Raises:
        DecisionError: ``invalid_request``, saying what was found; the caller's
            mistake, so it is raised before any network call and never retried.
    """
    if isinstance(state, str):
        return
    try:
        json.dumps(state, allow_nan=False)
    except ValueError as exc:
        # Out-of-range floats and circular references both land here.
        found = str(exc)
        if "out of range float" in found.lower():
            found = "NaN or an infinite number"
        raise DecisionError(
            DecisionErrorKind.INVALID_REQUEST,
            f"{vendor} needs the state as JSON; it holds {found}. Replace it with a finite"
            " number, null or a string.",
        ) from None
    except (TypeError, RecursionError) as exc:
        raise DecisionError(
            DecisionErrorKind.INVALID_REQUEST,
            f"{vendor} needs the state as JSON; it is not ({type(exc).__name__}: {exc}).",
        ) from None


def check_request(
    request: DecisionRequest, limits: DecisionLimits, *, vendor: str, model: str
) -> int:
    """Refuse a request over the provider's caps, before any network call.

    Returns:
        The estimated state tokens (the default timeout grows with them).

    Raises:
        DecisionError: ``invalid_request`` without questions or with a state that
            is not JSON (NaN, infinity, a non-JSON object); ``max_tokens_exceeded``
            over the question cap or the state window (never retryable).
    """
    count = len(request.questions)
    if count == 0:
        raise DecisionError(DecisionErrorKind.INVALID_REQUEST, "At least one question is required.")
    check_state(request.state, vendor=vendor)
    limits = limits.for_model(model)
    tokens = estimate_state_tokens(request.state, limits)
    if limits.advisory:
        return tokens
    if limits.max_questions is not None and count > limits.max_questions:
        raise DecisionError(
            DecisionErrorKind.MAX_TOKENS_EXCEEDED,
            f"{vendor} accepts at most {limits.max_questions} questions per request; this one"
            f" has {count}. Ask fewer, or use a decision provider without this cap.",
        )
    if limits.max_state_tokens is not None and tokens > limits.max_state_tokens:
        raise DecisionError(
            DecisionErrorKind.MAX_TOKENS_EXCEEDED,
            f"The state is ~{tokens} tokens; {vendor}'s {model!r} model reads at most"
            f" {limits.max_state_tokens}. Shorten the state, or use a decision provider with a"
            " larger window.",
        )
    return tokens

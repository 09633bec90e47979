"""What a decision provider accepts, and the local checks made before any network call."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import attrs

from .decision import JSON, DecisionRequest
from .errors import DecisionError, DecisionErrorKind

#: Characters per token of the base estimate, and the safety margin on top.
CHARS_PER_TOKEN = 4
TOKEN_SAFETY_MARGIN = 0.05
#: Length assumed for a state that cannot be serialised (it is refused as oversized).
OVERSIZED_VALUE_FALLBACK_CHARS = 1_000_000

#: Connections in a remote provider's HTTP pool; the stateless decision actor admits as many
#: batches per provider, so a request never waits inside the pool (where nothing knows its
#: deadline, and the pool's queue costs work on the event loop for every waiting request).
PROVIDER_CONNECTIONS = 100

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


def estimate_state_tokens(state: JSON, limits: DecisionLimits) -> int:
    """An upper estimate of the tokens the provider will count for ``state``.

    Without per-class rates this is :func:`estimate_tokens`. With them, each
    character goes to the first class that fits: non-ASCII inside a JSON state
    (escaped on the wire, 2 for an astral character), astral, other non-ASCII,
    digit, ASCII punctuation, the rest; each class has its rate and the rest
    gets the base estimate.
    """
    text, is_string = _serialise(state)
    rated = (
        limits.non_ascii_rate,
        limits.structured_non_ascii_rate,
        limits.digit_rate,
        limits.symbol_rate,
        limits.astral_rate,
    )
    if all(rate is None for rate in rated):
        return estimate_tokens(text)
    escapes = astrals = non_ascii = digits = symbols = 0
    rest: list[str] = []
    for char in text:
        code = ord(char)
        if code > 0x7F and not is_string and limits.structured_non_ascii_rate is not None:
            escapes += 2 if code > 0xFFFF else 1
        elif code > 0xFFFF and limits.astral_rate is not None:
            astrals += 1
        elif code > 0x7F:
            non_ascii += 1
        elif limits.digit_rate is not None and "0" <= char <= "9":
            digits += 1
        elif limits.symbol_rate is not None and char in _SYMBOLS:
            symbols += 1
        else:
            rest.append(char)
    return (
        estimate_tokens("".join(rest))
        + math.ceil(digits * (limits.digit_rate or 0.0))
        + math.ceil(symbols * (limits.symbol_rate or 0.0))
        + math.ceil(astrals * (limits.astral_rate or 0.0))
        + math.ceil(non_ascii * (limits.non_ascii_rate or 0.25))
        + math.ceil(escapes * (limits.structured_non_ascii_rate or 0.0))
    )


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

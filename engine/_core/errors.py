"""The exceptions toolroute raises.

::

    ToolrouteError
     ├── CatalogError(ValueError)    a tool definition or catalogue file is malformed
     ├── ConfigError(ValueError)     an option is out of range or names an unknown tool
     ├── EmbedderError               an embedder could not produce vectors
     │    └── ModelIntegrityError    a model or tokenizer file does not match its pinned sha256
     ├── ProviderError               a remote provider failed (HTTP status, timeout, garbage)
 │    └── DecisionError          a decision provider failed; ``kind`` says how
     └── EngineCrashed               a runtime service kept failing past its restart budget

Expected degradation (an embedder that failed during selection, say) is not an
exception: it is reported as a value, ``Selection.outcome``.
"""

from __future__ import annotations

import enum


class ToolrouteError(Exception):
    """Base class of every error toolroute raises on purpose."""


class CatalogError(ToolrouteError, ValueError):
    """A tool definition or catalogue file is malformed."""


class ConfigError(ToolrouteError, ValueError):
    """An option is out of range or refers to something that does not exist."""


class EmbedderError(ToolrouteError):
    """An embedder could not produce vectors."""


class ModelIntegrityError(EmbedderError):
    """A model or tokenizer file does not match its pinned sha256."""


class ProviderError(ToolrouteError):
    """A remote provider failed.

    Attributes:
        status: the HTTP status, when the provider answered.
        retryable: whether trying again later may succeed.
    """

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.status = status
        self.retryable = retryable


class DecisionErrorKind(enum.StrEnum):
    """Why a decision call failed; the same eight kinds for every vendor."""

    AUTHENTICATION = "authentication"
    INVALID_REQUEST = "invalid_request"
    MAX_TOKENS_EXCEEDED = "max_tokens_exceeded"
    RATE_LIMIT = "rate_limit"
    OVERLOADED = "overloaded"
    SERVER = "server"
    TIMEOUT = "timeout"
    NETWORK = "network"


class DecisionError(ProviderError):
    """A decision provider failed.

    Attributes:
        kind: one of :class:`DecisionErrorKind`.
        request_id: the provider's request id, when it sent one.
    """

    def __init__(
        self,
        kind: DecisionErrorKind | str,
        message: str,
        *,
        status: int | None = None,
        request_id: str | None = None,
        retryable: bool = False,
    ):
        super().__init__(message, status=status, retryable=retryable)
        self.kind = DecisionErrorKind(kind)
        self.request_id = request_id


class CacheWarning(UserWarning):
    """A disk cache (embeddings, enrichment, learning, the fast tier) could not read or write
    a file and carried on without it."""


class EngineCrashed(ToolrouteError):
    """A runtime service kept crashing past its restart budget; the engine has stopped."""


def given(value: object, chars: int = 60) -> str:
    """What came, for the message of a caller's mistake about an argument (a path, a
    provider): its type and its ``repr``, cut to ``chars``. Never for request text."""
    shown = repr(value)
    if len(shown) > chars + 1:
        shown = f"{shown[:chars]}…"
    return f"{type(value).__name__} {shown}"


def leaves(error: BaseException) -> list[BaseException]:
    """``error``'s innermost exceptions: itself, or every leaf of a group, in order."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def holds_only(group: BaseExceptionGroup[BaseException], error: BaseException) -> bool:
    """Whether a nursery's ``group`` holds ``error`` and nothing else: ``error`` itself or,
    when ``error`` is a group (from a nursery of the caller's), the copy trio made of it."""
    found, mine = leaves(group), leaves(error)
    return (
        len(group.exceptions) == 1
        and len(found) == len(mine)
        and all(a is b for a, b in zip(found, mine, strict=True))
    )

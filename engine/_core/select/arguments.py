"""Checks of the arguments a caller passes to a selection call, each naming the argument,
what was expected and what came (the command line refuses the same values)."""

from __future__ import annotations

from ..catalog.catalog import Catalog
from ..errors import ConfigError
from .message_view import shape

#: The readers a catalogue is built with, for the message that refuses anything else.
_READERS = (
    "Catalog.from_tools(...) (Tool objects, framework tools, Python functions), "
    "Catalog.from_openai/from_anthropic/from_gemini/from_mcp(...) or Catalog.from_file(path)"
)


_SELECT = "the request to select tools for"


def query_text(value: object, argument: str = "query", meaning: str = _SELECT) -> str:
    """``value`` when it is a string.

    Raises:
        ConfigError: it is not; the message names ``argument``, what it is for (``meaning``)
            and what came.
    """
    if not isinstance(value, str):
        conversation = isinstance(value, list) and meaning == _SELECT
        raise ConfigError(
            f"{argument} must be a string ({meaning}), got {shape(value)}"
            + ("; for a conversation use prepare_step" if conversation else "")
        )
    return value


def count(value: object, argument: str, minimum: int) -> int:
    """``value`` when it is an integer (not a bool) of at least ``minimum``.

    Raises:
        ConfigError: it is not.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{argument} must be an integer of at least {minimum}, got {value!r}")
    return value


#: The longest session id: ids are held per session, and written into events, spans, logs
#: and Redis keys, so a pasted document must not become one.
MAX_SESSION_CHARS = 1024


def session_id(value: object) -> str | None:
    """A session id: a string of at most ``MAX_SESSION_CHARS`` characters, or ``None``.

    Raises:
        ConfigError: anything else.
    """
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"session must be a string or None, got {shape(value)}")
    if value is not None and len(value) > MAX_SESSION_CHARS:
        raise ConfigError(
            f"session must be an id of at most {MAX_SESSION_CHARS} characters,"
            f" got a string of {len(value)}"
        )
    return value


def served_catalog(value: object) -> Catalog:
    """The catalogue an index or engine is built over: a ``Catalog`` with at least one tool.

    Raises:
        ConfigError: another type (naming the readers that build one), or no tools.
    """
    if not isinstance(value, Catalog):
        raise ConfigError(
            f"catalog must be a Catalog; build one with {_READERS}; got {shape(value)}"
        )
    if not value.tools:
        raise ConfigError(
            "catalog holds no tools: nothing could ever be selected; pass at least one tool "
            "(an engine whose tools arrive later starts with the first ones and adds the rest "
            "with engine.update)"
        )
    return value

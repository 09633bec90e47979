"""The one core module that touches the file system, and only for files the caller named.

The pure core reads no file of its own choosing: no cache, no model, no configuration file.
When a caller hands it a path (``Catalog.from_file``, ``load_queries``, an image path in a
decision request), the bytes are read here, so the import-graph test can hold every other core
module to "no file system" and a reviewer finds every read in one place.
"""

from __future__ import annotations

import json
import os
import stat

from .errors import ToolrouteError, given


class NotAFile(OSError):
    """The path exists but is not a regular file (a directory, a device, a pipe)."""


class FileTooLarge(OSError):
    """The file holds more bytes than the caller's limit.

    Attributes:
        size: the size the file system reported, or ``None`` when the file grew past the
            limit while it was read.
    """

    def __init__(self, size: int | None) -> None:
        super().__init__(f"file is over the limit ({size} bytes)")
        self.size = size


def read_json(path: str | os.PathLike[str], *, what: str, error: type[ToolrouteError]) -> object:
    """The parsed JSON value of a UTF-8 file.

    Args:
        path: the file the caller named.
        what: how messages name the file (``"tool file"``, ``"queries file"``).
        error: the error class raised (the caller's edge decides: ``CatalogError``,
            ``ConfigError``).

    Raises:
        ToolrouteError: of class ``error``: ``path`` is not a path (``None``, a file
            descriptor), or the file cannot be read, is not UTF-8 or is not JSON; the message
            names the file and says why.
    """
    value: object = path  # the caller's value, whatever its annotation says
    if not isinstance(value, str | os.PathLike):
        raise error(
            f"{what} path must be a str or an os.PathLike (a pathlib.Path, say), got {given(value)}"
        )
    where = os.fspath(path)
    try:
        # utf-8-sig: a byte order mark (Windows editors write one) is read past, as RFC 8259
        # allows; a file without one reads as plain UTF-8.
        with open(path, encoding="utf-8-sig") as file:
            text = file.read()
    except OSError as exc:
        raise error(f"cannot read {what} {where!r}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise error(f"{what} {where!r} is not UTF-8: {exc.reason}") from exc
    except ValueError as exc:  # an embedded NUL: no file can have that name
        raise error(f"cannot read {what} {where!r}: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        yaml = where.lower().endswith((".yaml", ".yml"))
        raise error(
            f"{what} {where!r} is not valid JSON: {exc.msg} "
            f"at line {exc.lineno}, column {exc.colno}"
            + ("; YAML is not read: convert the file to JSON" if yaml else "")
        ) from exc
    except RecursionError:  # arrays nested thousands deep
        raise error(f"{what} {where!r} is not valid JSON: nested too deeply") from None


def read_regular_file(path: str, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes.

    The size is checked before reading and again while reading (a file can grow in between),
    so no more than ``limit + 1`` bytes are ever held.

    Raises:
        FileNotFoundError: nothing at ``path``.
        NotAFile: ``path`` is a directory or another non-regular file.
        FileTooLarge: the file is larger than ``limit``.
        OSError: any other reason it cannot be read.
        ValueError: the path is not a valid file name (an embedded NUL).
    """
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise NotAFile(path)
    if info.st_size > limit:
        raise FileTooLarge(info.st_size)
    with open(path, "rb") as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(None)
    return data

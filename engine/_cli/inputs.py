"""What the command line reads and checks: tool and query files, and option values.

Every mistake here is the caller's, so each becomes one ``ConfigError`` or ``CatalogError``
line (``toolroute: error: …``, exit status 2) that says what was expected and what came; a
tools file and a queries file are read by the same function and fail in the same words.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Sequence

from .._core import files
from .._core.catalog.catalog import Catalog
from .._core.errors import CatalogError, ConfigError
from .._core.evaluate import Query, queries_from_data

#: How many unknown expected ids an error lists before it says "and N more".
SHOWN_IDS = 5


def read_json(path: str | os.PathLike[str], what: str) -> object:
    """The JSON value of a ``what`` file ("tool", "queries").

    Raises:
        ConfigError: the file cannot be read, is not UTF-8, or is not JSON.
    """
    return files.read_json(path, what=f"{what} file", error=ConfigError)


def read_catalog(path: str | os.PathLike[str], format: str | None) -> Catalog:
    """The tools of a tool file; an empty one is refused (nothing could ever be selected).

    Raises:
        ConfigError: as ``read_json``, or the file holds no tools.
        CatalogError: a tool definition is malformed (the message names the file and tool).
    """
    data = read_json(path, "tool")
    where = os.fspath(path)
    try:
        catalog = Catalog.from_data(data, format=format)
    except CatalogError as exc:
        raise CatalogError(f"{where}: {exc}") from None
    if not catalog.tools:
        raise ConfigError(f"tool file {where!r} holds no tools: {_describe_empty(data)}")
    return catalog


def read_queries(path: str | os.PathLike[str]) -> list[Query]:
    """The labelled queries of a queries file.

    Raises:
        ConfigError: as ``read_json``, or an item has the wrong shape.
    """
    return queries_from_data(read_json(path, "queries"), os.fspath(path))


def check_expected_ids(queries: Sequence[Query], catalog: Catalog, where: str) -> None:
    """Refuse expected tool ids the catalogue does not have: they could only ever be misses.

    Raises:
        ConfigError: naming the unknown ids and the items that expect them.
    """
    unknown: dict[str, list[int]] = {}
    for index, query in enumerate(queries):
        for tool_id in dict.fromkeys(i for group in query.groups for i in group):
            if tool_id not in catalog:
                unknown.setdefault(tool_id, []).append(index)
    if not unknown:
        return
    listed = [
        f"{tool_id!r} (item {', '.join(map(str, items[:3]))}{', …' if len(items) > 3 else ''})"
        for tool_id, items in list(unknown.items())[:SHOWN_IDS]
    ]
    more = f" and {len(unknown) - SHOWN_IDS} more" if len(unknown) > SHOWN_IDS else ""
    raise ConfigError(
        f"{where}: {len(unknown)} expected tool id(s) are not in the catalogue: "
        f"{', '.join(listed)}{more}; expected ids are catalogue tool ids such as "
        f"{catalog.tools[0].id!r}"
    )


def finite_float(text: str) -> float:
    """An argparse type: a finite number (``nan`` and ``inf`` parse as floats, yet mean nothing)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number above zero (deadlines)."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1 (sample sizes)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer of at least 1, got {text!r}")
    return value


def _describe_empty(data: object) -> str:
    text = json.dumps(data)
    return text if len(text) <= 40 else text[:37] + "..."

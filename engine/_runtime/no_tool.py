"""Asking the engine's decider "does this request need any tool?" for ``select`` and
``prepare_step`` (``selection.no_tool``), under its own deadline.

Fail-open: a decider that is missing, fails, answers nothing readable or is late gives a
verdict of "not judged", and the selection stands as recall made it (a ``fail_open`` event
says so when the decider was there but gave no answer).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import trio

from .._core.catalog.catalog import Catalog
from .._core.config import EngineConfig
from .._core.decide.no_tool import MAX_LISTED, NoToolVerdict, needs_tool_request, read_verdict
from .._core.events import Event, FailOpen
from .._core.select.access import ToolAccess
from .decision_service import DecisionService
from .request_context import current

NOT_ASKED = NoToolVerdict(no_tool=False, probability=None, reason="")


def listed_tools(catalog: Catalog, ranked: Sequence[str], access: ToolAccess) -> list[str]:
    """The tools the question lists: the ranked ones first, then the rest of the catalogue
    (so the decider compares the request with every tool a small catalogue has), at most
    :data:`MAX_LISTED`, never one the caller may not see."""
    ids: dict[str, None] = {}
    for tool_id in itertools.chain(ranked, catalog.ids):  # stops at the cap
        if len(ids) >= MAX_LISTED:
            break
        if tool_id in catalog and access.permits(tool_id):
            ids.setdefault(tool_id, None)
    return list(ids)


async def ask_no_tool(
    decisions: DecisionService | None,
    config: EngineConfig,
    query: str,
    catalog: Catalog,
    ranked: Sequence[str],
    access: ToolAccess,
    *,
    operation: str,
    publish: Callable[[Event], None],
    session: str | None = None,
) -> NoToolVerdict:
    """The no-tool verdict for ``query``; :data:`NOT_ASKED` when the option is off, there is
    no decider, no text or no tool to ask about."""
    defaults = config.selection
    if not defaults.no_tool or decisions is None or decisions.decider is None:
        return NOT_ASKED
    ids = listed_tools(catalog, ranked, access)
    if not query.strip() or not ids:
        return NOT_ASKED
    deadline = defaults.no_tool_deadline_s
    listed = [(catalog[i].name, catalog[i].description) for i in ids]
    request = needs_tool_request(query, listed, timeout_s=deadline)
    result = None
    failure = "deadline"
    with trio.move_on_after(deadline):
        try:
            result = await decisions.try_decide(request, deadline_s=deadline)
            failure = "no answer"
        except Exception as exc:  # a broken decider is "not judged", never the caller's error
            failure = f"error: {type(exc).__name__}: {exc}"
    verdict = read_verdict(result, defaults.no_tool_min_confidence)
    if verdict.probability is None:
        tag = current()
        publish(
            FailOpen(
                operation=operation,
                what_failed="no_tool",
                reason=f"no-tool question: {failure}"[:500],
                session=session,
                request_id=tag.request_id if tag is not None else None,
            )
        )
    return verdict

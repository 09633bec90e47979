"""Prompt-cache mode: for hosts that send the whole tool list so the vendor's prompt cache
holds, and restrict what may be called instead of narrowing the list.

Three pieces, each a pure function:

- **stable order**: picks listed in catalogue order, never rank order, so the same set
  always renders as the same bytes;
- **sticky picks** (hysteresis): the set of callable tools changes only when the topic
  changes: a topic is a group of tools (a server's), and while a step's best pick or
  enough of its picks fall in the current topic the set stays as it is;
- **the restriction** in each vendor's form: OpenAI ``tool_choice`` ``allowed_tools``
  (Responses and Chat Completions), Gemini ``tool_config.function_calling_config``
  ``allowed_function_names``. Anthropic publishes no allow-list (its ``tool_choice`` is
  ``auto``, ``any``, ``tool`` or ``none``): a host enforces the set on the model's reply.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from ..catalog.catalog import Catalog
from ..errors import ConfigError

RESTRICTION_VENDORS = ("openai-responses", "openai", "gemini", "anthropic")
_SERVER = "\x00server:"  # a group key no tool id can be


def stable_order(ids: Iterable[str], order: Sequence[str]) -> tuple[str, ...]:
    """``ids`` in the order of ``order`` (the catalogue's), each once; ids ``order`` lacks
    come last, in the order given."""
    position = {tool_id: index for index, tool_id in enumerate(order)}
    given = {tool_id: index for index, tool_id in enumerate(dict.fromkeys(ids))}
    return tuple(sorted(given, key=lambda i: (position.get(i, len(position)), given[i])))


def _ratio(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < value <= 1.0:
        raise ConfigError(f"keep_overlap must be a number in (0, 1], got {value!r}")
    return float(value)


def _cap(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"max_set must be an integer of at least 1, got {value!r}")
    return value


@attrs.frozen(kw_only=True)
class StickyPicks:
    """The callable set of one conversation in prompt-cache mode.

    A topic is a group of tools: the tools of one server (``Tool.server``), or the tool
    itself when it has none. A step stays on the current topic while its best pick, or at
    least ``keep_overlap`` of its picks, belong to the current groups; the set then stays as
    it is.
    Otherwise the topic changed: the new groups are the best pick's, any group holding two or
    more of the picks, and every pick without a server; the set becomes their tools (or the
    picks alone when that would exceed ``max_set``).

    Attributes:
        tool_ids: the set, in catalogue order (what the restriction lists).
        groups: the topic's groups (opaque keys).
        changes: how many times the set changed (its first pick counts as none).
        keep_overlap: the share of a step's picks that keeps the set when its best pick
            left the topic.
        max_set: the most tools a topic's set may hold.
    """

    tool_ids: tuple[str, ...] = ()
    groups: frozenset[str] = frozenset()
    changes: int = 0
    keep_overlap: float = attrs.field(default=0.5, converter=_ratio)
    max_set: int = attrs.field(default=16, validator=lambda _s, _a, v: _cap(v))

    def advance(self, ranked: Sequence[str], catalog: Catalog | Sequence[str]) -> StickyPicks:
        """The set after a step whose ranking picked ``ranked`` (best first), in the
        catalogue the host's tool list follows (its order, and its servers as topics; a
        plain list of ids orders only).

        An empty ranking (nothing to judge, or every tool failed open) keeps the set: a
        step that could not judge is no evidence the topic changed.
        """
        picks = tuple(dict.fromkeys(ranked))
        if not picks:
            return self
        group = _grouping(catalog)
        if self.tool_ids and same_topic(self.groups, [group(i) for i in picks], self.keep_overlap):
            return self
        groups, tool_ids = _topic(picks, catalog, group, self.max_set)
        if tool_ids == self.tool_ids:
            return attrs.evolve(self, groups=groups)
        return attrs.evolve(
            self, tool_ids=tool_ids, groups=groups, changes=self.changes + bool(self.tool_ids)
        )


def same_topic(current: Iterable[str], picked: Sequence[str], keep_overlap: float) -> bool:
    """Whether a step whose picks fall in the groups ``picked`` (best first) is still on the
    topic of the groups ``current``: its best pick is, or at least ``keep_overlap`` of its
    picks are. (A follow-up often ranks a few stray tools; its best pick rarely strays.)"""
    held = set(current)
    if not picked or not held:
        return False
    if picked[0] in held:
        return True
    return sum(1 for g in picked if g in held) >= math.ceil(keep_overlap * len(picked))


def _grouping(catalog: Catalog | Sequence[str]) -> Callable[[str], str]:
    if not isinstance(catalog, Catalog):
        return lambda tool_id: tool_id
    servers = {tool.id: tool.server for tool in catalog}

    def group(tool_id: str) -> str:
        server = servers.get(tool_id)
        return f"{_SERVER}{server}" if server else tool_id

    return group


def _topic(
    picks: Sequence[str],
    catalog: Catalog | Sequence[str],
    group: Callable[[str], str],
    max_set: int,
) -> tuple[frozenset[str], tuple[str, ...]]:
    order = catalog.ids if isinstance(catalog, Catalog) else tuple(catalog)
    counts = Counter(group(i) for i in picks)
    # A tool without a server is a group of its own: every such pick joins the topic.
    groups = frozenset(
        {group(picks[0]), *(g for g, n in counts.items() if n >= 2 or not g.startswith(_SERVER))}
    )
    members = [i for i in order if group(i) in groups]
    if not members or len(members) > max_set:  # one group too large: the picks themselves
        return frozenset(group(i) for i in picks), stable_order(picks, order)
    return groups, stable_order([*members, *(i for i in picks if group(i) in groups)], order)


def restriction(vendor: str, names: Sequence[str], *, mode: str = "auto") -> dict[str, Any] | None:
    """What restricts the calls to ``names`` without touching the tool list, in ``vendor``'s
    form: the value of OpenAI's ``tool_choice`` (``openai-responses``, ``openai`` for Chat
    Completions) or of Gemini's ``tool_config``; ``None`` for ``anthropic``, which publishes
    no such field.

    Args:
        vendor: ``openai-responses``, ``openai``, ``gemini`` or ``anthropic``.
        names: the callable tools' names, as the tool list has them.
        mode: ``auto`` (the model may also answer in text) or ``required`` (it must call
            one of them).

    Raises:
        ConfigError: an unknown vendor or mode, or ``names`` is not a list of strings.
    """
    if mode not in ("auto", "required"):
        raise ConfigError(f"mode must be 'auto' or 'required', got {mode!r}")
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"names must be a list of tool names, got {names!r:.80}")
    match vendor:
        case "openai-responses":
            return {
                "type": "allowed_tools",
                "mode": mode,
                "tools": [{"type": "function", "name": name} for name in names],
            }
        case "openai":
            return {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": mode,
                    "tools": [{"type": "function", "function": {"name": name}} for name in names],
                },
            }
        case "gemini":
            # VALIDATED: calls limited to the names, and a text answer still allowed.
            return {
                "function_calling_config": {
                    "mode": "VALIDATED" if mode == "auto" else "ANY",
                    "allowed_function_names": list(names),
                }
            }
        case "anthropic":
            return None
    raise ConfigError(
        f"unknown vendor {vendor!r}; expected one of {', '.join(RESTRICTION_VENDORS)}"
    )


def permitted_call(names: Iterable[str], call: Mapping[str, Any] | str) -> bool:
    """Whether a tool call (its name, or a call object with ``name`` or
    ``function.name``) is to one of ``names``: how a host enforces the set where the vendor
    has no restriction field."""
    if isinstance(call, str):
        name: object = call
    else:
        function = call.get("function")
        name = function.get("name") if isinstance(function, Mapping) else call.get("name")
    return isinstance(name, str) and name in set(names)

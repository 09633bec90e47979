"""Prompt-cache mode: for hosts that send the whole tool list so the vendor's prompt cache
holds, and restrict what may be called instead of narrowing the list.

Three pieces, each a pure function:

- **stable order**: picks listed in catalogue order, never rank order, so the same set
  always renders as the same bytes;
- **sticky picks** (hysteresis): the set of callable tools changes only when the topic
  changes: while the best-ranked tool is already in the set and enough of the new picks
  are too, the set stays as it is;
- **the restriction** in each vendor's form: OpenAI ``tool_choice`` ``allowed_tools``
  (Responses and Chat Completions), Gemini ``tool_config.function_calling_config``
  ``allowed_function_names``. Anthropic publishes no allow-list (its ``tool_choice`` is
  ``auto``, ``any``, ``tool`` or ``none``): a host enforces the set on the model's reply.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ..errors import ConfigError

RESTRICTION_VENDORS = ("openai-responses", "openai", "gemini", "anthropic")


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


@attrs.frozen(kw_only=True)
class StickyPicks:
    """The callable set of one conversation in prompt-cache mode.

    Attributes:
        tool_ids: the set, in catalogue order (what the restriction lists).
        changes: how many times the set changed (its first pick counts as none).
        keep_overlap: the share of a step's picks that must already be in the set for it to
            stay (with the best pick in it too).
    """

    tool_ids: tuple[str, ...] = ()
    changes: int = 0
    keep_overlap: float = attrs.field(default=0.5, converter=_ratio)

    def advance(self, ranked: Sequence[str], order: Sequence[str]) -> StickyPicks:
        """The set after a step whose ranking picked ``ranked`` (best first).

        An empty ranking (nothing to judge, or every tool failed open) keeps the set: a
        step that could not judge is no evidence the topic changed.
        """
        picks = tuple(dict.fromkeys(ranked))
        if not picks:
            return self
        if not self.tool_ids:
            return attrs.evolve(self, tool_ids=stable_order(picks, order))
        if same_topic(self.tool_ids, picks, self.keep_overlap):
            return self
        return attrs.evolve(self, tool_ids=stable_order(picks, order), changes=self.changes + 1)


def same_topic(current: Sequence[str], picks: Sequence[str], keep_overlap: float) -> bool:
    """Whether ``picks`` (best first) still belong to the topic ``current`` serves: the best
    pick is in ``current`` and at least ``keep_overlap`` of the picks are."""
    held = set(current)
    if not picks or picks[0] not in held:
        return False
    overlap = sum(1 for tool_id in picks if tool_id in held)
    return overlap >= math.ceil(keep_overlap * len(picks))


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

"""Allow- and deny-lists: which tools a request may see at all, on top of the catalogue.

A host sets them per tenant (a ``ToolAccess`` it keeps per customer) and per request
(``allow=`` / ``deny=``); the two combine so that each can only narrow: a tool must be allowed
by both and denied by neither. Denial is absolute: no rule (always-active, related, tool sets,
found by search) and no fail-open path (every tool after idle steps, keyword-only recall)
shows a denied tool.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from ..errors import ConfigError


def _ids(value: object, field: str) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigError(f"{field} must be a list of tool ids, got {type(value).__name__}")
    ids = tuple(value)
    wrong = [i for i in ids if not isinstance(i, str)]
    if wrong:
        raise ConfigError(f"{field} must hold tool ids (strings), got {wrong[0]!r}")
    return frozenset(ids)


def _deny(value: object) -> frozenset[str]:
    return _ids(value, "deny") or frozenset()


def _allow(value: object) -> frozenset[str] | None:
    return _ids(value, "allow")


@attrs.frozen(kw_only=True)
class ToolAccess:
    """Which tools may be shown.

    Attributes:
        allow: the only tools that may be shown; ``None`` allows every tool.
        deny: tools never shown nor activated, whatever else applies.
    """

    allow: frozenset[str] | None = attrs.field(default=None, converter=_allow)
    deny: frozenset[str] = attrs.field(factory=frozenset, converter=_deny)

    @property
    def restricts(self) -> bool:
        """Whether any tool is kept out."""
        return self.allow is not None or bool(self.deny)

    def permits(self, tool_id: str) -> bool:
        return tool_id not in self.deny and (self.allow is None or tool_id in self.allow)

    def only(self, ids: Iterable[str]) -> tuple[str, ...]:
        """``ids`` this access permits, in order."""
        return tuple(i for i in ids if self.permits(i))

    def narrowed(self, other: ToolAccess | None) -> ToolAccess:
        """Both restrictions at once: allowed by both, denied by either."""
        if other is None:
            return self
        if self.allow is None:
            allow = other.allow
        elif other.allow is None:
            allow = self.allow
        else:
            allow = self.allow & other.allow
        return ToolAccess(allow=allow, deny=self.deny | other.deny)


#: No restriction.
OPEN = ToolAccess()


def request_access(
    allow: Iterable[str] | None, deny: Iterable[str] | None, tenant: ToolAccess | None
) -> ToolAccess:
    """The access of one request: its own ``allow``/``deny`` narrowed by its tenant's.

    Raises:
        ConfigError: ``tenant`` is not a ``ToolAccess``, or a list is not of tool ids.
    """
    if tenant is not None and not isinstance(tenant, ToolAccess):
        raise ConfigError(f"tenant must be a ToolAccess, got {type(tenant).__name__}")
    if allow is None and deny is None:
        return tenant or OPEN
    return ToolAccess(allow=allow, deny=deny).narrowed(tenant)


def recall_depth(wanted: int, access: ToolAccess, catalog_size: int) -> int:
    """How many candidates to rank so that ``wanted`` permitted ones can be among them: an
    allow-list ranks the whole catalogue (every allowed tool competes, however far down),
    a deny-list as many more as it denies."""
    if access.allow is not None:
        return max(catalog_size, 1)
    return wanted + len(access.deny)

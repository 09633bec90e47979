"""Public objects show their public module in ``repr``, errors and pickles.

Each public module (``toolroute``, ``toolroute.config`` …) lists its names in ``__all__`` and
calls :func:`publish` on its namespace, as trio does: an exported class or function defined in
a private module gets ``__module__`` set to the public module that exports it, so an error
prints as ``toolroute.ConfigError`` and a selection's class as ``toolroute.Selection``.
``__qualname__`` is left as it is. The first public module that exports an object names it;
``toolroute`` itself runs first, because every submodule import runs the package first.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import attrs

_T = TypeVar("_T")


def publish(module: str, namespace: Mapping[str, Any]) -> None:
    """Rename the home of every class and function in ``namespace["__all__"]`` to ``module``.

    Only objects still named by a private module of toolroute are renamed, so an object
    exported by several public modules keeps the first one's name.

    Args:
        module: the public module's name (its ``__name__``).
        namespace: the module's ``globals()``.

    Raises:
        KeyError: the module has no ``__all__``.
    """
    for name in namespace["__all__"]:
        value = namespace[name]
        if isinstance(value, type) or callable(value):
            _rename(value, module)


def is_private_home(module: str) -> bool:
    """``module`` is a private module of toolroute (``toolroute._core.catalog.catalog`` …)."""
    return module.split(".")[0] == "toolroute" and any(
        part.startswith("_") for part in module.split(".")
    )


def _rename(value: Any, module: str) -> None:
    home = getattr(value, "__module__", None)
    if not isinstance(home, str) or not is_private_home(home):
        return
    if isinstance(value, type):
        if attrs.has(value):
            # Resolve string annotations while the defining module is still the home:
            # cattrs resolves them later through ``sys.modules[cls.__module__]``.
            # A name imported only for type checkers stays a string; cattrs never needs it.
            # The resolved types replace the strings, so ``typing.get_type_hints`` keeps
            # working once the home names a module that lacks the annotations' names.
            with contextlib.suppress(NameError):
                attrs.resolve_types(value)
                own = inspect.get_annotations(value)
                value.__annotations__ = {
                    f.name: f.type for f in attrs.fields(value) if f.name in own
                }
        for member in _members(value, home):
            member.__module__ = module
    value.__module__ = module


def _members(cls: type, home: str) -> Iterable[Any]:
    # Functions only: ``attrs.resolve_types`` stores the class itself in its namespace, and
    # renaming the class while its namespace is read fails on Python 3.13.
    for member in list(vars(cls).values()):
        function = getattr(member, "__func__", member)  # classmethod / staticmethod
        if inspect.isfunction(function) and function.__module__ == home:
            yield function


class NoPublicConstructor(type):
    """Metaclass of a class only the library creates (``Engine``: ``open_engine`` owns it).

    Calling the class raises ``TypeError`` naming the way in (the class's ``_way_in``); the
    library calls ``_create``.
    """

    def __call__(cls, *args: object, **kwargs: object) -> Any:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} cannot be constructed by hand;"
            f" use {getattr(cls, '_way_in', 'the function that returns it')}"
        )

    def _create(cls: type[_T], *args: object, **kwargs: object) -> _T:
        instance: _T = super().__call__(*args, **kwargs)  # type: ignore[misc]
        return instance

"""The seams between the engine and the models it uses."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from .decide.limits import DecisionLimits
from .decide.types import DecisionRequest, DecisionResult
from .errors import ConfigError, given
from .recall.quantize import Int8Product


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors, synchronously.

    The engine calls ``embed`` from a worker thread. Implementations raise
    ``toolroute.EmbedderError`` (or ``ProviderError`` for remote ones) when they
    cannot produce vectors; the caller decides how to degrade.
    """

    #: Model and weights fingerprint; two embedders with equal identity give equal vectors.
    identity: str
    #: Vector width.
    dim: int
    #: The most texts one ``embed`` call sends to the model at once.
    max_batch: int

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Vectors for ``texts``: float32 of shape ``(len(texts), dim)``, rows L2-normalised."""
        ...


@runtime_checkable
class Decider(Protocol):
    """Answers typed questions about a state: one request, one provider call.

    ``decide`` is strict: it raises ``toolroute.DecisionError`` (with its
    ``kind``) and refuses a request over ``limits`` before any network call.
    Batching and fail-open live in ``toolroute.try_decide``.

    Optional attributes: ``reads_similar_uses = True`` asks an engine that learned from use
    to add ``similar_requests`` and each server's ``similar_uses`` to routing states;
    ``min_drop_confidence`` (a float) is the least confident "not needed" routing may drop a
    server on, when stricter than ``RoutingConfig.min_drop_confidence``.
    """

    #: The provider's canonical name (``typesafe``, ``laya`` …).
    name: str
    #: Caps, token-estimate rates and the default timeout.
    limits: DecisionLimits

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        """Send one request; answers come back under the request's question ids."""
        ...


@runtime_checkable
class Generator(Protocol):
    """A chat model that answers a prompt with JSON matching a schema.

    Callers bound the call with a trio cancel scope; implementations raise
    ``toolroute.ProviderError`` when the model cannot be reached or answers
    something that is not JSON.
    """

    #: The model (and endpoint) that generates; part of enrichment cache keys.
    identity: str

    async def generate_json(self, prompt: str, schema: Mapping[str, Any]) -> object:
        """The decoded JSON answer to ``prompt``; it should match ``schema``, unchecked."""
        ...


# -- The check at the edge: a provider the caller passes in ---------------------------------

#: What each seam needs of an object, as the engine uses it: (attributes, methods, where
#: the usual ones come from). ``runtime_checkable``'s ``isinstance`` would not say what is
#: missing, nor that a method is not callable.
_NEEDS: dict[type, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    Embedder: (
        ("identity", "dim", "max_batch"),
        ("embed",),
        "for the bundled model pass toolroute.providers.default_embedder() (or"
        " MiniLMEmbedder()); HashingEmbedder() needs no model",
    ),
    Decider: (
        ("name", "limits"),
        ("decide",),
        "build one with toolroute.providers.LocalDecider() or default_decider(<provider name>)",
    ),
    Generator: (
        ("identity",),
        ("generate_json",),
        "build one with toolroute.providers.OpenAICompatibleGenerator(...) or"
        " AnthropicGenerator(...)",
    ),
}


def check_provider(value: object, argument: str, protocol: type) -> None:
    """Refuse ``value`` for ``argument`` unless it is ``None`` or has what ``protocol``
    (``Embedder``, ``Decider`` or ``Generator``) asks of it.

    A caller's mistake is an error at the edge, never a provider failure found deep in the
    engine (an ``AttributeError`` that would fail open).

    Raises:
        ConfigError: naming ``argument``, what was expected (and what is missing) and what
            came; a string gets a hint at the call that builds the provider it names.
    """
    if value is None:
        return
    attributes, methods, usual = _NEEDS[protocol]
    missing = [name for name in attributes if not hasattr(value, name)]
    missing += [f"{name}()" for name in methods if not callable(getattr(value, name, None))]
    if not missing:
        return
    kind = protocol.__name__
    a_kind = f"{'an' if kind[0] in 'AEIOU' else 'a'} {kind}"
    wanted = ", ".join([*attributes, *(f"{name}()" for name in methods)])
    message = f"{argument} must be {a_kind} (an object with {wanted}) or None,"
    message += f" got {given(value)}"
    if isinstance(value, str):
        message += f"; a name is not {a_kind}: {_by_name(protocol, value)}"
    else:
        if len(missing) < len(attributes) + len(methods):
            message += f" (it has no {', '.join(missing)})"
        message += f"; {usual}"
    raise ConfigError(message)


def _by_name(protocol: type, name: str) -> str:
    """The call that builds the provider a string names, for ``check_provider``'s error."""
    if protocol is Decider:
        local = " or LocalDecider()" if name.strip().lower() == "local" else ""
        return f"use toolroute.providers.default_decider({name!r}){local}"
    if protocol is Embedder and name.strip().lower() == "hashing":
        return "use toolroute.providers.HashingEmbedder()"
    return _NEEDS[protocol][2]


@runtime_checkable
class Int8Kernel(Protocol):
    """An int8 matrix product for large catalogues: an optional capability of a provider.

    ``kernel(rows)`` loads a ``(n, dim)`` int8 tool matrix and returns the function that
    scores one quantised query (uint8, ``dim`` values) against it: the int32 products
    ``rows @ (query - 64)``, exact for every query ``quantize_query`` makes (values 1 to 127).
    ``ToolIndex`` uses ``toolroute.providers.OnnxInt8Kernel`` by default and checks whichever
    kernel it is given when it builds the index (extreme rows and queries, and a sample of
    the catalogue, against numpy's exact product); a kernel that fails is not used.
    """

    def __call__(self, rows: npt.NDArray[np.int8]) -> Int8Product:
        """The product over ``rows``; raises when the kernel cannot load them."""


# -- Optional capability: an embedder that can count word pieces (long requests by parts) ---


@runtime_checkable
class CountsTokens(Protocol):
    """An ``Embedder`` that says how many word pieces a text has and how many of them it
    reads; a request past its reach is embedded by parts (``_core.recall.parts``)."""

    #: Word pieces the model reads of one text, special tokens excluded.
    reach: int

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Word pieces of each text, special tokens excluded, past the reach too."""
        ...


# -- Optional capability: an embedder that can build a fast tier of its own model -----------
# The runtime asks for this protocol, never for a provider class: any embedder that
# implements ``open_fast_tier`` gets a fast tier rung under load.


@runtime_checkable
class FastTierModel(Protocol):
    """A built fast tier: request vectors in its embedder's space from a cheap model, fitted
    to what the full model answered. ``embed`` may run in any thread while the others run in
    one background thread."""

    #: Requests (not catalogue texts) its table was fitted on.
    @property
    def served_texts(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit request vectors, ``(len(texts), dim)``, in the full model's space."""
        ...

    def learn(self, texts: Sequence[str], vectors: npt.NDArray[np.float32]) -> None:
        """Add requests with the full model's vectors (milliseconds)."""
        ...

    def learn_tools(self, texts: Sequence[str], vectors: npt.NDArray[np.float32]) -> None:
        """Add catalogue texts (each distinct text counts once, across restarts)."""
        ...

    def refit(self, *, should_stop: Callable[[], bool] | None = None) -> None:
        """Fit again and swap the table in whole; raise when ``should_stop`` turns true
        (asked between steps), keeping the old table."""
        ...

    def save(self) -> None:
        """Persist what it learned (statistics, never request text); fail-open."""
        ...


@runtime_checkable
class BuildsFastTier(Protocol):
    """An ``Embedder`` that can build a fast tier of its own model (``open_fast_tier``)."""

    def open_fast_tier(
        self,
        *,
        cache_dir: str | None,
        tool_texts: Sequence[str],
        tool_vectors: npt.NDArray[np.float32],
        should_stop: Callable[[], bool],
        fit_from: int = 0,
    ) -> FastTierModel:
        """The fast tier, loaded from ``cache_dir`` or built (``None``: kept in memory), with
        the tool texts learned
        (and fitted at once if it has served at least ``fit_from`` requests: the engine
        answers from it only past that many); runs in a background thread and raises when
        ``should_stop`` turns true."""
        ...

"""Scripted fakes (public as ``toolroute.testing``): embedder, decider, generator, inline CPU."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal, Protocol, TypeAlias

import numpy as np
import numpy.typing as npt
import trio

from .._core.decide.limits import DecisionLimits
from .._core.decide.types import (
    Answer,
    BooleanAnswer,
    BooleanQuestion,
    DecisionRequest,
    DecisionResult,
)
from .._core.errors import DecisionError
from ..providers import HashingEmbedder

#: One call's behaviour: answer, raise, hang (under ``inline_cpu``), or answer wrongly.
Fault: TypeAlias = Literal["ok", "raise", "hang", "wrong_count", "wrong_width", "nan", "zero"]
_FAULTS = ("ok", "raise", "hang", "wrong_count", "wrong_width", "nan", "zero")

RunCpu: TypeAlias = Callable[..., Awaitable[Any]]


class ScriptedEmbedder:
    """An ``Embedder`` with fixed vectors, a scripted latency and scripted faults.

    Texts get the hashing embedder's vectors (deterministic: shared words, similar vectors)
    unless ``vectors`` fixes theirs. ``embed`` itself never sleeps (embedders are
    synchronous); ``delay`` and ``"hang"`` take effect when the engine runs it through
    :func:`inline_cpu`, in trio time.

    Args:
        dim: vector width.
        vectors: fixed vectors for some texts (normalised to unit length here).
        delay: seconds of trio time each call takes under ``inline_cpu``.
        faults: one fault per call, in order, repeated: ``ok``, ``raise``, ``hang``,
            ``wrong_count`` (a row missing), ``wrong_width``, ``nan``, ``zero`` vectors.
        fail: every call raises (the same as ``faults=["raise"]``).
        error: what a ``raise`` fault raises (a ``RuntimeError`` by default).
        identity: the cache key of its vectors.
        max_batch: the batch size it declares.

    Attributes:
        calls: the number of texts in each call, in order.
        texts: every text it was asked to embed, in order.

    Raises:
        ValueError: an unknown fault or a fixed vector of another width.
    """

    def __init__(
        self,
        *,
        dim: int = 64,
        vectors: Mapping[str, Sequence[float]] | None = None,
        delay: float = 0.0,
        faults: Sequence[Fault] = (),
        fail: bool = False,
        error: Exception | None = None,
        identity: str = "scripted",
        max_batch: int = 16,
    ) -> None:
        unknown = [f for f in faults if f not in _FAULTS]
        if unknown:
            raise ValueError(f"unknown faults {unknown}; expected some of {', '.join(_FAULTS)}")
        self.identity, self.dim, self.max_batch = identity, dim, max_batch
        self.delay = delay
        self.faults: list[Fault] = ["raise"] if fail else list(faults)
        self.error = error if error is not None else RuntimeError("scripted embedder failure")
        self.calls: list[int] = []
        self.texts: list[str] = []
        self._hashing = HashingEmbedder(dim=dim)
        self._fixed: dict[str, npt.NDArray[np.float32]] = {}
        for text, vector in (vectors or {}).items():
            row = np.asarray(vector, dtype=np.float32)
            if row.shape != (dim,):
                raise ValueError(
                    f"the vector for {text!r} has shape {row.shape}; expected ({dim},)"
                )
            norm = float(np.linalg.norm(row))
            self._fixed[text] = row / norm if norm else row
        #: Whether the last call hung (``inline_cpu`` then never returns it).
        self.hanging = False

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Vectors for ``texts``, or the scheduled fault.

        Raises:
            Exception: ``error`` when the scheduled fault is ``raise``.
        """
        fault = self.faults[len(self.calls) % len(self.faults)] if self.faults else "ok"
        self.calls.append(len(texts))
        self.texts.extend(texts)
        self.hanging = fault == "hang"
        if fault == "raise":
            raise self.error
        vectors = self._hashing.embed(list(texts)) if texts else np.zeros((0, self.dim), np.float32)
        for row, text in enumerate(texts):
            if text in self._fixed:
                vectors[row] = self._fixed[text]
        if fault == "wrong_count":
            return vectors[:-1] if len(vectors) else np.zeros((1, self.dim), np.float32)
        if fault == "wrong_width":
            return np.ones((len(texts), self.dim + 1), np.float32)
        if fault == "nan":
            return np.full_like(vectors, np.nan)
        if fault == "zero":
            return np.zeros_like(vectors)
        return vectors


def inline_cpu(embedder: ScriptedEmbedder | None = None) -> RunCpu:
    """A ``run_cpu`` for ``open_engine`` that runs CPU work inline, for trio's ``MockClock``.

    Worker threads and an autojumping clock give spurious timeouts (the clock jumps while a
    thread works), so tests run the work in the trio thread instead, inside the engine's
    limiter. With ``embedder``, each call first sleeps its ``delay`` in trio time, and a call
    in which it hung never returns (until the caller's deadline cancels it).

    Args:
        embedder: the scripted embedder whose latency and hangs to play.

    Returns:
        ``async run_cpu(fn, *args, limiter)``.

    **Cancellation:** the sleep and the hang are trio checkpoints, cancelled like any
    other; the work itself runs to completion once started.
    """

    async def run_cpu(fn: Callable[..., Any], *args: Any, limiter: trio.CapacityLimiter) -> Any:
        async with limiter:
            if embedder is not None:
                await trio.sleep(embedder.delay)
                embedder.hanging = False
            result = fn(*args)
            if embedder is not None and embedder.hanging:
                await trio.sleep_forever()  # a hung model, in virtual time
            return result

    return run_cpu


class _Paced(Protocol):
    in_flight: int
    peak: int

    @property
    def hang(self) -> bool: ...
    @property
    def delay(self) -> float: ...
    @property
    def error(self) -> BaseException | None: ...


@asynccontextmanager
async def _scripted_call(fake: _Paced) -> AsyncIterator[None]:
    """One call of a scripted fake: counted while in flight, paced by ``hang`` and ``delay``,
    failed by ``error``."""
    fake.in_flight += 1
    fake.peak = max(fake.peak, fake.in_flight)
    try:
        if fake.hang:
            await trio.sleep_forever()
        await trio.sleep(fake.delay)
        if fake.error is not None:
            raise fake.error
        yield
    finally:
        fake.in_flight -= 1


class ScriptedDecider:
    """A ``Decider`` with scripted answers, latency and failures; it records every request.

    Args:
        answers: answers by question id: a probability (for a boolean question) or an
            ``Answer``; or a function from the request to such a mapping.
        default: the probability given to boolean questions ``answers`` does not mention
            (``None`` leaves them unanswered, as a model that skipped them).
        delay: seconds of trio time each call takes.
        error: raised by every call (after ``delay``).
        hang: every call sleeps until cancelled.
        limits: the caps it declares (``DecisionLimits()`` by default).
        name: the provider name it reports.
        unasked: answers it adds under ids no request asks, as a model that strays past its
            questions (answers only ever go to asked ids otherwise).

    Attributes:
        requests: every request, in order.
        in_flight: calls running now; ``peak``: the most at once.
    """

    def __init__(
        self,
        answers: Mapping[str, float | Answer]
        | Callable[[DecisionRequest], Mapping[str, float | Answer]]
        | None = None,
        *,
        default: float | None = 0.95,
        delay: float = 0.0,
        error: DecisionError | None = None,
        hang: bool = False,
        limits: DecisionLimits | None = None,
        name: str = "scripted",
        unasked: Mapping[str, Answer] | None = None,
    ) -> None:
        self.answers = answers
        self.default = default
        self.delay = delay
        self.error = error
        self.hang = hang
        self.limits = limits if limits is not None else DecisionLimits()
        self.name = name
        self.unasked = dict(unasked or {})
        self.requests: list[DecisionRequest] = []
        self.in_flight = 0
        self.peak = 0

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        """The scripted answers to ``request``.

        Raises:
            DecisionError: the configured ``error``.

        **Cancellation:** ``delay`` and ``hang`` are trio sleeps; cancelling them is safe.
        """
        self.requests.append(request)
        async with _scripted_call(self):
            script = self.answers(request) if callable(self.answers) else (self.answers or {})
            answers: dict[str, Answer] = {}
            for key, question in request.questions.items():
                value = script.get(
                    key, self.default if isinstance(question, BooleanQuestion) else None
                )
                if value is None:
                    continue
                answers[key] = (
                    BooleanAnswer(float(value)) if isinstance(value, int | float) else value
                )
            answers |= {k: a for k, a in self.unasked.items() if k not in request.questions}
            return DecisionResult(model=f"{self.name}-1", provider=self.name, answers=answers)


class ScriptedGenerator:
    """A ``Generator`` with a scripted answer, latency and failures; it records every prompt.

    An answer that is an exception (or a function's answer that is one) is raised instead,
    so one function can answer some prompts and fail others.

    Args:
        answer: the decoded JSON it returns, or a function ``(prompt, schema) -> answer``.
        delay: seconds of trio time each call takes.
        error: raised by every call (after ``delay``).
        hang: every call sleeps until cancelled.
        identity: the model identity it reports (part of enrichment cache keys).

    Attributes:
        prompts: every prompt, in order; ``schemas``: the schema of each.
        in_flight: calls running now; ``peak``: the most at once.
    """

    def __init__(
        self,
        answer: object | Callable[[str, Mapping[str, Any]], object] = None,
        *,
        delay: float = 0.0,
        error: Exception | None = None,
        hang: bool = False,
        identity: str = "scripted-generator",
    ) -> None:
        self.answer = answer
        self.delay = delay
        self.error = error
        self.hang = hang
        self.identity = identity
        self.prompts: list[str] = []
        self.schemas: list[Mapping[str, Any]] = []
        self.in_flight = 0
        self.peak = 0

    async def generate_json(self, prompt: str, schema: Mapping[str, Any]) -> object:
        """The scripted answer to ``prompt``.

        Raises:
            Exception: the configured ``error``, or an answer that is an exception.

        **Cancellation:** ``delay`` and ``hang`` are trio sleeps; cancelling them is safe.
        """
        self.prompts.append(prompt)
        self.schemas.append(schema)
        async with _scripted_call(self):
            answer = self.answer(prompt, schema) if callable(self.answer) else self.answer
        if isinstance(answer, BaseException):
            raise answer
        return answer

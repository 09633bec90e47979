"""``LocalDecider``: decision questions answered offline by the bundled embedder, calibrated.

No network and no key: each boolean question becomes a few features of the request and the
question's subject (:mod:`.local_features`), and a small logistic model per question kind,
fitted on the dev splits of MetaTool, BFCL and LiveMCPBench and shipped as
``local_calibration.json``, turns them into a probability. Refit with
``python tests/bench/fit_local_decider.py``.
"""

from __future__ import annotations

import functools
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from importlib import resources
from typing import Any

import attrs
import numpy as np
import trio

from ..._core.decide.limits import DecisionLimits
from ..._core.decide.types import (
    Answer,
    BooleanAnswer,
    BooleanQuestion,
    ChoiceAnswer,
    ChoiceQuestion,
    DecisionRequest,
    DecisionResult,
)
from ..._core.errors import ConfigError, DecisionError, DecisionErrorKind
from ..._core.protocols import Embedder
from .local_features import (
    FEATURES,
    Floats,
    Kind,
    Subject,
    question_subjects,
    request_text,
    usage_shifts,
)
from .local_features import subject_features as subject_features

#: The calibration file shipped with the package.
BUNDLED = "local_calibration.json"
#: Routing's gate on these answers: chosen on LiveMCPBench dev with learned use
#: (``tests/bench/fit_local_decider.py``: every needed server kept for 98.7 % of dev tasks).
ROUTING_GATE = 0.99

RunCpu = Callable[..., Awaitable[Any]]


def _weights(value: Any) -> tuple[float, ...]:
    return tuple(float(v) for v in value)


@attrs.frozen(kw_only=True)
class CalibrationModel:
    """``p = 1 / (1 + exp(-(bias + weights · features + request_weights · request)))``.

    ``request_weights`` (empty, or one per dimension of the embedder) weigh the request's
    own vector, which follows the named features in an ``any`` question's row.
    """

    features: tuple[str, ...] = attrs.field(converter=tuple)
    weights: tuple[float, ...] = attrs.field(converter=_weights)
    bias: float = attrs.field(converter=float)
    request_weights: tuple[float, ...] = attrs.field(default=(), converter=_weights)

    def __attrs_post_init__(self) -> None:
        if len(self.features) != len(self.weights):
            raise ConfigError(
                f"a calibration needs one weight per feature, got {len(self.weights)}"
                f" weights for {len(self.features)} features"
            )
        if not all(map(math.isfinite, (*self.weights, *self.request_weights, self.bias))):
            raise ConfigError(f"calibration weights must be finite, got {self.weights!r}")

    def logit(self, row: Floats) -> float:
        named = len(self.weights)
        z = self.bias + float(np.dot(self.weights, row[:named]))
        if self.request_weights:
            request = row[named:]
            if len(request) != len(self.request_weights):
                raise ConfigError(
                    f"the calibration weighs a {len(self.request_weights)}-dimensional request"
                    f" vector; the embedder gives {len(request)} dimensions"
                )
            z += float(np.dot(self.request_weights, request))
        return z


@attrs.frozen(kw_only=True)
class UsageModel:
    """How what similar learned requests used moves a server's probability: ``weight *
    shift`` added to its logit, ``shift`` from :func:`~.local_features.usage_shifts` with
    ``pseudo`` requests of shrinkage. No intercept: a server used as often as the average,
    or an engine that learned too little to tell, keeps the text's probability."""

    weight: float = attrs.field(converter=float)
    pseudo: float = attrs.field(converter=float)

    def __attrs_post_init__(self) -> None:
        if not (math.isfinite(self.weight) and math.isfinite(self.pseudo) and self.pseudo > 0):
            raise ConfigError(
                f"a usage model needs a finite weight and pseudo > 0, got {attrs.asdict(self)!r}"
            )


@attrs.frozen(kw_only=True)
class Calibration:
    """How features become probabilities, for the embedder they were measured with.

    Attributes:
        embedder: the identity of the embedder the features were fitted with.
        one: the model for questions about one subject.
        any: the model for questions about any of a list.
        usage: for a server the engine's routing counted similar learned requests for,
            how the count moves its probability (``None``: it does not).
        note: how it was fitted (method, data, command), for people.
    """

    embedder: str
    one: CalibrationModel
    any: CalibrationModel
    usage: UsageModel | None = None
    note: str = ""

    def __attrs_post_init__(self) -> None:
        for kind in ("one", "any"):
            model: CalibrationModel = getattr(self, kind)
            if model.features != FEATURES[kind]:
                raise ConfigError(
                    f"the {kind!r} calibration must use the features {FEATURES[kind]!r},"
                    f" got {model.features!r}"
                )

    def model(self, kind: Kind) -> CalibrationModel:
        return self.one if kind == "one" else self.any

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Calibration:
        """Read ``{"embedder", "one": {"features", "weights", "bias"}, "any": {...}}``.

        Raises:
            ConfigError: a field is missing or of the wrong shape.
        """
        try:
            return cls(
                embedder=str(data["embedder"]),
                one=CalibrationModel(**data["one"]),
                any=CalibrationModel(**data["any"]),
                usage=UsageModel(**data["usage"]) if data.get("usage") is not None else None,
                note=str(data.get("note", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(
                "a calibration is {embedder, one: {features, weights, bias}, any: {...}};"
                f" reading it failed: {type(exc).__name__}: {exc}"
            ) from exc

    def to_mapping(self) -> dict[str, Any]:
        return {
            "embedder": self.embedder,
            "note": self.note,
            "one": attrs.asdict(self.one),
            "any": attrs.asdict(self.any),
            "usage": attrs.asdict(self.usage) if self.usage is not None else None,
        }

    @classmethod
    def bundled(cls) -> Calibration:
        """The calibration fitted for the bundled MiniLM model."""
        text = resources.files(__package__).joinpath(BUNDLED).read_text("utf-8")
        return cls.from_mapping(json.loads(text))


def _sigmoid(z: float) -> float:
    # Split by sign so that exp never overflows.
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


class LocalDecider:
    """A ``Decider`` that needs no network: the bundled embedder, calibrated.

    It answers boolean questions ("does the request need the server X?", "... any of
    ``available_tools``?") with a calibrated probability, and choice questions with a
    distribution over the options. In an engine that learned from use it also reads how
    many of the similar learned requests used each server (``reads_similar_uses``): a
    server those requests needed is kept more readily, one none of them touched is
    dropped more readily. A question naming ``available_servers[i]`` (or
    ``available_tools[i]``) is about that entry of the state; one naming the list without
    an index is about any of its entries; any other question is about its own statement.
    The request is the state (a string) or its ``request``/``query`` field.

    Args:
        embedder: the embedder to read texts with; the bundled MiniLM model by default.
        calibration: the feature-to-probability models; the bundled calibration (fitted
            for the bundled model) by default. A different embedder needs its own.
        run_cpu: how the embedding runs: ``await run_cpu(fn, *args)``; a worker thread by
            default (tests under a mock clock pass an inline one).
        cache_size: subject texts whose vectors are kept (servers are asked about again
            and again).
        min_drop_confidence: the least confident "not needed" routing may drop a server on
            (the stricter of this and ``RoutingConfig.min_drop_confidence`` applies): with
            70 calibrated questions a task, routing's default gate (p ≤ 0.2) drops a needed
            server for most tasks; 0.99 (p ≤ 0.005) is the gate chosen on LiveMCPBench dev.

    Raises:
        ConfigError: an embedder other than the default without a calibration of its own.
    """

    name: str = "local"
    #: The engine's routing tells it what similar learned requests used.
    reads_similar_uses: bool = True
    #: No caps: nothing leaves the process. The timeout covers one embedding call.
    limits: DecisionLimits = DecisionLimits(timeout_s=10.0)

    def __init__(
        self,
        *,
        embedder: Embedder | None = None,
        calibration: Calibration | None = None,
        run_cpu: RunCpu | None = None,
        cache_size: int = 4096,
        min_drop_confidence: float = ROUTING_GATE,
    ) -> None:
        number = isinstance(min_drop_confidence, int | float) and not isinstance(
            min_drop_confidence, bool
        )
        if not (number and 0 <= min_drop_confidence <= 1):
            raise ConfigError(
                f"min_drop_confidence must be between 0 and 1, got {min_drop_confidence!r}"
            )
        self.min_drop_confidence = float(min_drop_confidence)
        if embedder is not None and calibration is None:
            raise ConfigError(
                "LocalDecider(embedder=...) needs calibration=... fitted for that embedder;"
                " the bundled calibration is for the bundled MiniLM model"
            )
        self._embedder = embedder
        self.calibration = calibration if calibration is not None else Calibration.bundled()
        weighed = len(self.calibration.any.request_weights)
        if embedder is not None and weighed and weighed != embedder.dim:
            raise ConfigError(
                f"the calibration weighs {weighed}-dimensional request vectors; the embedder"
                f" gives {embedder.dim}"
            )
        self._run_cpu: RunCpu = run_cpu or functools.partial(
            trio.to_thread.run_sync, abandon_on_cancel=True
        )
        self._cache: OrderedDict[str, Floats] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LocalDecider(embedder={self.calibration.embedder!r})"

    @property
    def model(self) -> str:
        return f"local:{self.calibration.embedder}"

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        """Answer ``request`` offline.

        Args:
            request: the state and questions; ``timeout_s`` bounds the embedding.

        Returns:
            A probability per boolean question, a distribution per choice question.

        Raises:
            DecisionError: ``invalid_request`` for a score question (not answered
                locally); ``timeout`` past the deadline; ``server`` when the embedder
                fails or answers with unusable vectors.

        **Cancellation:** the embedding runs in a worker thread that a caller's cancel
        scope abandons.
        """
        for key, question in request.questions.items():
            if not isinstance(question, BooleanQuestion | ChoiceQuestion):
                raise DecisionError(
                    DecisionErrorKind.INVALID_REQUEST,
                    f"the local decider answers boolean and choice questions; question"
                    f" {key!r} is a {type(question).__name__}",
                )
        started = trio.current_time()
        timeout = request.timeout_s or self.limits.timeout_s
        with trio.move_on_after(timeout):
            answers = await self._run_cpu(self._answer, request)
            return DecisionResult(
                model=self.model,
                provider=self.name,
                answers=answers,
                latency_ms=(trio.current_time() - started) * 1000.0,
            )
        raise DecisionError(
            DecisionErrorKind.TIMEOUT, f"local: no answer within {timeout:g} s", retryable=True
        )

    async def aclose(self) -> None:
        """Forget the cached vectors; the decider holds no connection to close."""
        with self._lock:
            self._cache.clear()

    def features(self, request: DecisionRequest) -> dict[str, Any]:
        """Each boolean question's ``(subject kind, feature row, usage shift or None)``;
        for a choice, ``(option, row)`` per option.

        What the calibration is fitted on; synchronous (it embeds).
        """
        subjects = question_subjects(request.questions, request.state)
        flat: list[Subject] = []
        for found in subjects.values():
            flat.extend(s for _, s in found) if isinstance(found, list) else flat.append(found)
        text = request_text(request.state)
        vectors = self._vectors([text, *(t for s in flat for t in s.texts)])
        query = vectors[text]
        out: dict[str, Any] = {}
        for key, found in subjects.items():
            if isinstance(found, list):
                rows = subject_features([s for _, s in found], query, vectors, text)
                out[key] = [(name, row) for (name, _), row in zip(found, rows, strict=True)]
        # Boolean questions of one request are siblings of each other (a routing request).
        booleans = [k for k, f in subjects.items() if isinstance(f, Subject)]
        siblings = [subjects[k] for k in booleans]
        rows = subject_features(siblings, query, vectors, text)
        pseudo = self.calibration.usage.pseudo if self.calibration.usage is not None else 1.0
        shifts = usage_shifts(siblings, pseudo)
        for key, row, shift in zip(booleans, rows, shifts, strict=True):
            out[key] = (subjects[key].kind, row, shift)
        return out

    def _logit(self, kind: Kind, row: Floats, shift: float | None) -> float:
        z = self.calibration.model(kind).logit(row)
        usage = self.calibration.usage
        if shift is not None and usage is not None:
            z += usage.weight * shift
        return z

    def _answer(self, request: DecisionRequest) -> dict[str, Answer]:
        answers: dict[str, Answer] = {}
        for key, found in self.features(request).items():
            if isinstance(found, tuple):
                p = _sigmoid(self._logit(*found))
                if math.isfinite(p):
                    answers[key] = BooleanAnswer(probability=p)
                continue
            logits = np.array([self.calibration.one.logit(row) for _, row in found])
            if not np.isfinite(logits).all():
                continue
            weights = np.exp(logits - logits.max())
            probs = weights / weights.sum()
            best = int(np.argmax(probs))
            answers[key] = ChoiceAnswer(
                choice=found[best][0],
                probabilities={name: float(p) for (name, _), p in zip(found, probs, strict=True)},
                confidence=float(probs[best]),
            )
        return answers

    def _embedder_now(self) -> Embedder:
        if self._embedder is None:
            from .._embedders.minilm import default_embedder

            embedder = default_embedder()
            if embedder.identity != self.calibration.embedder:
                raise DecisionError(
                    DecisionErrorKind.SERVER,
                    f"local: the calibration is for {self.calibration.embedder!r}, the"
                    f" bundled model is {embedder.identity!r}; refit it",
                )
            self._embedder = embedder
        return self._embedder

    def _vectors(self, texts: Sequence[str]) -> dict[str, Floats]:
        query, *subjects = texts
        with self._lock:  # worker threads share the cache
            vectors = {t: self._cache[t] for t in subjects if t in self._cache}
        missing = list(dict.fromkeys(t for t in subjects if t not in vectors))
        try:
            found = np.asarray(self._embedder_now().embed([query, *missing]), dtype=np.float64)
        except DecisionError:
            raise
        except Exception as exc:  # the embedder's failure is this provider's failure
            raise DecisionError(
                DecisionErrorKind.SERVER, f"local: embedding failed: {type(exc).__name__}: {exc}"
            ) from exc
        if found.ndim != 2 or found.shape[0] != len(missing) + 1 or not np.isfinite(found).all():
            raise DecisionError(
                DecisionErrorKind.SERVER,
                f"local: expected {len(missing) + 1} finite vectors, got shape {found.shape}",
            )
        vectors.update(zip(missing, found[1:], strict=True))
        with self._lock:
            for text in missing:
                self._cache[text] = vectors[text]
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        vectors[query] = found[0]
        return vectors

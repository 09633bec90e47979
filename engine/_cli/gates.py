"""CI gates for ``toolroute eval``: minimum quality and maximum latency a run must meet.

A gate is a pure comparison of the evaluation report against a bound, so a CI job can fail a
change that lowers recall (``--min-hit5 0.75``) with one line naming what fell short.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

import attrs

from .inputs import finite_float, positive_float


@attrs.frozen(kw_only=True)
class Gate:
    """One bound on one report metric.

    Attributes:
        option: the command-line option that sets it (``--min-hit5``).
        metric: the report key it reads (``hit@5``; ``latency_ms.p50`` for a nested one).
        bound: the value the metric must reach (``minimum``) or not exceed.
        minimum: ``True`` for a floor, ``False`` for a ceiling.
    """

    option: str
    metric: str
    bound: float
    minimum: bool

    def shortfall(self, report: Mapping[str, object]) -> str | None:
        """One line naming the shortfall, or ``None`` when the report meets the gate."""
        value = _metric(report, self.metric)
        if self.minimum and value < self.bound:
            return f"{self.metric} {value:.3f} < {self.option} {self.bound:g}"
        if not self.minimum and value > self.bound:
            return f"{self.metric} {value:.3f} > {self.option} {self.bound:g}"
        return None


#: ``(option, report metric, is a floor)`` for every gate ``toolroute eval`` takes.
GATE_OPTIONS: tuple[tuple[str, str, bool], ...] = (
    ("--min-hit5", "hit@5", True),
    ("--min-recall5", "recall@5", True),
    ("--min-mrr", "mrr", True),
    ("--max-p50-ms", "latency_ms.p50", False),
)


def fraction(text: str) -> float:
    """An argparse type: a rate's floor, from 0 to 1 (``0.75``, not ``75``)."""
    value = finite_float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a rate from 0 to 1, got {text!r}")
    return value


def add_gate_options(parser: argparse.ArgumentParser) -> None:
    """Add every gate option to the ``eval`` parser."""
    for option, metric, minimum in GATE_OPTIONS:
        word = "below" if minimum else "above"
        parser.add_argument(
            option,
            type=fraction if minimum else positive_float,
            default=None,
            metavar="X",
            help=f"exit 1 when {metric} is {word} X",
        )


def gates_from(args: argparse.Namespace) -> tuple[Gate, ...]:
    """The gates set on the command line, in option order."""
    gates = []
    for option, metric, minimum in GATE_OPTIONS:
        bound = getattr(args, option.lstrip("-").replace("-", "_"))
        if bound is not None:
            gates.append(Gate(option=option, metric=metric, bound=bound, minimum=minimum))
    return tuple(gates)


def shortfalls(gates: Sequence[Gate], report: Mapping[str, object]) -> list[str]:
    """One line per gate the report misses, in option order."""
    return [line for gate in gates if (line := gate.shortfall(report)) is not None]


def _metric(report: Mapping[str, object], key: str) -> float:
    value: object = report
    for part in key.split("."):
        assert isinstance(value, Mapping), key
        value = value[part]
    assert isinstance(value, int | float), key
    return float(value)

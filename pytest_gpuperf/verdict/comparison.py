"""A verdict as a value: :class:`Comparison` (a benchmark), :class:`FigureVerdict` (a figure).

Defined in :mod:`pytest_gpuperf.outcome`, beside the :class:`~pytest_gpuperf.model.Result`
that carries them; importable from here too.
"""

from __future__ import annotations

from pytest_gpuperf.outcome import (
    BELOW_RESOLUTION,
    DIFFERENT_ENVIRONMENT,
    GATED_KINDS,
    IMPROVEMENT,
    INCONCLUSIVE,
    KINDS,
    NO_BASELINE,
    NO_CHANGE,
    NOT_COMPARABLE,
    REGRESSION,
    UNCONFIRMED,
    UNMEASURABLE,
    Comparison,
    FigureVerdict,
)

__all__ = [
    "BELOW_RESOLUTION",
    "DIFFERENT_ENVIRONMENT",
    "GATED_KINDS",
    "IMPROVEMENT",
    "INCONCLUSIVE",
    "KINDS",
    "NOT_COMPARABLE",
    "NO_BASELINE",
    "NO_CHANGE",
    "REGRESSION",
    "UNCONFIRMED",
    "UNMEASURABLE",
    "Comparison",
    "FigureVerdict",
]

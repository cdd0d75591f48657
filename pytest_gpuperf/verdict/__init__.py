"""The judgement: is a benchmark slower than its baseline, and how sure are we?

Pure (no pytest, no torch). :mod:`.robust` holds the statistics, :mod:`.policy`
the settings and noise classes, :mod:`.decide` the rule for one benchmark; the verdict
it returns is :mod:`pytest_gpuperf.outcome`'s (what results carry and reports read).
The gate (pytest) and ``pytest-gpuperf compare`` (the CLI) both call
:func:`decide` and :func:`outcome`.
"""

from __future__ import annotations

from pytest_gpuperf.outcome import (
    DIFFERENT_ENVIRONMENT,
    GATED_KINDS,
    IMPROVEMENT,
    INCONCLUSIVE,
    KINDS,
    NO_BASELINE,
    NO_CHANGE,
    REGRESSION,
    Comparison,
    FigureVerdict,
)
from pytest_gpuperf.verdict.decide import (
    DEVICE,
    E2E,
    FAIL,
    PASS,
    PENDING,
    TIME,
    WARN,
    RunStat,
    classes_for,
    decide,
    outcome,
    with_note,
    within_run_se,
)
from pytest_gpuperf.verdict.policy import (
    CLASSES,
    DEFAULT_POLICY,
    FAIL_ON,
    DecisionPolicy,
    NoiseClass,
    VerdictSettings,
)

__all__ = [
    "CLASSES",
    "DEFAULT_POLICY",
    "DEVICE",
    "DIFFERENT_ENVIRONMENT",
    "E2E",
    "FAIL",
    "FAIL_ON",
    "GATED_KINDS",
    "IMPROVEMENT",
    "INCONCLUSIVE",
    "KINDS",
    "NO_BASELINE",
    "NO_CHANGE",
    "PASS",
    "PENDING",
    "REGRESSION",
    "TIME",
    "WARN",
    "Comparison",
    "DecisionPolicy",
    "FigureVerdict",
    "NoiseClass",
    "RunStat",
    "VerdictSettings",
    "classes_for",
    "decide",
    "outcome",
    "with_note",
    "within_run_se",
]

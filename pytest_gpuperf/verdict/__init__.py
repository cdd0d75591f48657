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
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_BASELINE,
    NO_CHANGE,
    REGRESSION,
    Comparison,
)
from pytest_gpuperf.verdict.decide import (
    FAIL,
    PASS,
    PENDING,
    WARN,
    RunStat,
    classes_for,
    decide,
    outcome,
)
from pytest_gpuperf.verdict.policy import (
    CLASSES,
    DEFAULT_POLICY,
    DecisionPolicy,
    VerdictSettings,
)

__all__ = [
    "CLASSES",
    "DEFAULT_POLICY",
    "DIFFERENT_ENVIRONMENT",
    "FAIL",
    "IMPROVEMENT",
    "INCONCLUSIVE",
    "NO_BASELINE",
    "NO_CHANGE",
    "PASS",
    "PENDING",
    "REGRESSION",
    "WARN",
    "Comparison",
    "DecisionPolicy",
    "RunStat",
    "VerdictSettings",
    "classes_for",
    "decide",
    "outcome",
]

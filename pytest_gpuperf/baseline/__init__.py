"""Named baselines: the store (:mod:`.store`), what it holds (:mod:`.records`), the format
(:mod:`.schema`).

This module is light on purpose: the option parser and the CLI's ``--help``
import it for the defaults and the name rule, defined here once. The store's
classes are re-exported lazily, so ``from pytest_gpuperf.baseline import
BaselineStore`` works without loading the store at start-up.

Pure Python: no torch, no pytest.
"""

from __future__ import annotations

import importlib
import re
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.errors import InvalidBaselineName

if TYPE_CHECKING:
    from pytest_gpuperf.baseline.records import MATCH as MATCH
    from pytest_gpuperf.baseline.records import NO_BENCHMARK as NO_BENCHMARK
    from pytest_gpuperf.baseline.records import OTHER_ENVIRONMENT as OTHER_ENVIRONMENT
    from pytest_gpuperf.baseline.records import OTHER_POLICY as OTHER_POLICY
    from pytest_gpuperf.baseline.records import Baseline as Baseline
    from pytest_gpuperf.baseline.records import BenchmarkEntry as BenchmarkEntry
    from pytest_gpuperf.baseline.records import Match as Match
    from pytest_gpuperf.baseline.records import RunRecord as RunRecord
    from pytest_gpuperf.baseline.records import record_from_result as record_from_result
    from pytest_gpuperf.baseline.store import BaselineStore as BaselineStore
    from pytest_gpuperf.baseline.store import PruneSummary as PruneSummary
    from pytest_gpuperf.baseline.store import SaveSummary as SaveSummary
    from pytest_gpuperf.baseline.store import empty_document as empty_document

__all__ = [
    "DEFAULT_DIR",
    "DEFAULT_KEEP_RUNS",
    "MATCH",
    "NAME_PATTERN",
    "NO_BENCHMARK",
    "OTHER_ENVIRONMENT",
    "OTHER_POLICY",
    "Baseline",
    "BaselineStore",
    "BenchmarkEntry",
    "Match",
    "PruneSummary",
    "RunRecord",
    "SaveSummary",
    "check_name",
    "empty_document",
    "record_from_result",
]

#: Where baselines live unless ``--gpuperf-baseline-dir`` (or the CLI's ``--dir``) says otherwise.
DEFAULT_DIR = ".gpuperf/baselines"
#: Runs kept per benchmark and fingerprint. 20: the power table of statistics.md §4.7
#: assumes a 20-run history; more runs barely narrow the t quantile (29 vs 39 degrees of
#: freedom with the prior's 10), while they keep staler runs and grow the file by half.
DEFAULT_KEEP_RUNS = 20
#: A baseline name is a plain file name: no separators, not hidden, not "." or "..".
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
#: What :data:`NAME_PATTERN` accepts, said to a user.
NAME_RULE = (
    "use letters, digits, '.', '_' and '-' (at most 100, not starting with '.'), "
    "e.g. main or nightly-h200"
)


def check_name(name: str) -> str:
    """``name`` if it is a valid baseline name, else :class:`InvalidBaselineName`.

    A name ending in ``.json`` is refused: the file would be ``main.json.json``.
    """
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidBaselineName(f"invalid baseline name {name!r}: {NAME_RULE}")
    if name.lower().endswith(".json"):
        raise InvalidBaselineName(
            f"invalid baseline name {name!r}: give the name without .json: use "
            f"{name[:-5]!r} (its file is {name[:-5]}.json)"
        )
    return name


def is_name(text: str) -> bool:
    """Whether ``text`` is a valid baseline name (:func:`check_name` would accept it)."""
    try:
        check_name(text)
    except InvalidBaselineName:
        return False
    return True


_LAZY = {
    "MATCH": "records",
    "NO_BENCHMARK": "records",
    "OTHER_ENVIRONMENT": "records",
    "OTHER_POLICY": "records",
    "Baseline": "records",
    "BenchmarkEntry": "records",
    "Match": "records",
    "RunRecord": "records",
    "record_from_result": "records",
    "BaselineStore": "store",
    "PruneSummary": "store",
    "SaveSummary": "store",
    "empty_document": "store",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)

"""Evidence for a regressed benchmark: profiles, a kernel diff, and where the time went.

:mod:`.analysis` is pure Python; :mod:`.collectors` are the device adapters; the
orchestration is :mod:`pytest_gpuperf.shell.capture`. This face names what a conftest's
collector or diagnose hook uses and loads each on first use (PEP 562), so that importing
the pure :mod:`.analysis.diagnose` loads no collector.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what a type checker sees of the face (each name is in __all__)
    from pytest_gpuperf.artifacts.analysis.diagnose import CAUSES, Diagnosis, Evidence
    from pytest_gpuperf.artifacts.analysis.inventory import (
        KernelDiff,
        combine,
        diff_inventories,
        inventory_from_trace,
    )
    from pytest_gpuperf.artifacts.analysis.layout import Layout, safe_name, write_manifest
    from pytest_gpuperf.artifacts.collectors.base import (
        FAILED,
        OK,
        SKIPPED,
        TIMEOUT,
        CaptureContext,
        Collector,
        CollectorResult,
    )
    from pytest_gpuperf.artifacts.collectors.child import measure_hooks

#: each name of the face -> the module that defines it
_HOMES = {
    **dict.fromkeys(("CAUSES", "Diagnosis", "Evidence"), "analysis.diagnose"),
    **dict.fromkeys(
        ("KernelDiff", "combine", "diff_inventories", "inventory_from_trace"), "analysis.inventory"
    ),
    **dict.fromkeys(("Layout", "safe_name", "write_manifest"), "analysis.layout"),
    **dict.fromkeys(
        ("FAILED", "OK", "SKIPPED", "TIMEOUT", "CaptureContext", "Collector", "CollectorResult"),
        "collectors.base",
    ),
    "measure_hooks": "collectors.child",
}
#: a literal list: a type checker reads the face's exports only from one
__all__ = [
    "CAUSES", "FAILED", "OK", "SKIPPED", "TIMEOUT", "CaptureContext", "Collector",
    "CollectorResult", "Diagnosis", "Evidence", "KernelDiff", "Layout", "combine",
    "diff_inventories", "inventory_from_trace", "measure_hooks", "safe_name", "write_manifest",
]  # fmt: skip


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value

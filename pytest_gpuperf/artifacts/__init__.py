"""Evidence for a regressed benchmark: profiles, a kernel diff, and where the time went.

:mod:`.analysis` is pure Python; :mod:`.collectors` are the device adapters; the
orchestration is :mod:`pytest_gpuperf.shell.capture`. This face names what a conftest's
collector or diagnose hook uses and loads each on first use (PEP 562), so that importing
the pure :mod:`.analysis.diagnose` loads no collector.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what a type checker sees of the face (names re-exported by __all__)
    from pytest_gpuperf.artifacts.analysis.diagnose import CAUSES, Diagnosis, Evidence  # noqa: F401
    from pytest_gpuperf.artifacts.analysis.inventory import (  # noqa: F401
        KernelDiff,
        combine,
        diff_inventories,
        inventory_from_trace,
    )
    from pytest_gpuperf.artifacts.analysis.layout import Layout, safe_name, write_manifest  # noqa: F401
    from pytest_gpuperf.artifacts.collectors.base import (  # noqa: F401
        FAILED,
        OK,
        SKIPPED,
        TIMEOUT,
        CaptureContext,
        Collector,
        CollectorResult,
    )
    from pytest_gpuperf.artifacts.collectors.child import measure_hooks  # noqa: F401

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
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value

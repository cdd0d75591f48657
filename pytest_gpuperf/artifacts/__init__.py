"""Evidence for a regressed benchmark: profiles, a kernel diff, and where the time went.

When a benchmark regresses, :func:`capture` re-runs its test in child
processes under torch.profiler, Nsight Systems, Nsight Compute and
TORCH_TRACE (each within a time budget, each skipped with the reason when
its tool is missing), diffs the kernel inventory against the baseline's and
writes a diagnosis that opens the failure message. Files go to
``<artifacts_dir>/<run id>/<test>/<collector>/`` with a ``manifest.json``.

Pieces, one job each:

* :mod:`.base` - the :class:`Collector` protocol, :class:`CollectorResult`, :class:`CaptureContext`
* :mod:`.layout` - folders, safe names, the manifest
* :mod:`.capture` - :func:`capture`, the policy, the registry, :class:`CaptureReport`
* :mod:`.child` - the measuring process's side (profiled calls after a measurement)
* :mod:`.timeline`, :mod:`.inventory`, :mod:`.diagnose` - pure analysis
* :mod:`.torch_profiler`, :mod:`.nsys`, :mod:`.ncu`, :mod:`.torch_trace` - the collectors
"""

from __future__ import annotations

from pytest_gpuperf.artifacts.base import (
    FAILED,
    OK,
    SKIPPED,
    TIMEOUT,
    CaptureContext,
    Collector,
    CollectorResult,
)
from pytest_gpuperf.artifacts.capture import (
    ALWAYS,
    NEVER,
    ON_FAILURE,
    POLICIES,
    CaptureReport,
    baseline_inventory,
    capture,
    collectors_for,
    default_collectors,
    should_capture,
)
from pytest_gpuperf.artifacts.child import measure_hooks
from pytest_gpuperf.artifacts.diagnose import CAUSES, Diagnosis, Evidence
from pytest_gpuperf.artifacts.inventory import (
    KernelDiff,
    combine,
    diff_inventories,
    inventory_from_trace,
)
from pytest_gpuperf.artifacts.layout import Layout, safe_name, write_manifest

__all__ = [
    "ALWAYS",
    "CAUSES",
    "FAILED",
    "NEVER",
    "OK",
    "ON_FAILURE",
    "POLICIES",
    "SKIPPED",
    "TIMEOUT",
    "CaptureContext",
    "CaptureReport",
    "Collector",
    "CollectorResult",
    "Diagnosis",
    "Evidence",
    "KernelDiff",
    "Layout",
    "baseline_inventory",
    "capture",
    "collectors_for",
    "combine",
    "default_collectors",
    "diff_inventories",
    "inventory_for",
    "inventory_from_trace",
    "measure_hooks",
    "safe_name",
    "should_capture",
    "write_manifest",
]


def inventory_for(result: object) -> dict[str, object] | None:
    """The kernel inventory a result carries (``Result.extra["kernels"]``), for a baseline save.

    Saving needs nothing more: ``BaselineStore.save`` stores ``Result.extra``
    with each run. Use this to pass it explicitly as
    ``extras={r.id.key: {"kernels": inventory_for(r)}}``.
    """
    extra = getattr(result, "extra", None)
    if isinstance(result, dict):
        extra = result.get("extra")
    inv = (extra or {}).get("kernels") if isinstance(extra, dict) else None
    return inv if isinstance(inv, dict) else None

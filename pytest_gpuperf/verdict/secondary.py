"""Secondary metrics against the baseline: peak memory, first-call time, memory behaviour.

None has a usable noise model, so none is tested for significance like time: each is
compared with a band around the baseline's values,
``[min / (1 + tol) - slack, max * (1 + tol) + slack]``. First-call time is compared with
the *largest* baseline value, so a noisy history (disk caches) only ever widens the band.
Gating is the caller's choice (``--gpuperf-gate-secondary``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_gpuperf.measure.summary import median
from pytest_gpuperf.outcome import SecondaryComparison

PEAK_MEMORY = "peak_memory"
FIRST_CALL = "first_call"
ALLOCATIONS = "allocations_per_call"
DEVICE_ALLOCS = "device_allocs_per_call"
ALLOC_RETRIES = "alloc_retries"
TRANSFERS = "transfer_bytes_per_call"
#: The metrics of memory behaviour (``--gpuperf-gate-secondary=allocations`` gates them).
MEMORY_BEHAVIOUR = (ALLOCATIONS, DEVICE_ALLOCS, ALLOC_RETRIES, TRANSFERS)
#: Default absolute slack per metric (bytes, seconds, counts per call).
SLACK = {
    PEAK_MEMORY: float(2**20),
    FIRST_CALL: 0.05,
    ALLOCATIONS: 0.5,
    DEVICE_ALLOCS: 0.5,
    ALLOC_RETRIES: 0.5,
    TRANSFERS: float(64 * 2**10),
}
HIGHER, LOWER, SAME, NO_BASELINE = "higher", "lower", "same", "no-baseline"


def compare_secondary(
    baseline_values: Sequence[float | None],
    current_value: float | None,
    tolerance: float,
    *,
    metric: str = PEAK_MEMORY,
) -> SecondaryComparison:
    """Compare one secondary metric with its baseline values (None entries are ignored)."""
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    sl = SLACK.get(metric, 0.0)
    vals = [float(v) for v in baseline_values if v is not None and math.isfinite(v)]
    if current_value is None or not vals:
        return SecondaryComparison(
            metric, NO_BASELINE, current_value, None, None, None, len(vals), tolerance, sl,
            None, None, None,
        )  # fmt: skip
    ref = median(vals)
    lo, hi = min(vals), max(vals)
    upper = hi * (1 + tolerance) + sl
    lower = lo / (1 + tolerance) - sl
    cur = float(current_value)
    kind = HIGHER if cur > upper else LOWER if cur < lower else SAME
    ratio = cur / ref if ref > 0 else None
    return SecondaryComparison(
        metric, kind, cur, ref, lo, hi, len(vals), tolerance, sl, ratio, upper, lower
    )


def transfer_bytes(inventory: Mapping[str, Any] | None) -> float | None:
    """Host-to-device plus device-to-host bytes per call of a kernel inventory (None: not
    recorded; inventories before ``d2h_bytes_per_call`` count their host-to-device bytes)."""
    if not inventory:
        return None
    vals = [inventory.get(k) for k in ("h2d_bytes_per_call", "d2h_bytes_per_call")]
    nums = [float(v) for v in vals if isinstance(v, (int, float))]
    return sum(nums) if nums else None

"""GPU telemetry during measurements (NVML), and what it means for verdicts.

Two rings live here. The pure modules (core: no torch, no pynvml), which the
verdict and the reports import directly:

- :mod:`.regime`: pure helpers for the verdict: :func:`regime_difference`,
  :func:`confirm_in_cycles`.
- :mod:`.stream`: pure summaries of a sample stream (min/median/max, time
  share of each throttle reason, rounds marked throttled).
- :mod:`.reasons`: readable names of NVML clock-event (throttle) reasons.

The NVML modules (device adapters), which only the pytest shell imports:

- :mod:`.probe`: :class:`NvmlTelemetry`, whose ``probe`` the ``gpu_bench``
  fixture runs around each measurement; its summary becomes ``Result.telemetry``.
- :mod:`.header`: the session header (GPU state at the start, unreliable conditions).
- :mod:`.nvml`: NVML access and the sampler thread.

This face re-exports the pure helpers only: importing it loads no NVML module.
"""

from __future__ import annotations

from pytest_gpuperf.telemetry.reasons import decode as decode_reasons
from pytest_gpuperf.telemetry.regime import (
    REGIME_KEYS,
    CyclesCheck,
    confirm_in_cycles,
    cycles_per_call,
    regime_difference,
    regime_summary,
    rounds_below_baseline,
)
from pytest_gpuperf.telemetry.stream import notes as telemetry_notes

__all__ = [
    "REGIME_KEYS",
    "CyclesCheck",
    "confirm_in_cycles",
    "cycles_per_call",
    "decode_reasons",
    "regime_difference",
    "regime_summary",
    "rounds_below_baseline",
    "telemetry_notes",
]

"""GPU telemetry during measurements (NVML), and what it means for verdicts.

Two rings live here: pure modules (:mod:`.regime`, :mod:`.stream`, :mod:`.reasons`), which
the verdict and the reports import, and NVML adapters (:mod:`.probe`, :mod:`.header`,
:mod:`.nvml`), which only the pytest shell imports. This face re-exports the pure helpers
only: importing it loads no NVML module.
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

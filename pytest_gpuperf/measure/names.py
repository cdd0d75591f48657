"""The names a measurement is labelled with: its timing mode and its stability class."""

from __future__ import annotations

#: Timing backends, as they appear in results and baseline keys.
MODE_EVENTS = "cuda-events"
MODE_GRAPH = "cuda-graph"
MODE_CPU = "cpu"
#: every rank of a process group timed in step, the slowest rank's time (world_size=)
MODE_CUDA_DIST = "cuda-dist"
MODE_CPU_DIST = "cpu-dist"
MODES = (MODE_EVENTS, MODE_GRAPH, MODE_CPU, MODE_CUDA_DIST, MODE_CPU_DIST)

#: Stability classes of one measurement (see measure/steady_state.py).
STEADY = "steady"  # the warm-up settled and the measured rounds hold one level
WARMUP_CAPPED = "warmup-capped"  # warm-up budget ran out, but the measured rounds are flat
SHIFT = "shift"  # the level changed during the measurement
NO_STEADY_STATE = "no-steady-state"  # the transient never ended
UNSTABLE_CLASSES = (SHIFT, NO_STEADY_STATE)

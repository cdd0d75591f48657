"""What is wrong with one measurement, each with what to do about it (``Result.notes``).

Pure Python: reads the result (any :class:`Measured`: a :class:`pytest_gpuperf.model.Result`
is one), its policy and its mode's description (:mod:`.backend`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from pytest_gpuperf.measure import backend
from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.measure.summary import Summary


class _Identity(Protocol):
    @property
    def mode(self) -> str: ...


class Measured(Protocol):
    """What the notes read of one measurement: the fields of a result that say how it went."""

    @property
    def id(self) -> _Identity: ...
    @property
    def device(self) -> str: ...
    @property
    def rounds(self) -> Sequence[float]: ...
    @property
    def warmup(self) -> Sequence[float]: ...
    @property
    def first_call_s(self) -> float | None: ...
    @property
    def stability(self) -> str: ...
    @property
    def environment(self) -> dict[str, Any] | None: ...
    @property
    def host_hidden(self) -> bool | None: ...
    @property
    def summary(self) -> Summary: ...


#: The Linux scheduler's tick at CONFIG_HZ=250, the common default: a thread that loses
#: its core to another process waits about a whole number of ticks.
SCHED_TICK_S = 0.004
#: How close to a whole number of ticks a median must sit (fraction of one tick).
PLATEAU_SNAP = 0.025
#: A plateau has a tight interval: the waits are all one length.
PLATEAU_CI = 0.03
#: Plateaus from 1 to this many ticks are looked for.
PLATEAU_MAX_TICKS = 16
#: The first words of the plateau note: what a save reads to keep such a run out.
PLATEAU_NOTE = "plateau:"


def quantum_plateau(result: Measured) -> int | None:
    """The number of scheduler ticks a CPU median snapped to, or None.

    With more than one torch thread and another process on a core, each call can end
    up waiting for a descheduled worker thread: the per-call median then sits on a
    multiple of the tick (7.96 ms, 15.96 ms) with a tight interval, far above what the
    function costs. The signs, all required: a CPU result, its median within
    :data:`PLATEAU_SNAP` of 1 to :data:`PLATEAU_MAX_TICKS` ticks, an interval under
    :data:`PLATEAU_CI`, and either more than one torch thread or a call seen at least 3x
    faster than the median (the first call, a warm-up round or a round).
    """
    if result.device != "cpu" or not result.rounds:
        return None
    s = result.summary
    m = s.median
    ticks = round(m / SCHED_TICK_S)
    if not 1 <= ticks <= PLATEAU_MAX_TICKS or abs(m - ticks * SCHED_TICK_S) > (
        PLATEAU_SNAP * SCHED_TICK_S
    ):
        return None
    if s.n < 3 or s.rel_ci > PLATEAU_CI:
        return None
    threads = (result.environment or {}).get("torch_threads")
    fastest = min([*result.rounds, *result.warmup, result.first_call_s or math.inf])
    if (isinstance(threads, int) and threads > 1) or fastest * 3 <= m:
        return ticks
    return None


def plateau_note(result: Measured, ticks: int) -> str:
    """What was wrong and how to re-run, in one note."""
    threads = (result.environment or {}).get("torch_threads")
    many = f" with {threads} torch threads" if isinstance(threads, int) and threads > 1 else ""
    return (
        f"{PLATEAU_NOTE} the median {1e3 * result.summary.median:.2f} ms sits on {ticks} "
        f"scheduler tick(s) of {1e3 * SCHED_TICK_S:g} ms{many}: the calls waited for a core "
        "another process held, so it measures the scheduler, not the code; re-run with one "
        "torch thread (torch.set_num_threads(1)) on a quieter machine (a save keeps it out of "
        "the baseline unless --gpuperf-save-plateaus)"
    )


#: Below this per-call time, a call timed alone (``setup=``) is mostly the clock's own cost
#: and the cache state setup left: its rounds scatter (42-56 % seen for a 6 µs relu_).
SETUP_ALONE_S = 20e-6


def setup_note(result: Measured) -> str | None:
    """With ``setup=``, each call is timed alone: say so when the call is too short for that."""
    if not result.rounds or result.summary.median >= SETUP_ALONE_S:
        return None
    return (
        f"setup=: each call is timed alone, after its setup, and a "
        f"{1e6 * result.summary.median:.1f} µs call is too short for that (the clock's own cost "
        "and the caches setup left weigh in); time a batch: let setup make a list of inputs "
        "and fn loop over them, or drop setup= if fn does not change its inputs"
    )


def flag_notes(
    result: Measured,
    policy: MeasurePolicy,
    *,
    setup: bool = False,
    mode: backend.Mode | None = None,
) -> list[str]:
    """What is wrong with a result, each with what to do about it (``setup``: the benchmark
    was given ``setup=``, so each call was timed alone; ``mode``: its timing mode's
    description, default the built-in mode of its name)."""
    notes = []
    s = result.summary
    on_gpu = result.device == "cuda"
    if result.stability == "no-steady-state":
        check = "GPU clocks and other processes" if on_gpu else "for other work on the machine"
        notes.append(
            "unstable: the timings never settled (still drifting after the warm-up and a second "
            f"measurement); raise warmup_ms, check {check}"
        )
    elif result.stability == "shift":
        where = "the device, throttling" if on_gpu else "the machine's cores"
        notes.append(
            f"unstable: the level shifted during the measurement; check for other work on {where}"
            ", or a function whose cost changes from call to call"
        )
    elif result.stability == "warmup-capped":
        notes.append(
            f"warm-up hit its {policy.warmup_ms:g} ms budget before settling; raise warmup_ms "
            "if the first rounds keep drifting"
        )
    if result.host_hidden is False:
        notes.append(
            "the device figure includes host waits: the function waits for the GPU inside the "
            "timed call (.item(), .cpu(), printing a tensor, torch.cuda.synchronize()), so the "
            "host could not run ahead of it; its end-to-end time is the figure to read"
        )
    if s.n and max(s.rel_iqr, s.rel_ci) > policy.noise_threshold:
        remedy = (mode or backend.get(result.id.mode)).noisy_remedy
        notes.append(
            f"noisy: rounds scatter {100 * s.rel_iqr:.1f} % (IQR/median) and the median is known "
            f"to ±{100 * s.rel_ci:.1f} %; {remedy}raise round_ms or rounds, or stop other work "
            "on the machine"
        )
    short = setup_note(result) if setup else None
    if short is not None:
        notes.append(short)
    ticks = quantum_plateau(result)
    if ticks is not None:
        notes.append(plateau_note(result, ticks))
    return notes

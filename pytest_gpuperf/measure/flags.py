"""What is wrong with one measurement, each with what to do about it (``Result.notes``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pytest_gpuperf.measure import backend
from pytest_gpuperf.measure.contention import CONTENDED, ONE_THREAD, WAITED
from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.measure.summary import Summary


class _Identity(Protocol):
    @property
    def mode(self) -> str: ...


class Measured(Protocol):
    """What the notes read of one measurement (a :class:`pytest_gpuperf.model.Run` is one)."""

    @property
    def id(self) -> _Identity: ...
    @property
    def device(self) -> str: ...
    @property
    def rounds(self) -> Sequence[float]: ...
    @property
    def warmup(self) -> Sequence[float]: ...
    @property
    def stability(self) -> str: ...
    @property
    def host_hidden(self) -> bool | None: ...
    @property
    def summary(self) -> Summary: ...
    @property
    def contention(self) -> Mapping[str, Any] | None: ...


def contention_remedy(threads: float, group: bool = False) -> str:
    """What to do about runs whose threads waited for a CPU (the note's and the verdict's):
    ``threads`` their CPUs' worth, ``group`` ranks in processes of their own."""
    if group:  # the ranks' own threads, not the machine's load
        return (
            f"its ranks' threads ({threads:.1f} CPUs' worth per measuring thread, the "
            "collectives' own among them) want more CPUs than this machine has: a runner with "
            "more CPUs, or the ranks on GPUs"
        )
    if threads > ONE_THREAD:
        return (
            f"torch.set_num_threads(1) (the work ran on {threads:.1f} threads), an idle runner, "
            "or --gpuperf-ab=REF"
        )
    return "an idle runner, a quieter moment, or --gpuperf-ab=REF"


def contention_note(result: Measured, group: bool = False) -> str | None:
    """The note of a CPU run whose clock counts waits for a CPU (wall time, or thread time of
    several threads) when its threads waited beyond :data:`~.contention.WAITED`."""
    c = result.contention or {}
    waited, threads = c.get("waited"), c.get("threads") or 1.0
    many = threads > ONE_THREAD
    counts_waits = c.get("clock") == "wall" or (c.get("clock") == "thread" and many)
    if waited is None or waited <= WAITED or not counts_waits:
        return None
    return (
        f"{CONTENDED} its threads waited for a CPU {100 * waited:.0f} % of the rounds' time: the "
        "timings measure the machine, not the code, and no verdict counts them; what helps: "
        + contention_remedy(threads, group)
    )


#: Below this per-call time, a call timed alone (``setup=``) is mostly the clock's own cost
#: and the caches setup left (rounds scatter 42-56 % for a 6 µs relu_).
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
    """What is wrong with a result, each with what to do about it (``setup``: each call was
    timed alone; ``mode``: its timing mode, default the built-in one of its name)."""
    notes = []
    mode = mode or backend.get(result.id.mode)
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
        notes.append(
            f"noisy: rounds scatter {100 * s.rel_iqr:.1f} % (IQR/median) and the median is known "
            f"to ±{100 * s.rel_ci:.1f} %; {mode.noisy_remedy}raise round_ms or rounds, or stop "
            "other work on the machine"
        )
    later = (setup_note(result) if setup else None, contention_note(result, mode.group))
    return notes + [note for note in later if note is not None]

"""What is wrong with one measurement, each with what to do about it (``Result.notes``).

Pure Python: reads the result, its policy and its mode's description (:mod:`.backend`).
"""

from __future__ import annotations

from pytest_gpuperf.measure import backend
from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.model import Result


def flag_notes(result: Result, policy: MeasurePolicy) -> list[str]:
    """What is wrong with a result, each with what to do about it."""
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
        remedy = backend.get(result.id.mode).noisy_remedy
        notes.append(
            f"noisy: rounds scatter {100 * s.rel_iqr:.1f} % (IQR/median) and the median is known "
            f"to ±{100 * s.rel_ci:.1f} %; {remedy}raise round_ms or rounds, or stop other work "
            "on the machine"
        )
    return notes

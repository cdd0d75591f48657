"""How verdicts are decided: the settings (:class:`DecisionPolicy`) and the noise classes.

A figure is judged against the noise of its own kind, never its neighbours': its
:class:`NoiseClass` (measured in fresh processes, ``bench/zoo_campaign.py pool``,
``bench/cpu_pools.py``) is a prior that the figure's own baseline runs moderate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.measure.noise import NoiseClass as NoiseClass
from pytest_gpuperf.settings_fields import option, settings_from
from pytest_gpuperf.verdict.robust import z_of

FAIL_ON = ("regression", "inconclusive")


#: Calls of a few µs, each timed by its own event pair, move more between processes than the
#: kernel inside: on the H200 three baseline processes of the examples' 5.8 µs add ranged 1.5,
#: 2.4 and 13.4 %, a 5.8 µs 256^3 bf16 matmul 5.1, 7.8 and 12.2 %, a 7.7 µs scale 3.5-7.1 %
#: (bench/results/h200-2026-12-01*/: c*.json). A 3 % prior there made each a suspect that
#: cost three confirmation processes of unchanged code; 5 % at 6 µs, falling to the
#: class's prior at 20 µs, covers them.
TINY = (6e-6, 0.05)

#: The classes, and the measurements behind them (H200, 2 GPUs x 8 fresh processes of the zoo;
#: "range" is max/min - 1 of the 8 process levels).
CLASSES: dict[str, NoiseClass] = {
    c.name: c
    for c in (
        NoiseClass(
            "device",
            noise=0.005,
            noise_small=0.03,
            mode=1.15,
            runs=2,
            tiny=TINY,
            about="device time of device-bound work: ranges 0.1-1.7 % (memory-bound ops, "
            "SDPA, softmax, LayerNorm, H2D-free calls), up to 4 % for calls under 20 us, up "
            "to 13 % for calls of 6 us",
        ),
        NoiseClass(
            "launches",
            noise=0.03,
            mode=1.2,
            runs=3,
            tiny=TINY,
            about="device time of host-bound work (many small kernels, the GPU's own gaps "
            "between queued launches): ranges 2-10 %, with two modes ~8 % apart; up to 13 % "
            "for calls of 6 us",
        ),
        NoiseClass(
            "power",
            noise=0.04,
            mode=1.35,
            runs=3,
            about="work under the GPU's power cap (heavy GEMMs): a process now and then runs "
            "in a lower clock regime, 10-27 % slower",
        ),
        NoiseClass(
            "host",
            noise=0.08,
            mode=2.2,
            runs=5,
            about="end-to-end time of host-bound work: the fast mode moves ~10 %, and slow "
            "periods of the host make a process 1.3-2.1x slower",
        ),
        NoiseClass(
            "graph",
            noise=0.01,
            noise_small=0.03,
            mode=1.15,
            runs=2,
            about="CUDA-graph replay: 0.2-0.7 % between processes, one 2 us kernel with two "
            "placement modes 6 % apart",
        ),
        NoiseClass(
            "cpu",
            noise=0.10,
            mode=1.7,
            runs=3,
            about="CPU timings on a shared machine (a run's 10th-percentile round, on its "
            "thread's CPU clock where the work is on one thread): under the 2-core machine's "
            "ordinary load the processes' levels had a robust SD of 0.04-0.06 (0.15 for the "
            "noisiest tenth of benchmarks), and one process in 5-10 was 1.5-2x slower than the "
            "rest (bench/cpu_pools.py); 3 runs to confirm, not 4: a fresh process costs what "
            "torch's import does, and 4 made a compare with a 1.5x slowdown 4-5x "
            "pytest-benchmark's wall time under load",
        ),
    )
}


@dataclass(frozen=True)
class DecisionPolicy:
    """How verdicts are decided; built once from the settings.

    ``threshold``: the smallest slowdown that may fail (widened by noise, never narrowed).
    ``alpha``: the chance that noise alone fails one unchanged figure; never split across
    the session, so a verdict does not depend on what else runs. ``max_runs``: the
    session's run plus ``--gpuperf-reruns``. ``prior_weight``: the class prior's degrees of
    freedom (:func:`~pytest_gpuperf.verdict.robust.moderate`). ``host_bound``,
    ``host_share`` and ``power_share`` place a figure in the "launches"/"host"/"power" class.
    """

    threshold: float = 0.03
    alpha: float = 0.0002
    max_runs: int = 5
    prior_weight: float = 4.0
    own_cap: float = 2.0
    noise_floor: float = 0.0025
    ci_level: float = 0.90
    power: float = 0.95
    host_bound: float = 1.05
    host_share: float = 0.5
    power_share: float = 0.5
    fail_on: str = "regression"

    def __post_init__(self) -> None:
        if not 0 <= self.threshold < 1:
            raise ValueError(f"need 0 <= threshold < 1, got {self.threshold}")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"need 0 < alpha < 0.5, got {self.alpha}")
        if self.max_runs < 1:
            raise ValueError(f"need max_runs >= 1, got {self.max_runs}")
        if self.fail_on not in FAIL_ON:
            raise ValueError(f"fail_on must be one of {FAIL_ON}, got {self.fail_on!r}")

    @property
    def z(self) -> float:
        """How many standard errors a slowdown must lie beyond no change."""
        return z_of(self.alpha)


DEFAULT_POLICY = DecisionPolicy()


@dataclass(frozen=True)
class VerdictSettings:
    """The verdict options of a session, or of one benchmark (:meth:`for_result`): the
    fields in :data:`PER_TEST_VERDICT` may be set per test and travel with each result as
    ``Result.gate``, a plain dict that xdist and the JSON carry (:meth:`gate_record`)."""

    #: smallest slowdown that can fail a benchmark (a fraction)
    threshold: float = option("threshold", DEFAULT_POLICY.threshold)
    #: chance that noise alone fails one figure of one unchanged benchmark
    alpha: float = option("alpha", DEFAULT_POLICY.alpha)
    #: "regression" or "inconclusive": what fails a test
    fail_on: str = option("fail_on", DEFAULT_POLICY.fail_on)
    #: fresh processes that may re-measure a suspect benchmark
    reruns: int = option("reruns", DEFAULT_POLICY.max_runs - 1)
    #: re-measurements may add up to this multiple of the session's own time
    confirm_budget: float = option("confirm_budget", 1.0)
    #: "none", "memory", "first-call", "allocations" or "all": secondary metrics that fail a test
    gate_secondary: str = option("gate_secondary", "none")
    memory_tolerance: float = option("memory_tolerance", 0.05)
    first_call_tolerance: float = option("first_call_tolerance", 0.5)
    #: "off", "report" or "gate"
    numerics: str = option("numerics", "report")
    numerics_tolerance: float = option("numerics_tolerance", 1e-3)

    def decision_policy(self) -> DecisionPolicy:
        """The statistics' policy (the other fields keep their measured defaults)."""
        return DecisionPolicy(
            threshold=self.threshold,
            alpha=self.alpha,
            fail_on=self.fail_on,
            max_runs=self.reruns + 1,
        )

    def gate_record(self) -> dict[str, Any]:
        """The per-test fields, as ``Result.gate`` carries them (JSON-safe)."""
        return {name: getattr(self, name) for name in PER_TEST_VERDICT}

    def for_result(self, gate: Mapping[str, Any]) -> VerdictSettings:
        """This benchmark's settings: ``gate`` (a result's ``Result.gate``) over these."""
        return settings_from(
            VerdictSettings, {k: gate[k] for k in PER_TEST_VERDICT if k in gate}, self
        )


#: The verdict options a marker or ``gpu_bench(...)`` may set for one test.
PER_TEST_VERDICT = (
    "threshold",
    "gate_secondary",
    "memory_tolerance",
    "first_call_tolerance",
    "numerics",
    "numerics_tolerance",
)

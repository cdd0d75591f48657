"""How fast the hosts of both sides ran, and under which tracers: what the rule needs to judge
host-bound figures.

A figure paid at the host's speed (the "host" class: end-to-end time of host-bound work;
the "cpu" class: the CPU backend) moves with the host: a slow period of the host, a
neighbour on the core, can outlast a whole compare, and a baseline of a few processes
cannot tell that from slower code. Each run carries the host-speed canary measured around
its rounds (:mod:`pytest_gpuperf.measure.canary`); its **host factor** is the canary's time
per op over the share of the rounds' time its thread spent on a CPU.

This module reads the hosts of a comparison's runs once (:class:`HostReading`); the rule
(:mod:`pytest_gpuperf.verdict.decide`) then judges such a figure twice: the runs as
measured, and the runs with each one's host factor taken out (its level lowered by how much
slower its host ran than the fastest host of all the runs, beyond a dead band for the
canary's own noise, :data:`SAME_HOST` or its kind's; the noise of that judgement widened by
:data:`CANARY_NOISE`, how far a factor may miss). Then:

* as measured a regression, and the runs compared (the two fast modes) ran on hosts alike:
  the verdict as measured;
* both a regression: a regression (the slowdown is beyond what the host explains);
* as measured a regression, with the host taken out not (the current runs' hosts ran
  slower): the host explains it. After a second fresh process (a short slow period ends),
  **inconclusive**, ``why`` "host-slower": "the host ran 1.7x slower than when the baseline
  was saved; end-to-end +80 % is within that", naming ``--gpuperf-ab``, which measures both
  sides in alternation;
* as measured no change, but with the host taken out (all of it, or only the baseline's: a
  canary that over-states a current run's host must not cancel what the baseline hid) a
  regression, or a slowdown the runs cannot rule out (the interval's upper end above the
  threshold): a slowdown may hide in it: inconclusive, "host-slower" (until the next run
  while it is a suspect);
* otherwise the verdict as measured.

So a slow host never fails unchanged code, a slowdown well beyond the host's fails, and a
real host-side slowdown is never "no change" while the host's speed hides it. Runs without
a canary (a baseline saved before it existed) are judged as measured.

A "cpu" figure whose runs on both sides were all measured on a quiet host (:func:`quiet`:
the measuring thread had a CPU, and other processes left the machine's other CPUs idle) is
judged in the quieter "cpu-quiet" class (:func:`quiet_class`): the "cpu" class's prior is
what neighbours do to a CPU timing, several times the spread between processes without them.

A tracer or profiler (coverage.py, a debugger, cProfile, torch.profiler) active on one side
and not the other makes host timings not comparable: such a figure is **inconclusive**,
``why`` "not-comparable", at once, and never a regression. Device time with the host hidden
on both sides does not depend on the host and is judged as usual.

Pure Python: no torch, no pytest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from pytest_gpuperf.model import printable
from pytest_gpuperf.verdict.comparison import Comparison
from pytest_gpuperf.verdict.policy import CLASSES, NoiseClass


class RunLike(Protocol):
    """What this module reads of a run (:class:`~pytest_gpuperf.verdict.decide.RunStat`)."""

    @property
    def canary_kind(self) -> str | None: ...
    @property
    def canary_op_s(self) -> float | None: ...
    @property
    def canary_share(self) -> float | None: ...
    @property
    def canary_others(self) -> float | None: ...
    @property
    def tracer(self) -> str | None: ...
    @property
    def host_hidden(self) -> bool | None: ...


#: ``why`` of an inconclusive verdict the host or a tracer decided
HOST_SLOWER, NOT_COMPARABLE = "host-slower", "not-comparable"
#: the noise classes whose figures are paid at the host's speed
HOST_CLASSES = ("host", "cpu", "cpu-quiet")
#: host factors within this ratio are the same host: the canary's own noise between
#: processes, for a canary of launches (:data:`SAME_HOST_BY_KIND` for the others)
SAME_HOST = 1.10
#: the same, per canary kind where it was measured wider. A CPU canary's op time moves with
#: what the process ran before it (caches, branch history): on the idle 2-core machine its
#: factors spread 1.09-1.23x over 10 fresh processes of one benchmark, while the shares were
#: 0.9996-1 (bench/cpu_modes.py --raw); taking that out of a quiet run adds noise.
SAME_HOST_BY_KIND = {"torch-cpu": 1.25, "python-call": 1.25}
#: a run was measured on a quiet host when its thread was on a CPU for this share of the
#: rounds or more, and other processes kept at most :data:`QUIET_OTHERS` CPUs busy meanwhile
QUIET_SHARE = 0.97
QUIET_OTHERS = 0.25
#: the class of a "cpu" figure whose runs, on both sides, were all measured on a quiet host
QUIET_CPU = "cpu-quiet"
#: ... and whose runs of each side (two or more in the baseline) lie within this ratio: on the
#: idle machine a benchmark's processes moved 1.03-1.22x, and a large memory-bound one 1.64x
#: (bench/cpu_modes.py --suite examples): runs that spread wider are of a benchmark noisy in
#: itself
CALM = 1.2
#: how far (log) a run's host factor may miss the slowdown its host caused: added to the
#: noise of a figure judged with the host taken out. On the 2-core CPU machine the canary
#: saw a neighbour process's slowdown within 6-26 % (bench/canary_check.py premise).
CANARY_NOISE = 0.12
#: fresh-process runs after which a slowdown the host explains is left inconclusive
RUNS_BEFORE_HOST_SLOWER = 2


def op_time(record: Mapping[str, Any] | None) -> float | None:
    """The op time of a recorded canary: its fastest burst where the bursts are kept (so runs
    saved when ``op_s`` was the bursts' median are read the same way), else ``op_s``."""
    if not record:
        return None
    bursts = [b for b in record.get("bursts") or () if isinstance(b, (int, float)) and b > 0]
    if bursts:
        return float(min(bursts))
    op = record.get("op_s")
    return float(op) if isinstance(op, (int, float)) and op > 0 else None


def factor(run: RunLike, *, share: bool = True) -> float | None:
    """The log of a run's host factor: canary seconds per op over its share of a CPU
    (``share`` False: the op time alone)."""
    if run.canary_op_s is None or not run.canary_op_s > 0:
        return None
    on_cpu = run.canary_share if share and run.canary_share is not None else 1.0
    return math.log(run.canary_op_s) - math.log(max(on_cpu, 1e-3))


def quiet(run: RunLike) -> bool:
    """Whether a run had its host to itself: its thread on a CPU (share) and the machine's
    other CPUs idle (others) while it measured; False where either was not measured."""
    share, others = run.canary_share, run.canary_others
    return (
        share is not None
        and others is not None
        and share >= QUIET_SHARE
        and (others <= QUIET_OTHERS)
    )


def quiet_class(
    klass: NoiseClass,
    all_quiet: bool,
    base_levels: Sequence[float],
    current_levels: Sequence[float],
) -> NoiseClass:
    """``klass``, or for a "cpu" figure whose runs were all measured on a quiet host (both
    sides: ``all_quiet``, :attr:`HostReading.all_quiet`), the quieter :data:`QUIET_CPU` class:
    the "cpu" class's prior is what neighbours do to a CPU timing, and with none on either
    side it is several times the spread.

    The levels (log) must show a benchmark calm in itself: the baseline's, two or more,
    within :data:`CALM`, and the current runs' too. A benchmark whose level moves +-30 %
    between processes on any host can land three baseline runs within 1.2x (one time in
    five); its current runs then spread wider, and the "cpu" class judges it. One run beside
    a neighbour, or a baseline without the reading, keeps the "cpu" class as well."""
    if klass.name != "cpu" or not all_quiet:
        return klass
    if len(base_levels) < 2 or not all(_calm(ys) for ys in (base_levels, current_levels)):
        return klass
    return CLASSES[QUIET_CPU]


def _calm(levels: Sequence[float]) -> bool:
    return not levels or max(levels) - min(levels) <= math.log(CALM)


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


@dataclass(frozen=True)
class HostSpeed:
    """The host factors (log) of both sides' runs, and how much faster or slower the
    current host ran (``ratio``, > 1: slower now)."""

    base: tuple[float, ...]
    current: tuple[float, ...]
    #: factors within this ratio are the same host (:data:`SAME_HOST`, by the canary's kind)
    band: float = SAME_HOST

    @classmethod
    def of(cls, base: Sequence[RunLike], current: Sequence[RunLike]) -> HostSpeed | None:
        """None unless every run has a canary of one kind (a share on all or on none)."""
        runs = [*base, *current]
        kinds = {x.canary_kind for x in runs}
        if None in kinds or len(kinds) != 1:
            return None
        # a share on some runs only: compare the op times alone
        share = all(x.canary_share is not None for x in runs)
        fb = [factor(x, share=share) for x in base]
        fc = [factor(x, share=share) for x in current]
        if any(f is None for f in (*fb, *fc)):
            return None
        return cls(
            tuple(f for f in fb if f is not None),
            tuple(f for f in fc if f is not None),
            SAME_HOST_BY_KIND.get(str(next(iter(kinds))), SAME_HOST),
        )

    @property
    def ratio(self) -> float:
        return math.exp(_median(self.current) - _median(self.base))

    def shifts(self) -> tuple[list[float], list[float]]:
        """How much each run's level is lowered to take its host out: how much slower its
        host ran than the fastest host of all the runs, or 0 within the :attr:`band`. The
        fastest host is the reference, as the fastest run is the fast mode's: slow periods
        only ever add."""
        ref = min((*self.base, *self.current))  # one run of all: its own reference
        band = math.log(self.band)

        def shift(f: float) -> float:
            return f - ref if f - ref > band else 0.0

        return [shift(f) for f in self.base], [shift(f) for f in self.current]


def tracer_change(base: Sequence[RunLike], current: Sequence[RunLike]) -> str | None:
    """What differs in tracers between the two sides, or None when they were measured alike
    (their names escaped: any conftest can name a trace function, and a file any tracer)."""
    b = {x.tracer for x in base}
    c = {x.tracer for x in current}
    if b == c:
        return None
    now = sorted(printable(t) for t in c if t)
    then = sorted(printable(t) for t in b if t)
    if now and not then:
        return f"a tracer ({'; '.join(now)}) was active in this run, in none of the baseline's"
    if then and not now:
        return f"the baseline's runs were measured under a tracer ({'; '.join(then)}), this one not"
    return (
        f"tracers differ: {', '.join(then) or 'none'} in the baseline, "
        f"{', '.join(now) or 'none'} now"
    )


@dataclass(frozen=True)
class HostReading:
    """The hosts of both sides' runs, read once per comparison: what the rule needs of them
    for every figure (``HostReading.of``)."""

    #: what differs in tracers between the two sides (:func:`tracer_change`), None: alike
    tracers: str | None
    #: the host factors of both sides (None unless every run has a canary of one kind)
    speed: HostSpeed | None
    #: how much each run's level is lowered to take its host out, base and current runs
    #: (:meth:`HostSpeed.shifts`; empty without a :attr:`speed`)
    shifts: tuple[tuple[float, ...], tuple[float, ...]]
    #: every run of both sides was measured on a quiet host (:func:`quiet`)
    all_quiet: bool
    #: every run's device figure is device time alone (the host hidden)
    device_alone: bool
    #: :data:`NO_CANARY_NOTE` where a host-bound figure is judged without a canary
    note: str | None = None

    @classmethod
    def of(
        cls, base: Sequence[RunLike], current: Sequence[RunLike], classes: Sequence[str] = ()
    ) -> HostReading:
        """The reading of ``base`` and ``current`` runs, whose figures are of ``classes``
        (the noise classes' names: for the note on a baseline without a canary)."""
        runs = [*base, *current]
        speed = HostSpeed.of(base, current)
        base_shifts, current_shifts = speed.shifts() if speed is not None else ([], [])
        return cls(
            tracers=tracer_change(base, current),
            speed=speed,
            shifts=(tuple(base_shifts), tuple(current_shifts)),
            all_quiet=bool(runs) and all(quiet(x) for x in runs),
            device_alone=all(x.host_hidden is True for x in runs),
            note=canary_note(base, current, classes),
        )

    def paid_by_host(self, figure: str, klass: NoiseClass) -> bool:
        """Whether a figure is paid at the host's speed: its class says so, or it is device
        time that did not have the host hidden on every run."""
        return klass.name in HOST_CLASSES or (figure == "device" and not self.device_alone)


#: what a host-slower verdict against a stored baseline suggests
AB_HINT = (
    "; --gpuperf-ab=REF measures the base and this tree in alternating fresh processes and "
    "tells the two apart"
)


def in_ab_session(c: Comparison) -> Comparison:
    """``c`` as an A/B session says it: its two sides ran in alternation already, so a
    host-slower verdict means the host changed between the processes of a pair."""
    if c.why != HOST_SLOWER:
        return c
    said = (
        "; the base and this tree ran in alternating fresh processes, and the host's speed "
        "changed between them"
    )
    return replace(
        c,
        reasons=tuple(
            r.replace(AB_HINT, said)
            .replace(SINCE_SAVED, "in this tree's processes than in the base's")
            .replace(BASELINE_RUNS, "some of the base's processes")
            for r in c.reasons
        ),
    )


#: how a host-slower line names the baseline's side; an A/B session names the base instead
SINCE_SAVED = "than when the baseline was saved"
BASELINE_RUNS = "some of the baseline's runs"


NO_CANARY_NOTE = (
    "the baseline's runs carry no host-speed canary (saved before pytest-gpuperf measured one): "
    "host-bound figures are judged without the host's speed; a new --gpuperf-save adds it"
)


def canary_note(
    base: Sequence[RunLike], current: Sequence[RunLike], classes: Sequence[str]
) -> str | None:
    """:data:`NO_CANARY_NOTE` when a host-bound figure is judged without a canary because
    the baseline's runs have none while this run has one."""
    if not any(name in HOST_CLASSES for name in classes):
        return None
    if any(x.canary_kind for x in current) and not all(x.canary_kind for x in base):
        return NO_CANARY_NOTE
    return None

"""The verdict on synthetic runs whose truth is known: process-mode mixtures, drift, big slowdowns.

Every property the rule promises is checked here on data drawn from a model:
a run's level is the fast mode times lognormal noise, and with probability
``p_slow`` the whole process lands in a slow mode (1.3-2.1x), as host-bound work
does on the H200. The A/A and A/B figures are rates over simulated sessions
that add fresh-process runs exactly as the gate does.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import pytest

from pytest_gpuperf.artifacts.analysis.diagnose import Diagnosis
from pytest_gpuperf.measure.names import MODE_CPU, MODE_EVENTS, MODE_GRAPH, NO_STEADY_STATE, SHIFT
from pytest_gpuperf.model import BenchId, Result, Run
from pytest_gpuperf.outcome import JSON_KEYS, NUMERICS_CHANGED, NumericsComparison
from pytest_gpuperf.reporting.explain import words
from pytest_gpuperf.verdict import (
    CLASSES,
    DEFAULT_POLICY,
    DIFFERENT_ENVIRONMENT,
    FAIL,
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_BASELINE,
    NO_CHANGE,
    PASS,
    PENDING,
    REGRESSION,
    WARN,
    Comparison,
    DecisionPolicy,
    VerdictSettings,
    classes_for,
    decide,
    outcome,
)
from pytest_gpuperf.verdict.decide import BELOW_RESOLUTION, median_var
from pytest_gpuperf.verdict.secondary import FIRST_CALL, PEAK_MEMORY, compare_secondary
from tests.unit.runs import make_run, stats

T = 200e-6


def run(t: float, *, e2e: float | None = None, stability: str = "steady", spread: float = 0.0,
        hidden: bool | None = None) -> Run:  # fmt: skip
    """A run at ``t`` s per call; ``spread`` > 0 spreads its rounds over ``spread * t``
    around ``t``."""
    rounds = [t * (1 + spread * (i / 29 - 0.5)) for i in range(30)] if spread else [t] * 30
    e2e_rounds = [e2e * r / t for r in rounds] if e2e else ()
    return make_run(t, rounds, stability, e2e_rounds=e2e_rounds, host_hidden=hidden)


class Process:
    """Draws the level of one fresh process: fast mode, noise, and now and then a slow mode."""

    def __init__(self, t: float, sd: float, p_slow: float, rng: random.Random,
                 slow: tuple[float, float] = (1.3, 2.1)):  # fmt: skip
        self.t, self.sd, self.p_slow, self.rng, self.slow = t, sd, p_slow, rng, slow

    def __call__(self, factor: float = 1.0, mode: str = MODE_CPU) -> Run:
        level = self.t * factor * math.exp(self.rng.gauss(0.0, self.sd))
        if self.rng.random() < self.p_slow:
            level *= self.rng.uniform(*self.slow)
        return run(level)


def session(base: list[Run], draw, *, mode: str = MODE_CPU, policy=DEFAULT_POLICY) -> Comparison:
    """Runs added one at a time while the verdict is a suspect, as the gate does."""
    cur: list[Run] = []
    while True:
        cur.append(draw())
        c = decide(base, cur, mode=mode, policy=policy, last=len(cur) >= policy.max_runs)
        if c.final:
            return c


# --- the robust statistics -------------------------------------------------------------------


def test_the_variance_of_a_median_is_never_understated() -> None:
    """A side's level is the median of its runs: its variance factor is exact for one and two
    runs and above the simulated one beyond (the interval is conservative)."""
    rng = random.Random(0)
    for n in (1, 2, 3, 5, 8):
        meds = [sorted(rng.gauss(0, 1) for _ in range(n))[n // 2] if n % 2 else
                sum(sorted(rng.gauss(0, 1) for _ in range(n))[n // 2 - 1 : n // 2 + 1]) / 2
                for _ in range(20000)]  # fmt: skip
        var = sum(m * m for m in meds) / len(meds)
        assert median_var(n) >= var - 0.02
        assert median_var(n) <= 1.25 * var + 0.02


def test_one_outlier_in_the_baseline_moves_neither_its_level_nor_its_noise() -> None:
    """The baseline's level is its median run and its spread the median absolute deviation:
    a lucky-fast process (the gloo example's 1.059 ms among 1.7 ms runs) or a slow one
    changes neither, while runs that all spread widen the noise."""
    plain = decide([run(T), run(T * 1.01), run(T * 0.99)], [run(T)], mode=MODE_GRAPH)
    for odd in (0.3, 3.0):
        c = decide([run(T), run(T * 1.01), run(T * odd)], [run(T)], mode=MODE_GRAPH)
        assert c.baseline_s == pytest.approx(T, rel=0.011)
        assert c.lead.noise == pytest.approx(plain.lead.noise, rel=0.01)
    wide = decide([run(T * 0.8), run(T), run(T * 1.25)], [run(T)], mode=MODE_GRAPH)
    assert (
        wide.lead.noise is not None
        and plain.lead.noise is not None
        and wide.lead.noise > 1.3 * plain.lead.noise
    )


# --- the kinds ---------------------------------------------------------------------------------


def test_a_clear_regression_of_a_quiet_kernel_needs_its_class_s_confirmation() -> None:
    base = [run(T * x) for x in (1.0, 1.001, 0.999)]
    first = decide(base, [run(T * 1.10)], mode=MODE_GRAPH)
    assert (first.kind, first.final, not first.final) == (REGRESSION, False, True)
    assert outcome(first) == PENDING
    second = decide(base, [run(T * 1.10), run(T * 1.101)], mode=MODE_GRAPH)
    assert (second.kind, second.final, outcome(second)) == (REGRESSION, True, FAIL)
    assert "in every one of 2 runs" in words(second.reasons[0])


def test_a_slowdown_beyond_the_class_s_process_modes_is_decisive_at_once() -> None:
    base = [run(T * x) for x in (1.0, 1.05, 0.97)]
    for mode, factor in ((MODE_GRAPH, 3.0), (MODE_CPU, 10.0)):
        c = decide(base, [run(T * factor)], mode=mode)
        assert (c.kind, c.final) == (REGRESSION, True), (mode, c)
        assert "one run settles it" in words(c.reasons[0])


def test_beyond_the_class_s_modes_two_runs_settle_it() -> None:
    base = [run(T * x) for x in (1.0, 1.002, 0.998)]
    first = decide(base, [run(T * 1.5)], mode=MODE_GRAPH)
    assert (first.kind, first.final) == (REGRESSION, False)
    second = decide(base, [run(T * 1.5), run(T * 1.49)], mode=MODE_GRAPH)
    assert (second.kind, second.final) == (REGRESSION, True)
    assert "in both of 2 runs" in words(second.reasons[0])


def test_no_change_says_what_it_could_have_caught() -> None:
    base = [run(T * x) for x in (1.0, 1.002, 0.998)]
    c = decide(base, [run(T * 1.001)], mode=MODE_GRAPH)
    assert (c.kind, c.final, outcome(c)) == (NO_CHANGE, True, PASS)
    assert 0.03 <= c.lead.resolution < 0.08


def test_improvement_and_no_baseline_and_different_environment() -> None:
    base = [run(T * x) for x in (1.0, 1.002, 0.998)]
    assert decide(base, [run(T * 0.7)], mode=MODE_GRAPH).kind == IMPROVEMENT
    new = decide([], [run(T)])
    assert (new.kind, new.final, outcome(new)) == (NO_BASELINE, True, PASS)
    env = decide(base, [run(T * 2)], environment_diff=["torch 2.11 -> 2.12"])
    assert (env.kind, env.final, env.gated) == (DIFFERENT_ENVIRONMENT, True, False)


def test_a_suspect_that_cannot_be_confirmed_is_inconclusive_and_says_why() -> None:
    base = [run(T * x) for x in (1.0, 1.002, 0.998)]
    c = decide(base, [run(T * 1.10)], mode=MODE_GRAPH, last=True)
    assert (c.kind, c.final, outcome(c), outcome(c, "inconclusive")) == (
        INCONCLUSIVE, True, WARN, FAIL)  # fmt: skip
    assert "not confirmed" in words(c.reasons[0]) and "needs 2 fresh-process runs" in words(
        c.reasons[0]
    )


def test_a_clock_regime_the_baseline_never_saw_holds_back_only_what_it_can_explain() -> None:
    base = [run(T * x) for x in (1.0, 1.002, 0.998)]
    held = decide(base, [run(T * 1.1)] * 2, mode=MODE_GRAPH, environment_reason="clock 1590 MHz")
    assert (held.kind, held.final) == (REGRESSION, False)
    last = decide(base, [run(T * 1.1)] * 2, mode=MODE_GRAPH, environment_reason="clock", last=True)
    assert last.kind == INCONCLUSIVE and "environment: clock" in words(last.reasons[-1])
    big = decide(base, [run(T * 3)], mode=MODE_GRAPH, environment_reason="clock 1590 MHz")
    assert (big.kind, big.final) == (REGRESSION, True)


# --- only good evidence makes a verdict -------------------------------------------------------


def waited(t: float, share: float, clock: str = "wall", threads: float = 1.0) -> Run:
    """A CPU run at ``t`` whose threads waited for a CPU ``share`` of its rounds' time."""
    return make_run(t, contention={"waited": share, "threads": threads, "clock": clock})


def test_a_wall_clock_run_that_waited_for_a_cpu_never_settles_a_regression() -> None:
    """The 157x plateau of a default-threaded torch.mm under load: its threads waited for a
    CPU. Such a run is left out; a second one like it, from a fresh process, leaves the
    benchmark unmeasurable (inconclusive, with the remedy), never a regression."""
    base = [waited(T * x, 0.0) for x in (1.0, 1.02, 0.99)]
    first = decide(base, [waited(T * 157, 0.9, threads=2.0)], mode=MODE_CPU)
    assert (first.kind, first.final, first.why) == (INCONCLUSIVE, False, "unmeasurable")
    both = [waited(T * 157, 0.9, threads=2.0), waited(T * 221, 0.8, threads=2.0)]
    c = decide(base, both, mode=MODE_CPU)
    assert (c.kind, c.final, c.why, outcome(c)) == (INCONCLUSIVE, True, "unmeasurable", WARN)
    assert "torch.set_num_threads(1)" in words(c.reasons[0]) and "waited 0.90" in words(
        c.reasons[0]
    )
    assert c.ratio is None  # no evidence, no change shown
    # a good run after a bad one is judged on its own
    good = decide(base, [waited(T * 157, 0.9), waited(T * 3, 0.0)], mode=MODE_CPU)
    assert good.kind == REGRESSION and good.r == 1


def test_ranks_whose_own_threads_want_more_cpus_are_unmeasurable_on_any_load() -> None:
    """The gloo examples on the idle 2-core machine (tests/data/cpu-pools, pool-idle): 2 ranks,
    their measuring threads on one torch thread each, gloo's threads 8-16 CPUs' worth beside,
    waits of 40-80 % of the time, levels 1.5-1.9x apart between processes. Unmeasurable, and
    the remedy is a machine with more CPUs, not one torch thread or an idle runner."""
    base = [waited(T * x, 0.6, threads=12.0) for x in (1.0, 1.5, 1.2)]
    cur = [waited(T * 1.3, 0.6, threads=8.0), waited(T * 1.1, 0.7, threads=16.0)]
    c = decide(base, cur, mode="cpu-dist")  # MODE_CPU_DIST
    assert (c.kind, c.final, c.why) == (INCONCLUSIVE, True, "unmeasurable")
    said = words(c.reasons[0])
    assert "more CPUs" in said and "16.0 CPUs' worth" in said
    assert "set_num_threads" not in said and "idle runner" not in said


def test_waits_below_the_limit_and_waits_the_thread_clock_left_out_are_evidence() -> None:
    """The thread clock does not count waits for a CPU: a neighbour on the core is no reason
    to drop its run; a wall-clock run that waited 5 % or less is evidence too."""
    base = [waited(T * x, 0.0, "thread") for x in (1.0, 1.02, 0.99)]
    busy = [waited(T * 3, 0.8, "thread"), waited(T * 3.1, 0.9, "thread")]
    assert decide(base, busy, mode=MODE_CPU).kind == REGRESSION
    wall = [waited(T * x, 0.0) for x in (1.0, 1.02, 0.99)]
    little = decide(wall, [waited(T * 3, 0.05), waited(T * 3.1, 0.04)], mode=MODE_CPU)
    assert (little.kind, little.final) == (REGRESSION, True)


def test_a_thread_clock_that_timed_other_threads_counts_their_waits() -> None:
    """A default-threaded op whose workers were descheduled while the clock was chosen gets
    the thread clock, but its process used twice the thread's CPU time: the thread spun for
    its workers, so its waits count, and such a run is no evidence."""
    base = [waited(T * x, 0.0, "thread") for x in (1.0, 1.02, 0.99)]
    spun = decide(base, [waited(T * 50, 0.9, "thread", threads=2.0)], mode=MODE_CPU)
    assert (spun.kind, spun.why) == (INCONCLUSIVE, "unmeasurable")


def test_a_baseline_without_good_runs_is_unmeasurable_at_once() -> None:
    base = [waited(T * x, 0.6) for x in (1.0, 2.5, 1.7)]
    c = decide(base, [waited(T * 2.5, 0.0)], mode=MODE_CPU)
    assert (c.kind, c.final, c.why) == (INCONCLUSIVE, True, "unmeasurable")
    assert "3 baseline runs are no evidence" in words(c.reasons[0])


def test_bad_baseline_runs_are_left_out_and_said_so() -> None:
    """The gloo example's baseline: a lucky-fast process among slow ones that waited for a
    CPU; left out, the two good runs judge."""
    base = [waited(T * 0.4, 0.7), waited(T, 0.0), waited(T * 1.01, 0.0)]
    c = decide(base, [waited(T * 1.005, 0.0)], mode=MODE_CPU)
    assert c.kind in (NO_CHANGE, INCONCLUSIVE) and c.lead.k == 2
    assert any("baseline 1 of 3 (waited 0.70)" in n for n in map(words, c.notes))


def test_unsteady_runs_count_at_their_median() -> None:
    base = [run(T * x) for x in (1.0, 1.02, 0.99)]
    drifting = [run(T * 20, stability=NO_STEADY_STATE, spread=0.3)]
    c = decide(base, drifting, mode=MODE_CPU)
    assert (c.kind, c.final) == (REGRESSION, True)
    shifted = [run(T * x, stability=SHIFT, spread=0.1) for x in (1.0, 1.02, 0.99)]
    assert decide(shifted, [run(T * 10)], mode=MODE_CPU).kind == REGRESSION


# --- monotone: slower can only move a verdict towards REGRESSION ---------------------------------

_RANK = {NO_CHANGE: 0, IMPROVEMENT: 0, INCONCLUSIVE: 1, REGRESSION: 2}


@pytest.mark.parametrize("mode", [MODE_CPU, MODE_GRAPH, MODE_EVENTS])
def test_growing_a_slowdown_never_weakens_the_verdict(mode: str) -> None:
    rng = random.Random(7)
    for _ in range(200):
        draw = Process(T, rng.uniform(0.002, 0.1), rng.uniform(0, 0.5), rng)
        base = [draw() for _ in range(rng.randint(1, 6))]
        cur = [draw() for _ in range(rng.randint(1, 5))]
        if mode == MODE_EVENTS:
            base = [run(x.median, e2e=x.median * 2.5) for x in base]
            cur = [run(x.median, e2e=x.median * 2.5) for x in cur]
        last = rng.random() < 0.5
        prev = -1
        prev_final = False
        for factor in (1.0, 1.1, 1.3, 1.6, 2.0, 3.0, 10.0, 100.0):
            scaled = [
                run(x.median * factor, e2e=x.e2e_rounds[0] * factor if x.e2e_rounds else None)
                for x in cur
            ]
            c = decide(base, scaled, mode=mode, last=last)
            rank = _RANK[c.kind]
            assert rank >= prev, (factor, c.kind, prev)
            if prev == 2 and prev_final:
                assert c.final  # a final regression stays final
            prev, prev_final = rank, (c.final and c.kind == REGRESSION)
        assert prev == 2  # 100x is a regression, whatever the noise and the runs


# --- process modes: one slow process on either side ------------------------------------------------


def test_one_slow_process_on_either_side_neither_fails_nor_blinds() -> None:
    fast = [T * x for x in (1.0, 1.01, 0.99)]
    # baseline with one process 1.8x slow: the unchanged code still passes, 1.5x still fails
    base = [run(fast[0]), run(fast[1]), run(T * 1.8)]
    same = decide(base, [run(T * 1.005), run(T * 0.995)], mode=MODE_CPU)
    assert same.kind in (NO_CHANGE, IMPROVEMENT)
    slower = [run(T * 1.5 * x) for x in (1.0, 1.01, 0.995)]
    assert decide(base, slower, mode=MODE_CPU).kind == REGRESSION
    # current side: one slow process among fast ones is not a regression
    base = [run(t) for t in fast]
    mixed = decide(base, [run(T * 1.8), run(T * 1.004), run(T * 0.996)], mode=MODE_CPU)
    assert mixed.kind in (NO_CHANGE, IMPROVEMENT)


class HostBound:
    """A host-bound benchmark of the CUDA events backend: a quiet device figure, an
    end-to-end figure 3x longer whose processes land in a slow period (1.3-2.1x) a
    quarter of the time, as the H200 zoo's host-bound cases did."""

    def __init__(self, rng: random.Random, p_slow: float = 0.25):
        self.rng, self.p_slow = rng, p_slow

    def __call__(self, factor: float = 1.0) -> Run:
        e2e = 3 * T * factor * math.exp(self.rng.gauss(0.0, 0.05))
        if self.rng.random() < self.p_slow:
            e2e *= self.rng.uniform(1.3, 2.1)
        return run(T * math.exp(self.rng.gauss(0.0, 0.01)), e2e=e2e)


def test_a_1_6x_slowdown_below_resolution_is_never_no_change() -> None:
    """The newcomer's CPU case: all 5 current runs (46-66 us) slower than all 3 baseline runs
    (29.8-37.9 us), 1.6x with a 90 % interval of about 1.3x to 2x, across the threshold in
    force. Too small to tell: inconclusive below resolution (which
    --gpuperf-fail-on=inconclusive fails), never "no change"."""
    base = [run(x * 1e-6) for x in (29.8, 33.0, 37.9)]
    cur = [run(x * 1e-6) for x in (46.0, 50.0, 55.0, 60.0, 66.0)]
    c = decide(base, cur, mode=MODE_CPU, last=True)
    assert c.ratio is not None and 1.5 < c.ratio < 1.7
    assert c.lead.ratio_high is not None and c.lead.cutoff is not None
    assert c.lead.ratio_high - 1 >= c.lead.cutoff  # the interval reaches beyond it
    assert (c.kind, c.why, c.final) == (INCONCLUSIVE, BELOW_RESOLUTION, True)
    assert (outcome(c), outcome(c, "inconclusive")) == (WARN, FAIL)
    assert "below resolution" in words(c.reasons[0]) and "would catch >=" in words(c.reasons[0])


@pytest.mark.parametrize("factor", [1.0, 1.05, 1.2, 1.6, 2.5])
def test_no_change_only_when_the_interval_s_upper_end_is_below_the_threshold(
    factor: float,
) -> None:
    """Whatever the noise and the number of runs: "no change" means the interval's upper end
    is below the threshold in force; below resolution means it is not."""
    rng = random.Random(int(factor * 100))
    labels = set()
    for _ in range(300):
        sd = rng.choice((0.02, 0.1, 0.2))
        draw = lambda f=1.0, sd=sd: run(T * f * math.exp(rng.gauss(0, sd)))  # noqa: E731
        base = [draw() for _ in range(rng.choice((1, 3, 5)))]
        c = session(base, lambda draw=draw: draw(factor))
        assert c.lead.ratio_high is not None and c.lead.cutoff is not None
        if c.kind == NO_CHANGE:
            assert c.lead.ratio_high - 1 < c.lead.cutoff
        elif c.kind == INCONCLUSIVE and c.why == BELOW_RESOLUTION:
            assert c.lead.ratio_high - 1 >= c.lead.cutoff
        labels.add((c.kind, c.why))
    if factor == 1.0:
        assert (NO_CHANGE, "") in labels


def _aa(draw, mode: str, n: int) -> tuple[float, float]:
    cs = [session([draw() for _ in range(3)], draw, mode=mode) for _ in range(n)]
    return (
        sum(c.kind == REGRESSION for c in cs) / n,
        sum(c.kind == INCONCLUSIVE for c in cs) / n,
    )


def test_a_and_a_with_process_modes_fails_almost_never() -> None:
    """Unchanged code whose processes land in slow modes. The host-bound model is harsher
    than the H200 pools (a quarter of its processes 1.3-2.1x slow): the median of three
    current runs reads two slow ones as slower, so up to an eighth of its A/A sessions end
    inconclusive (the pools: 1.5-15 %), none fails."""
    rng = random.Random(11)
    host = _aa(HostBound(rng), MODE_EVENTS, 2000)
    # placement modes of a 2 us graph-replayed kernel: 30 % of processes 3-8 % slower
    graph = _aa(Process(2e-6, 0.005, 0.3, rng, (1.03, 1.08)), MODE_GRAPH, 2000)
    # a CPU benchmark as the CPU pools measured one: levels of robust SD 0.06, and one
    # process in seven 1.5-2x slower than the rest
    cpu = _aa(Process(T, 0.06, 1 / 7, rng, (1.5, 2.0)), MODE_CPU, 2000)
    assert max(host[0], graph[0], cpu[0]) <= 0.003, (host, graph, cpu)
    # one as noisy as the pools' noisiest tenth (its level moves +-30 % between processes):
    # the three runs a regression of it needs, every one slower, bound its rate
    noisy = _aa(lambda: run(T * rng.uniform(0.7, 1.3)), MODE_CPU, 2000)
    assert noisy[0] <= 0.01, noisy
    assert host[1] <= 0.12 and graph[1] <= 0.05 and cpu[1] <= 0.05, (host, graph, cpu)


@pytest.mark.parametrize(("factor", "at_least"), [(1.5, 0.65), (2.0, 0.8), (3.0, 0.99)])
def test_a_and_b_of_host_bound_work_with_slow_periods(factor: float, at_least: float) -> None:
    """A quarter of processes slow by 1.3-2.1x: a baseline of 3 holds two or more slow ones
    16 % of the time, which sets its level in the slow mode and widens its noise (more
    baseline runs shrink that share). The H200 pools' host-bound slowdowns, >= 1.2x, were
    caught in every replayed session; this model is harsher."""
    rng = random.Random(12)
    draw = HostBound(rng)
    n = 400
    caught = sum(
        session([draw() for _ in range(3)], lambda: draw(factor), mode=MODE_EVENTS).kind
        == REGRESSION
        for _ in range(n)
    )
    assert caught >= at_least * n


def test_the_cpu_checks() -> None:
    """The CPU backend's promises: quiet 2x fails; +-30 % noise passes unchanged, fails at 10x."""
    rng = random.Random(6)
    quiet = lambda f=1.0: run(T * f * math.exp(rng.gauss(0, 0.01)))  # noqa: E731
    noisy = lambda f=1.0: run(T * f * rng.uniform(0.7, 1.3))  # noqa: E731
    for _ in range(200):
        assert session([quiet() for _ in range(3)], lambda: quiet(2.0)).kind == REGRESSION
        assert session([noisy() for _ in range(3)], lambda: noisy(10.0)).kind == REGRESSION
        assert session([quiet() for _ in range(3)], quiet).kind != REGRESSION


def test_a_10x_slowdown_of_a_level_moving_30_percent_between_processes_fails() -> None:
    rng = random.Random(13)
    for _ in range(200):
        base = [run(T * rng.uniform(0.7, 1.3)) for _ in range(3)]
        c = session(base, lambda: run(T * 10 * rng.uniform(0.7, 1.3)))
        assert (c.kind, c.final) == (REGRESSION, True)
        assert c.r <= 2


# --- two figures ----------------------------------------------------------------------------------


def test_the_classes_follow_what_the_baseline_shows() -> None:
    device_bound = [run(T, e2e=T * 1.0) for _ in range(3)]
    host_bound = [run(T, e2e=T * 2.5) for _ in range(3)]
    assert {f: c.name for f, c in classes_for(stats(device_bound), MODE_EVENTS).items()} == {
        "device": "device", "end-to-end": "device"}  # fmt: skip
    assert {f: c.name for f, c in classes_for(stats(host_bound), MODE_EVENTS).items()} == {
        "device": "launches", "end-to-end": "host"}  # fmt: skip
    tiny = [run(5e-6, e2e=6e-6) for _ in range(3)]
    assert classes_for(stats(tiny), MODE_EVENTS)["end-to-end"].name == "host"
    # device-bound in its baseline, but the host needs 3/4 of the device time per call: a
    # slow period of the host makes it host-bound (seen on an H200: 16 chained kernels)
    close = [replace(run(T, e2e=T * 0.97), host_s=0.75 * T) for _ in range(3)]
    assert {f: c.name for f, c in classes_for(stats(close), MODE_EVENTS).items()} == {
        "device": "launches", "end-to-end": "host"}  # fmt: skip
    far = [replace(run(T, e2e=T * 0.97), host_s=0.1 * T) for _ in range(3)]
    assert classes_for(stats(far), MODE_EVENTS)["end-to-end"].name == "device"
    assert classes_for(stats(device_bound), MODE_GRAPH) == {"time": CLASSES["graph"]}


def test_a_host_side_regression_is_caught_by_the_end_to_end_figure() -> None:
    base = [run(T, e2e=T * 2 * x) for x in (1.0, 1.05, 1.5)]
    c = session(base, lambda: run(T * 1.001, e2e=T * 10), mode=MODE_EVENTS)
    assert (c.kind, c.final, c.lead.figure, c.r) == (REGRESSION, True, "end-to-end", 2)
    assert {f.figure: f.kind for f in c.figures} == {"device": NO_CHANGE, "end-to-end": REGRESSION}


def test_a_device_figure_measured_with_host_waits_is_not_settled_by_one_run() -> None:
    # A process whose host hiding failed counts its host's time per call in its device
    # figure: at most about its end-to-end time (here equal to the device time), so a 2x
    # device figure may be that accident; a second run settles it.
    base = [run(T, e2e=T * 1.0, hidden=True) for _ in range(3)]
    waits = run(T * 2, e2e=T * 1.0, hidden=False)
    c = decide(base, [waits], mode=MODE_EVENTS)
    assert (c.kind, c.final) == (REGRESSION, False)
    assert any("waits for the GPU" in n for n in map(words, c.notes))
    again = decide(base, [waits, run(T * 2, e2e=T * 1.0, hidden=False)], mode=MODE_EVENTS)
    assert (again.kind, again.final) == (REGRESSION, True)


def test_host_waits_far_beyond_what_the_host_adds_are_settled_by_one_run() -> None:
    # The one-run bar of the device class (2.25x and its noise), times what the host can add
    # (the baseline's end-to-end over device time): beyond it, one run is evidence enough.
    base = [run(T, e2e=T * 1.5, hidden=True) for _ in range(3)]
    within = decide(base, [run(T * 3.2, e2e=T * 1.5, hidden=False)], mode=MODE_EVENTS)
    assert (next(f for f in within.figures if f.figure == "device").kind, within.final) == (
        REGRESSION,
        False,
    )
    beyond = decide(base, [run(T * 4, e2e=T * 1.5, hidden=False)], mode=MODE_EVENTS)
    assert (beyond.kind, beyond.final, beyond.lead.figure) == (REGRESSION, True, "device")


@pytest.mark.parametrize(
    ("device", "e2e", "hidden"),
    [
        (12.3, 2.3, False),  # a recompile storm: Dynamo's guard waits on the GPU (device time)
        (4.5, 1.8, False),  # a host sync per layer: waits included in the device time
        (20.0, 20.0, True),  # more work: both figures
    ],
)
def test_with_no_confirmations_a_slowdown_beyond_the_one_run_bar_fails(
    device: float, e2e: float, hidden: bool
) -> None:
    policy = DecisionPolicy(max_runs=1)  # --gpuperf-reruns=0
    base = [run(T * x, e2e=T * 1.2 * x, hidden=True) for x in (1.0, 1.01, 1.02)]
    c = decide(base, [run(T * device, e2e=T * 1.2 * e2e, hidden=hidden)], mode=MODE_EVENTS,
               policy=policy)  # fmt: skip
    assert (c.kind, c.final) == (REGRESSION, True)


def test_with_no_confirmations_a_slowdown_below_the_one_run_bar_is_inconclusive() -> None:
    policy = DecisionPolicy(max_runs=1)
    base = [run(T * x, e2e=T * x, hidden=True) for x in (1.0, 1.01, 1.02)]
    c = decide(base, [run(T * 1.5, e2e=T * 1.5, hidden=True)], mode=MODE_EVENTS, policy=policy)
    assert (c.kind, c.final) == (INCONCLUSIVE, True)
    assert "not confirmed" in words(c.reasons[0])


def test_the_verdict_depends_on_nothing_but_the_benchmark_s_own_runs() -> None:
    """No pooling across benchmarks: decide() sees one benchmark; there is no session size."""
    base = [run(T * x) for x in (1.0, 1.002, 0.998)]
    c1 = decide(base, [run(T * 1.5)], mode=MODE_GRAPH)
    c2 = decide(list(base), [run(T * 1.5)], mode=MODE_GRAPH)
    assert c1 == c2 and c1.kind == REGRESSION


# --- value objects ----------------------------------------------------------------------------------


def test_comparison_round_trips_through_json() -> None:
    base = [run(T, e2e=T * 2) for _ in range(3)]
    c = decide(base, [run(T * 1.2, e2e=T * 2.1)], mode=MODE_EVENTS, name="mm")
    again = Comparison.from_dict(json.loads(json.dumps(c.to_dict())))
    assert again.kind == c.kind and again.figures[0].figure == "device"
    assert again.ratio == pytest.approx(c.ratio)


def _judged_result() -> Result:
    """A result with every part of a verdict: figures, secondary metrics, numerics (with a
    non-finite difference), and the capture's diagnosis."""
    base = [run(T, e2e=T * 2) for _ in range(3)]
    c = decide(base, [run(T * 1.2, e2e=T * 2.1)], mode=MODE_EVENTS, name="mm")
    memory = compare_secondary([1e9, 1.01e9], 1.3e9, 0.05, metric=PEAK_MEMORY)
    first = compare_secondary([0.5], None, 0.5, metric=FIRST_CALL)
    numerics = NumericsComparison(NUMERICS_CHANGED, 1e-3, max_rel=math.inf, where="out sample 3",
                                  current=-math.inf, baseline=1.0, changes=("out NaN count 0 -> 1",),
                                  baseline_runs=3, current_runs=1, gated=True)  # fmt: skip
    r = Result(Run(BenchId("t.py::test_mm", None, MODE_EVENTS), "cuda", (T * 1.2,) * 5, 1, 0.5))
    r.comparison = replace(c, secondary=(memory, first), numerics=numerics)
    r.diagnosis = Diagnosis(r.id.key, "mm is 20 % slower.", ["kernel-slower"], ["gemm +20 %"])
    return r


def test_a_result_s_verdict_is_typed_and_becomes_a_dict_only_in_its_json() -> None:
    r = _judged_result()
    d = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    c = d["comparison"]
    # the JSON keeps its shape: every field of the verdict, the diagnosis beside them
    assert list(c) == [*JSON_KEYS, "diagnosis"]
    assert "diagnosis" not in d
    assert c["numerics"]["max_rel"] == "inf" and c["numerics"]["current"] == "-inf"
    assert c["secondary"][0]["metric"] == PEAK_MEMORY and c["secondary"][0]["kind"] == "higher"
    assert c["diagnosis"] == {
        "key": r.id.key, "cause": "kernel-slower", "causes": ["kernel-slower"],
        "paragraph": "mm is 20 % slower.", "details": ["gemm +20 %"],
    }  # fmt: skip
    again = Result.from_dict(d)
    assert again.comparison == r.comparison and again.diagnosis == r.diagnosis
    assert isinstance(again.comparison, Comparison)
    assert again.comparison.numerics is not None and again.comparison.numerics.fails
    assert json.loads(json.dumps(again.to_dict())) == d


def test_a_result_without_verdict_or_diagnosis_and_one_with_a_diagnosis_alone() -> None:
    r = _judged_result()
    r.comparison, r.diagnosis = None, None
    assert r.to_dict()["comparison"] is None
    assert Result.from_dict(r.to_dict()).comparison is None
    r.diagnosis = Diagnosis(r.id.key, "captured without a baseline", [])
    d = r.to_dict()
    assert d["comparison"] == {"diagnosis": r.diagnosis.to_dict()}
    again = Result.from_dict(d)
    assert again.comparison is None and again.diagnosis == r.diagnosis
    r.comparison = _judged_result().comparison
    r.diagnosis = None
    assert r.to_dict()["comparison"]["diagnosis"] is None


def test_policy_validation_and_settings() -> None:
    assert VerdictSettings(reruns=0).decision_policy().max_runs == 1
    assert VerdictSettings(alpha=0.001).decision_policy().z == pytest.approx(3.09, abs=0.01)
    with pytest.raises(ValueError, match="fail_on"):
        DecisionPolicy(fail_on="always")
    with pytest.raises(ValueError, match="threshold"):
        DecisionPolicy(threshold=1.5)


def test_a_single_saved_run_gives_verdicts_against_the_class_prior() -> None:
    """README: one saved run gives verdicts, its threshold widened by the class's prior alone
    (no spread of its own): unchanged code is no change, a 3x slowdown a regression."""
    for mode in (MODE_GRAPH, MODE_CPU):
        same = decide([run(T)], [run(T * 1.001)], mode=mode)
        assert (same.kind, same.final, same.lead.noise_own) == (NO_CHANGE, True, None)
        assert same.lead.cutoff >= 0.03
        assert session([run(T)], lambda: run(T * 3), mode=mode).kind == REGRESSION


def test_moderated_noise_keeps_the_prior_when_runs_agree_whatever_its_weight() -> None:
    """Runs with no spread do not contradict the class's prior: it keeps its weight, also
    when the policy gives it none (prior_weight 0 divided 0 by 0 once)."""
    from pytest_gpuperf.verdict.robust import moderate

    assert moderate(0.01, 0.0, 0.0, 3) == 0.0
    assert moderate(0.01, 4.0, 0.0, 3) == pytest.approx(math.sqrt(4 * 0.01**2 / 7))
    assert moderate(0.01, 4.0, 0.05, 3) > 0.03  # far noisier runs: judged by their own SD

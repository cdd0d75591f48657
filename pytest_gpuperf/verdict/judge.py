"""One benchmark against a loaded baseline: its comparable runs, found once, and its verdicts.

The gate (with fresh-process re-runs) and ``pytest-gpuperf compare`` (stored runs) both go
through :class:`Judge`, so both apply one rule: the same match of environment and
measurement settings, the same telemetry check, the same secondary metrics. No torch, no pytest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_gpuperf.baseline import records as br
from pytest_gpuperf.baseline.fingerprint import fingerprint
from pytest_gpuperf.baseline.records import Baseline, Match
from pytest_gpuperf.measure.backend import BUILTIN, Modes
from pytest_gpuperf.model import Result, Run
from pytest_gpuperf.outcome import Comparison, NumericsComparison, SecondaryComparison
from pytest_gpuperf.telemetry.regime import confirm_in_cycles, regime_difference
from pytest_gpuperf.verdict.decide import PENDING, decide, outcome, with_note
from pytest_gpuperf.verdict.numerics import GATE as GATE_NUMERICS
from pytest_gpuperf.verdict.numerics import OFF, StoredFingerprint
from pytest_gpuperf.verdict.numerics import compare as compare_numerics
from pytest_gpuperf.verdict.policy import DEFAULT_POLICY, DecisionPolicy, VerdictSettings
from pytest_gpuperf.verdict.secondary import (
    FIRST_CALL,
    HIGHER,
    MEMORY_BEHAVIOUR,
    PEAK_MEMORY,
    TRANSFERS,
    compare_secondary,
    transfer_bytes,
)


def environment_reason(
    runs: Sequence[Run],
    median_s: float,
    telemetry: Mapping[str, Any] | None,
    threshold: float,
) -> tuple[str | None, str | None]:
    """(why the conditions are not comparable, or a note) from both sides' telemetry: a clock
    regime that differs holds back a regression, unless it persists in cycles (then a note)."""
    baseline_telemetry = [r.telemetry for r in runs if r.telemetry]
    if not baseline_telemetry or not telemetry:
        return None, None
    reason = regime_difference(baseline_telemetry, telemetry)
    if reason is None:
        return None, None
    check = confirm_in_cycles(
        [(r.median, r.telemetry) for r in runs], median_s, telemetry, min_change=threshold
    )
    if check.confirmed:
        return None, f"{reason}; the slowdown persists in cycles: {check.explanation}"
    return f"{reason} ({check.explanation})", None


@dataclass(frozen=True)
class Verdict:
    """The verdict on one benchmark at one look, as the gate acts on it."""

    comparison: Comparison
    #: what the test item does (:func:`~pytest_gpuperf.verdict.decide.outcome`)
    outcome: str
    #: what fails the test beyond its time: a gated secondary metric, gated numerics (the
    #: reports say it: :func:`pytest_gpuperf.reporting.explain.failure_words`)
    failures: tuple[SecondaryComparison | NumericsComparison, ...] = ()


class Judge:
    """Verdicts of current results against one baseline.

    ``fingerprint_extra``: what plugins add to the environment fingerprint; ``settings``:
    the session's, under each result's own (``Result.gate``); ``modes``: the run's timing
    modes. Each result's match is computed once (:meth:`match`) and kept.
    """

    def __init__(
        self,
        baseline: Baseline,
        policy: DecisionPolicy = DEFAULT_POLICY,
        fingerprint_extra: Mapping[str, Any] | None = None,
        settings: VerdictSettings | None = None,
        modes: Modes | None = None,
    ):
        self.baseline = baseline
        self.modes = BUILTIN if modes is None else modes
        self.policy = policy
        self.fingerprint_extra = dict(fingerprint_extra) if fingerprint_extra else None
        self.settings = settings if settings is not None else VerdictSettings()
        self._matches: dict[tuple[str, str | None], Match] = {}

    def match(self, result: Result, fp: Mapping[str, Any] | None = None) -> Match:
        """The baseline's runs comparable with ``result`` (``fp``: its fingerprint, if known)."""
        key = (result.id.key, result.run.run_id)
        if key not in self._matches:
            if fp is None:
                fp = fingerprint(result.run.environment or {}, self.fingerprint_extra)
            self._matches[key] = self.baseline.match(result.id.key, fp, result.run.policy)
        return self._matches[key]

    def forget(self, keys: Iterable[str]) -> None:
        """Let go of the judged benchmarks' runs (a session of thousands would hold them all)."""
        gone = set(keys)
        for cached in [k for k in self._matches if k[0] in gone]:
            del self._matches[cached]

    def policy_for(self, result: Result) -> DecisionPolicy:
        """The session's policy, with this benchmark's own threshold where it has one."""
        threshold = result.gate.get("threshold")
        if threshold is None or float(threshold) == self.policy.threshold:
            return self.policy
        return replace(self.policy, threshold=float(threshold))

    def decide(
        self,
        result: Result,
        runs: Sequence[Run],
        *,
        last: bool = False,
        policy: DecisionPolicy | None = None,
        fp: Mapping[str, Any] | None = None,
    ) -> Comparison:
        """The verdict on ``runs`` of ``result``'s benchmark (``result``'s run first): its
        policy, the baseline's runs it matches, why the conditions differ, then the rule."""
        pol = policy or self.policy_for(result)
        match = self.match(result, fp)
        stored: Sequence[Run] = ()
        diff: list[str] = []
        reason = note = None
        if match.status in (br.OTHER_ENVIRONMENT, br.OTHER_POLICY):
            stored = self.baseline.runs(result.id.key, match.fingerprint_id or "")
            label = "" if match.status == br.OTHER_ENVIRONMENT else "measurement settings: "
            diff = [label + d for d in match.differences] or ["environment"]
        elif match.status != br.NO_BENCHMARK:
            stored = match.runs
            reason, note = environment_reason(
                stored, result.run.median, result.run.telemetry, pol.threshold
            )
        current, base = list(runs), list(stored)
        common: dict[str, Any] = {"policy": pol, "name": result.id.display, "last": last}
        if match.status == br.NO_BENCHMARK:
            return decide([], current, **common)
        c = decide(
            # another environment's runs, none left: the verdict is the difference alone
            (base or current[:1]) if diff else base,
            current,
            mode=self.modes.get(result.id.mode),
            environment_reason=reason,
            environment_diff=diff,
            **common,
        )
        return with_note(c, note) if note else c

    def verdict(
        self, result: Result, runs: Sequence[Result], *, last: bool = False, note: str = ""
    ) -> Verdict:
        """:meth:`decide` on ``runs`` (``result`` first), with ``note``, and once final
        :meth:`conclude`."""
        c = self.decide(result, [r.run for r in runs], last=last)
        if note:
            c = with_note(c, note)
        if not c.final:
            return Verdict(c, PENDING)
        return self.conclude(result, c, [r.run.numerics for r in runs])

    def conclude(
        self, result: Result, c: Comparison, outputs: Sequence[Sequence[Mapping[str, Any]] | None]
    ) -> Verdict:
        """The final ``c`` with its secondary metrics and numerics (``outputs``: each run's
        fingerprints), what the test does, and the gated ones that fail it."""
        mine = self.settings.for_result(result.gate)
        tolerances = {PEAK_MEMORY: mine.memory_tolerance, FIRST_CALL: mine.first_call_tolerance}
        found = self.secondary(result, tolerances)
        failures: list[SecondaryComparison | NumericsComparison] = [
            s for s in found if s.kind == HIGHER and s.metric in GATED.get(mine.gate_secondary, ())
        ]
        c = replace(c, secondary=tuple(found))
        match = self.match(result)
        if mine.numerics != OFF and match.status == br.MATCH and result.run.numerics:
            # this run's fingerprints (first) against the comparable runs'
            base = [StoredFingerprint(x.numerics, x.commit) for x in match.runs if x.numerics]
            gated = mine.numerics == GATE_NUMERICS
            cur = [o for o in outputs if o]
            numerics = compare_numerics(base, cur, mine.numerics_tolerance, gated=gated)
            c = replace(c, numerics=numerics)
            if numerics.fails:  # what failed is the output, never the time
                failures.append(numerics)
        return Verdict(c, outcome(c, self.policy.fail_on), tuple(failures))

    def secondary(
        self, result: Result, tolerances: Mapping[str, float]
    ) -> list[SecondaryComparison]:
        """Peak memory, first-call time and memory behaviour against the comparable runs
        (none without a match; a memory-behaviour figure only where this run has it: the
        allocator's figures per call and the inventory's host-device bytes per call)."""
        match = self.match(result)
        if match.status != br.MATCH:
            return []
        out = []
        for metric in GATED["all"]:
            cur = _value(result.run, metric)
            base = [_value(r, metric) for r in match.runs]
            fixed = metric in (PEAK_MEMORY, FIRST_CALL)
            if fixed or (cur is not None and any(b is not None for b in base)):
                tol = tolerances[metric if fixed else PEAK_MEMORY]
                out.append(compare_secondary(base, cur, tol, metric=metric))
        return out


def _value(run: Run, metric: str) -> float | None:
    """A run's figure of a secondary metric (None: not recorded)."""
    if metric in (PEAK_MEMORY, FIRST_CALL):
        return run.peak_memory_bytes if metric == PEAK_MEMORY else run.first_call_s
    if metric == TRANSFERS:
        return transfer_bytes(run.extra.get("kernels"))
    v = (run.memory or {}).get(metric)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


#: the metrics each ``--gpuperf-gate-secondary`` option fails a test on
GATED = {
    "memory": (PEAK_MEMORY,),
    "first-call": (FIRST_CALL,),
    "allocations": MEMORY_BEHAVIOUR,
    "all": (PEAK_MEMORY, FIRST_CALL, *MEMORY_BEHAVIOUR),
}

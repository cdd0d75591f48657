"""The gate: compare a test's results with the baseline, confirm suspects, fail regressions.

Runs in the process that ran the test (xdist workers included), right after
the test function returns, so that a regression fails *its own* test item
with its own explanation. The statistics are :mod:`pytest_gpuperf.verdict`'s;
this module feeds them: the baseline's comparable runs, the session's number
of gated benchmarks (``m``, fixed at collection), the runner's noise prior,
and fresh-process re-measurements (:mod:`pytest_gpuperf.rerun`) while a
verdict is not final.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.errors import GpuPerfWarning
from pytest_gpuperf.model import Result

if TYPE_CHECKING:
    from pytest_gpuperf.baseline import Baseline, BaselineStore, RunRecord
    from pytest_gpuperf.config import GpuPerfConfig
    from pytest_gpuperf.progress import Progress
    from pytest_gpuperf.verdict import Comparison, DecisionPolicy, NoisePrior


def baseline_dir(config: pytest.Config, cfg: GpuPerfConfig) -> Path:
    """``--gpuperf-baseline-dir``, relative to the rootdir (stable whatever the cwd)."""
    path = Path(str(cfg["baseline_dir"])).expanduser()
    return path if path.is_absolute() else config.rootpath / path


_EXTRA_KEY = pytest.StashKey[dict[str, Any]]()


def fingerprint_extra(config: pytest.Config) -> dict[str, Any]:
    """Fields users' plugins add to the fingerprint (pytest_gpuperf_update_fingerprint), once."""
    if _EXTRA_KEY not in config.stash:
        extra: dict[str, Any] = {}
        config.hook.pytest_gpuperf_update_fingerprint(config=config, fingerprint=extra)
        config.stash[_EXTRA_KEY] = extra
    return config.stash[_EXTRA_KEY]


@dataclass
class Judgement:
    """The verdicts of one test's results, after confirmation."""

    comparisons: dict[str, Comparison] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reruns: int = 0
    rerun_s: float = 0.0


class Gate:
    """Everything the session needs to judge results against one baseline."""

    def __init__(
        self,
        config: pytest.Config,
        cfg: GpuPerfConfig,
        baseline: Baseline,
    ):
        from pytest_gpuperf.verdict import DecisionPolicy

        self.config = config
        self.cfg = cfg
        self.baseline = baseline
        self.policy: DecisionPolicy = DecisionPolicy.from_settings(
            {k: cfg[k] for k in ("threshold", "alpha", "fail_on", "reruns")}
        )
        self.m = 1
        self._priors: dict[str, NoisePrior | None] = {}
        self.rerun_count = 0
        self.rerun_s = 0.0

    @classmethod
    def load(cls, config: pytest.Config, cfg: GpuPerfConfig) -> Gate:
        """Load ``--gpuperf-baseline``; a missing or broken file raises a BaselineError."""
        from pytest_gpuperf.baseline import BaselineStore

        store = BaselineStore(baseline_dir(config, cfg))
        return cls(config, cfg, store.load(str(cfg["baseline"])))

    def set_collected(self, nodeids: Sequence[str]) -> None:
        """m = benchmarks of the baseline whose test was collected (one family per session)."""
        wanted = set(nodeids)
        self.m = max(1, sum(1 for e in self.baseline.benchmarks.values() if e.nodeid in wanted))

    # --- per result ---------------------------------------------------------

    def fingerprint(self, result: Result) -> dict[str, Any]:
        from pytest_gpuperf.fingerprint import fingerprint

        return fingerprint(result.environment or {}, fingerprint_extra(self.config) or None)

    def policy_for(self, result: Result) -> DecisionPolicy:
        """The session's policy, with this benchmark's own threshold where it has one."""
        threshold = result.gate.get("threshold")
        if threshold is None or math.isclose(float(threshold), self.policy.threshold):
            return self.policy
        return self.policy.with_threshold(float(threshold))

    def decide(
        self,
        result: Result,
        current: list[Any],
        look: int,
        policy: DecisionPolicy,
    ) -> Comparison:
        """The verdict on one result's current runs (the rule shared with the CLI's compare)."""
        from pytest_gpuperf.compare import decide_against

        return decide_against(
            self.baseline,
            result.id.key,
            self.fingerprint(result),
            result.policy,
            current,
            policy=policy,
            m=self.m,
            look=look,
            name=result.id.display,
            median_s=result.median,
            telemetry=result.telemetry,
            priors=self._priors,
            mode=result.id.mode,
        )

    def _setting(self, result: Result, name: str) -> Any:
        """A verdict setting as resolved for this benchmark, else the session's."""
        return result.gate.get(name, self.cfg[name])

    def secondary(self, result: Result, runs: Sequence[RunRecord]) -> list[dict[str, Any]]:
        from pytest_gpuperf.secondary import FIRST_CALL, PEAK_MEMORY, compare_secondary

        out = []
        for metric, current, values, tol in (
            (PEAK_MEMORY, result.peak_memory_bytes, [r.peak_memory_bytes for r in runs],
             float(self._setting(result, "memory_tolerance"))),
            (FIRST_CALL, result.first_call_s, [r.first_call_s for r in runs],
             float(self._setting(result, "first_call_tolerance"))),
        ):  # fmt: skip
            out.append(compare_secondary(values, current, tol, metric=metric).to_dict())
        return out

    # --- per test -------------------------------------------------------------

    def judge(
        self,
        item: pytest.Item,
        results: list[Result],
        *,
        device: str,
        progress: Progress | None = None,
    ) -> Judgement:
        """Verdicts for one test's results, re-measuring suspects in fresh processes."""
        from pytest_gpuperf.baseline import records as br
        from pytest_gpuperf.progress import silent
        from pytest_gpuperf.reporting.explain import explain, summary_line
        from pytest_gpuperf.rerun import is_child, matching, run_child
        from pytest_gpuperf.secondary import HIGHER, explain_secondary
        from pytest_gpuperf.verdict import RunStat, outcome

        out = Judgement()
        policies = {r.id.key: self.policy_for(r) for r in results}
        current: dict[str, list[Any]] = {r.id.key: [RunStat.from_result(r)] for r in results}
        comps = {
            r.id.key: self.decide(r, current[r.id.key], 1, policies[r.id.key]) for r in results
        }
        look = 1
        while look < self.policy.looks and not is_child(self.config):
            pending = [r for r in results if not comps[r.id.key].final]
            if not pending:
                break
            look += 1
            label = (
                f"re-measuring {item.nodeid} in a fresh process "
                f"(look {look} of {self.policy.looks})"
            )
            with (progress or silent()).task(label):
                child = run_child(self.config, self.cfg, item.nodeid, device=device)
            out.reruns += 1
            out.rerun_s += child.wall_s
            self.rerun_count += 1
            self.rerun_s += child.wall_s
            for r in pending:
                again = matching(child.results, r.id.key)
                if again is not None:
                    current[r.id.key].append(RunStat.from_result(again))
                    comps[r.id.key] = self.decide(r, current[r.id.key], look, policies[r.id.key])
                else:
                    # No second opinion could be had: decide on what there is, as final.
                    c = self.decide(r, current[r.id.key], self.policy.looks, policies[r.id.key])
                    why = (
                        f"the confirmation run failed (exit {child.returncode}): "
                        f"{child.log_tail[-300:]}"
                    )
                    comps[r.id.key] = _with_note(c, why)
        for r in results:
            gate_secondary = str(self._setting(r, "gate_secondary"))
            c = comps[r.id.key]
            r.comparison = c.to_dict()
            match = self.baseline.match(r.id.key, self.fingerprint(r), r.policy)
            if match.status == br.MATCH:
                secondary = self.secondary(r, match.runs)
                r.comparison["secondary"] = secondary
                for s in secondary:
                    if s["kind"] == HIGHER and _gated(gate_secondary, s["metric"]):
                        from pytest_gpuperf.secondary import SecondaryComparison

                        out.failures.append(
                            f"{r.id.display} [{r.id.mode}]: "
                            + explain_secondary(SecondaryComparison.from_dict(s))
                        )
            out.comparisons[r.id.key] = c
            verdict = outcome(c, self.policy.fail_on) if c.final else "pass"
            if verdict == "fail":
                out.failures.append(f"{r.id.display} [{r.id.mode}]\n{explain(c)}")
            elif verdict == "warn":
                out.warnings.append(f"[{r.id.mode}] {summary_line(c)}")
        return out


def _gated(option: str, metric: str) -> bool:
    if option == "all":
        return True
    return (option == "memory" and metric == "peak_memory") or (
        option == "first-call" and metric == "first_call"
    )


def _with_note(c: Comparison, note: str) -> Comparison:
    from dataclasses import replace

    return replace(c, notes=(*c.notes, note))


def warn_inconclusive(item: pytest.Item, messages: Sequence[str]) -> None:
    """A warning per inconclusive verdict, pointing at the test (not at the plugin)."""
    path, lineno, _ = item.location
    for msg in messages:
        warnings.warn_explicit(
            GpuPerfWarning(msg),
            GpuPerfWarning,
            filename=str(item.config.rootpath / path),
            lineno=(lineno or 0) + 1,
        )


def save(
    config: pytest.Config,
    cfg: GpuPerfConfig,
    results: Sequence[Result],
    *,
    meta: dict[str, Any],
    extras: dict[str, dict[str, Any]] | None = None,
    progress: Progress | None = None,
) -> str:
    """Append this session's results to ``--gpuperf-save``; returns the line for the summary.

    Waits for the baseline's lock as long as ``--gpuperf-lock-timeout`` says, with a
    progress line naming the holder.
    """
    from dataclasses import replace

    from pytest_gpuperf.baseline import BaselineStore
    from pytest_gpuperf.telemetry import regime_summary

    store: BaselineStore = BaselineStore(
        baseline_dir(config, cfg),
        lock_timeout=float(cfg["lock_timeout"]),
        on_wait=progress.task if progress is not None else None,
    )
    # The baseline keeps what later comparisons need of the telemetry, not its raw stream.
    compact = [replace(r, telemetry=regime_summary(r.telemetry)) for r in results]
    summary = store.save(
        str(cfg["save"]),
        compact,
        keep_runs=int(cfg["keep_runs"]),
        meta=meta,
        fingerprint_extra=fingerprint_extra(config) or None,
        extras=extras,
    )
    return summary.describe()


def check_save_target(config: pytest.Config, cfg: GpuPerfConfig) -> None:
    """Before measuring anything: an existing baseline to save into must be readable."""
    from pytest_gpuperf.baseline import BaselineStore, check_name

    store = BaselineStore(baseline_dir(config, cfg))
    store.check(check_name(str(cfg["save"])))


def run_meta(config: pytest.Config) -> dict[str, Any]:
    """Where this run comes from: git commit and CI identifiers, best effort."""
    import os
    import subprocess

    meta: dict[str, Any] = {}
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=config.rootpath,
            capture_output=True,
            text=True,
            timeout=5,
        )
        if sha.returncode == 0:
            meta["git_sha"] = sha.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    for env, key in (
        ("GITHUB_SHA", "ci_sha"),
        ("GITHUB_REF", "ci_ref"),
        ("GITHUB_RUN_ID", "ci_run_id"),
        ("GITHUB_WORKFLOW", "ci_workflow"),
    ):
        if os.environ.get(env):
            meta[key] = os.environ[env]
    return meta

"""``pytest-gpuperf compare``: two :class:`RunSet` (a baseline, or a ``--gpuperf-json`` run
file seen as one) judged by the gate's own rule (:class:`~pytest_gpuperf.verdict.judge.Judge`);
nothing can be re-measured, so every verdict is final, as with ``--gpuperf-reruns=0``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.baseline import codec
from pytest_gpuperf.baseline import records as br
from pytest_gpuperf.baseline.files import read_regular
from pytest_gpuperf.baseline.records import Baseline
from pytest_gpuperf.baseline.store import load_file
from pytest_gpuperf.errors import GpuPerfError
from pytest_gpuperf.model import Result, Run
from pytest_gpuperf.reporting import json_report
from pytest_gpuperf.reporting.history import BenchHistory

if TYPE_CHECKING:
    from pytest_gpuperf.measure.backend import Modes
    from pytest_gpuperf.verdict import DecisionPolicy, VerdictSettings
    from pytest_gpuperf.verdict.judge import Judge


class RunFileError(GpuPerfError):
    """A file given as a run file or baseline that cannot be read; the message says why."""

    __module__ = "pytest_gpuperf"


@dataclass
class RunSet:
    """One side of a comparison: its runs as a baseline, and a run file's own results by
    benchmark key, with what a baseline does not store (artifacts, test locations)."""

    label: str
    baseline: Baseline
    results: dict[str, Result] = field(default_factory=dict)


def read_file(path: Path) -> RunSet:
    """A baseline file or a ``--gpuperf-json`` run file, told apart by its ``schema``."""
    try:
        data = read_regular(path)
    except FileNotFoundError:
        raise RunFileError(
            f"{path}: no such file. Give a baseline name (see pytest-gpuperf list) or the "
            "path of a file written by --gpuperf-json or --gpuperf-save."
        ) from None
    except OSError as e:
        raise RunFileError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        doc = json.loads(data.decode("utf-8"))
        codec.check_nesting(doc, limit=codec.MAX_NESTING + 8, finite=False)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RunFileError(
            f"{path} is not a JSON file ({e}); give a file written by --gpuperf-json or a "
            "baseline file"
        ) from None
    except (RecursionError, codec.SchemaProblem):
        raise RunFileError(
            f"{path} cannot be used: its JSON is nested more than {codec.MAX_NESTING} levels "
            "deep, which no file written by pytest-gpuperf is; give a file written by "
            "--gpuperf-json or a baseline file"
        ) from None
    kind = doc.get("schema") if isinstance(doc, dict) else None
    if kind == codec.SCHEMA:
        return RunSet(path.stem, load_file(path))
    if kind == json_report.SCHEMA:
        try:
            results = json_report.load_results(doc)
        except (ValueError, KeyError, TypeError) as e:
            raise RunFileError(
                f"{path} cannot be used as a run file: {e}. Write it again with --gpuperf-json."
            ) from None
        extra = (doc.get("session") or {}).get("fingerprint_extra") or None
        # the results as a one-run-per-benchmark baseline (those a save leaves out, too)
        runs = [r.run for r in results]
        baseline = Baseline.from_runs(
            path.name, runs, fingerprint_extra=extra, stamp=doc.get("created")
        )
        baseline.path = path
        kept = {r.id.key: r for r in results if r.id.key in baseline.benchmarks}
        return RunSet(path.name, baseline, kept)
    raise RunFileError(
        f"{path} is neither a pytest-gpuperf baseline nor a results file written by "
        f"--gpuperf-json (its schema is {kind!r})"
    )


def _newest(runs: list[Run]) -> tuple[Run, list[Run]]:
    """The newest run, and every run of its environment and settings (oldest first)."""
    last = runs[-1]
    same = [r for r in runs if (r.fingerprint_id, r.policy) == (last.fingerprint_id, last.policy)]
    return last, same


def latest(side: RunSet) -> tuple[list[Result], dict[str, BenchHistory]]:
    """Each benchmark's newest run as a result, with its history (show and export)."""
    b = side.baseline
    results: list[Result] = []
    hist: dict[str, BenchHistory] = {}
    for key, entry in b.benchmarks.items():
        if not (runs := entry.runs):  # decoded once
            continue
        last, same = _newest(runs)
        own = side.results.get(key)
        results.append(replace(own) if own else Result(last))
        said = f"{len(same)} run(s) in this environment"
        hist[key] = BenchHistory(b.name, same, runs, last.fingerprint_id, said)
    return results, hist


@dataclass
class Outcome:
    """What :func:`compare` found: the candidate's results with ``comparison`` set, the
    reference's runs for the plots, ``m`` benchmarks gated, and by key what each verdict
    does (``verdict.decide.outcome``) and what fails it beyond its time."""

    results: list[Result] = field(default_factory=list)
    histories: dict[str, BenchHistory] = field(default_factory=dict)
    m: int = 0
    outcomes: dict[str, str] = field(default_factory=dict)
    failures: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def failing(self) -> list[str]:
        """The keys of the benchmarks the gate would fail."""
        from pytest_gpuperf.verdict.decide import FAIL

        return [k for k, o in self.outcomes.items() if o == FAIL or self.failures.get(k)]


def compare(
    reference: RunSet,
    candidate: RunSet,
    policy: DecisionPolicy | None = None,
    settings: VerdictSettings | None = None,
    modes: Modes | None = None,
) -> Outcome:
    """Judge every benchmark of ``candidate`` against ``reference`` as the gate does, every
    verdict final; ``modes``: the run's timing modes (default the built-in ones)."""
    from pytest_gpuperf.reporting.explain import failure_words
    from pytest_gpuperf.verdict import DEFAULT_POLICY
    from pytest_gpuperf.verdict.judge import Judge

    ref, cand = reference.baseline, candidate.baseline
    judge = Judge(ref, policy or DEFAULT_POLICY, settings=settings, modes=modes)
    out = Outcome()
    for key, entry in cand.benchmarks.items():
        if not (runs := entry.runs):  # decoded once
            continue
        last, same = _newest(runs)
        res, verdict = _judged(judge, candidate, key, last, same)
        out.results.append(res)
        out.outcomes[key] = verdict.outcome
        if verdict.failures:
            who = f"{res.id.display} [{res.id.mode}]"
            out.failures[key] = tuple(failure_words(who, x) for x in verdict.failures)
        out.m += verdict.comparison.gated
        match, ref_entry = judge.match(res), ref.benchmarks.get(key)
        comparable = match.runs if match.status == br.MATCH else ()
        ref_runs = list(ref_entry.runs) if ref_entry else []
        out.histories[key] = BenchHistory(
            ref.name, comparable, ref_runs, last.fingerprint_id, match.reason
        )
    return out


def _judged(judge: Judge, candidate: RunSet, key: str, last: Run, same: list[Run]) -> Any:
    """One benchmark of the candidate (its newest run, and those of its environment and
    settings) as a result with its final verdict, and the verdict."""
    fp = candidate.baseline.fingerprints.get(last.fingerprint_id or "", {})
    own = candidate.results.get(key)
    # Judged under the newest run's settings (a run file's own result keeps its outputs).
    res = Result(last) if own is None else replace(own, run=replace(own.run, policy=last.policy))
    c = judge.decide(res, same, last=True, fp=fp)
    verdict = judge.conclude(res, c, [r.numerics for r in same])
    res.comparison = verdict.comparison
    res.diagnosis = None  # the run file's diagnosis explained another verdict
    return res, verdict

"""The words of a ``--gpuperf-bisect`` search: a line per step, the answer per benchmark,
the GitHub step summary's line."""

from __future__ import annotations

from dataclasses import replace

from pytest_gpuperf.outcome import Comparison
from pytest_gpuperf.reporting.explain import summary_line
from pytest_gpuperf.reporting.markdown import escape
from pytest_gpuperf.units import fmt_change
from pytest_gpuperf.verdict import bisection as b

#: the benchmarks left out of the search, and why
LEFT_OUT = {
    b.NOT_SLOWER_AT_BAD: "not slower at BAD than at GOOD",
    b.UNDECIDED_AT_BAD: "undecided at BAD",
    b.NOT_MEASURED: "skipped at BAD (not measured there)",
}


def commit_text(c: b.Commit, total: int) -> str:
    """``5e4f3a2b1c "make it slower" (commit 7 of 12)``."""
    subject = c.subject if len(c.subject) <= 60 else c.subject[:59] + "…"
    return f'{c.short} "{subject}" ({f"commit {c.index} of {total}" if c.index else "GOOD"})'


def _change(c: Comparison | None) -> str:
    """`` 3.00x (2.98x to 3.02x)``: the change and its interval."""
    f = None if c is None else c.shown
    if f is None:
        return ""
    return f" {fmt_change(f.ratio)} ({fmt_change(f.ratio_low)} to {fmt_change(f.ratio_high)})"


def _verdict(c: Comparison | None, a: b.Answer) -> str:
    """A verdict in the words of every output, without the benchmark's name (said before)."""
    return summary_line(replace(c, name=None), a.key.rsplit("@", 1)[-1]) if c else ""


def step_line(step: b.Step, total: int) -> str:
    """The commit, what each benchmark told (with the failure that skipped it), the cost."""
    told = "; ".join(
        f"{key}: {o.replace('-', ' ')}{_change(step.verdicts.get(key))}"
        + (f" ({step.errors[key].splitlines()[0].split(';')[0]})" if key in step.errors else "")
        for key, o in step.outcomes.items()
    )
    against = f"its parent {step.against.short}" if step.against.index else "GOOD"
    again = " again" if step.purpose == "again" else ""
    return (
        f"gpuperf bisect step {step.number}: {commit_text(step.commit, total)}{again} against "
        f"{against}: {told} ({step.processes} fresh processes, {step.wall_s:.1f} s)"
    )


def summary_lines(report: b.Report) -> list[str]:
    """A line on the whole search, then the answer of each benchmark."""
    good, bad, total = report.good, report.bad, report.bad.index
    lines = [
        f"gpuperf bisect {good.ref} ({good.short})..{bad.ref} ({bad.short}): {total} commit(s) "
        f"on the first-parent line, {len(report.steps)} step(s), {report.processes} fresh "
        f"processes, {report.wall_s:.0f} s (budget {report.budget_s:.0f} s)"
    ]
    for a in report.answers:
        lines += [f"  {line}" for line in _answer(a, total)]
    return lines + ([f"  stopped early: {report.stopped}"] if report.stopped else [])


def _answer(a: b.Answer, total: int) -> list[str]:
    if a.status in LEFT_OUT:
        return [f"{a.key}: {LEFT_OUT[a.status]} ({_verdict(a.against_good, a) or a.why}): left out"]
    if a.status == b.NOT_NARROWED:
        untold = ", ".join(f"commit {i} {o}" for i, o in a.untold.items())
        return [
            f"{a.key}: slower at BAD, not narrowed to one commit: the first slower one is one of "
            f"{len(a.candidates)}: " + ", ".join(commit_text(c, total) for c in a.candidates),
            *([f"  those that could not tell: {untold}"] if untold else []),
            *([f"  {a.why}"] if a.why else []),
        ]
    assert a.commit is not None and a.parent is not None
    return [
        f"{a.key}: first slower commit {commit_text(a.commit, total)}",
        f"  against its parent {a.parent.short}: {_verdict(a.against_parent, a) or a.why}",
        f"  against GOOD: {_verdict(a.against_good, a) or '-'}",
        *([f"  diagnosis: {' '.join(a.diagnosis.paragraph.split())}"] if a.diagnosis else []),
        *([f"  evidence: {a.evidence}"] if a.evidence else []),
    ]


def github_line(report: b.Report) -> str:
    """The search in one line of Markdown, for ``$GITHUB_STEP_SUMMARY``."""
    parts = []
    for a in report.answers:
        if a.status == b.FOUND and a.commit is not None:
            vs = _change(a.against_parent).strip() or "-"
            said = f"first slower at {a.commit.short} {a.commit.subject} ({vs} against its parent)"
        elif a.status == b.NOT_NARROWED:
            said = f"slower, not narrowed to one of {len(a.candidates)} commits"
        else:
            said = LEFT_OUT[a.status]
        parts.append(f"{escape(a.key)} {escape(said)}")
    return (
        f"**gpuperf bisect** {report.good.short}..{report.bad.short}: {'; '.join(parts)}. "
        f"{len(report.steps)} steps, {report.wall_s:.0f} s."
    )

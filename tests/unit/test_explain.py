"""The text of a verdict: what a user reads when a benchmark fails, warns or passes."""

from __future__ import annotations

import re

from pytest_gpuperf.measure.names import MODE_EVENTS, MODE_GRAPH
from pytest_gpuperf.model import Run
from pytest_gpuperf.reporting.explain import explain, summary_line
from pytest_gpuperf.verdict import decide
from tests.unit.runs import make_run

T = 200e-6


def run(t: float, e2e: float | None = None) -> Run:
    return make_run(t, [t] * 30, "steady", e2e_rounds=[e2e] * 30 if e2e else ())


BASE = [run(T * x) for x in (1.002, 0.997, 1.001)]


def test_regression_message_says_which_figure_and_why_it_is_sure() -> None:
    c = decide(BASE, [run(T * 1.1), run(T * 1.102)], mode=MODE_GRAPH, name="test_mm")
    text = explain(c)
    assert text.startswith("gpuperf: test_mm is slower than its baseline: +10.")
    assert "(REGRESSION, confirmed)" in text
    assert "why        time at least 9.9 % slower (its fastest run)" in text
    assert "in every one of 2 runs" in text
    assert re.search(r"current    220\.2 µs  median of 2 runs \(220\.0 µs, 220\.4 µs\)", text)
    assert "baseline   200.2 µs  median of 3 runs" in text
    assert re.search(r"change     \+10\.\d % \(90 % CI \+\d+\.\d % to \+\d+\.\d %\)", text)
    assert "threshold  3.0 % in force: the configured minimum" in text
    assert "confirm    beyond " in text and "one run settles a regression" in text
    assert "noise class graph" in text
    assert "resolution slowdowns of" in text and "95 % of the time" in text


def test_an_end_to_end_regression_names_both_figures() -> None:
    base = [run(T, T * 2.0 * x) for x in (1.0, 1.05, 1.3)]
    c = decide(base, [run(T, T * 20)], mode=MODE_EVENTS, name="step")
    text = explain(c)
    assert "figure     end-to-end time (noise class host)" in text
    assert "also       device time: no change" in text
    assert summary_line(c).startswith("step: REGRESSION")
    assert "end-to-end time" in summary_line(c)


def test_a_suspect_and_an_inconclusive_verdict_say_what_they_would_take() -> None:
    pending = decide(BASE, [run(T * 1.1)], mode=MODE_GRAPH, name="mm")
    assert "(suspect after 1 run)" in summary_line(pending)
    assert "next       re-measure in a fresh process" in explain(pending)
    stuck = decide(BASE, [run(T * 1.1)], mode=MODE_GRAPH, name="mm", last=True)
    line = summary_line(stuck)
    assert line.startswith("mm: INCONCLUSIVE +9.")
    assert "threshold " in line and "would catch >= " in line and "not confirmed" in line
    assert "\n" not in line


def test_other_kinds_read_well() -> None:
    same = explain(decide(BASE, [run(T)], mode=MODE_GRAPH))
    assert "no change" in same and "would have been caught" in same
    fast = explain(decide(BASE, [run(T * 0.7)], mode=MODE_GRAPH))
    assert "faster than its baseline" in fast
    new = explain(decide([], [run(T)], name="new"))
    assert "no baseline" in new and "save a baseline" in new
    env = explain(decide(BASE, [run(T * 1.3)], environment_diff=["torch 2.11.0 -> 2.12.0"]))
    assert "differs    torch 2.11.0 -> 2.12.0" in env and "not gated" in env
    assert summary_line(decide([], [run(T)], name="n")) == "n: no baseline, current 200.0 µs"


def test_a_single_baseline_run_is_explained_without_inf() -> None:
    c = decide([run(T)], [run(T * 1.02)], mode=MODE_GRAPH)
    text = explain(c)
    assert "one baseline run: the prior alone" in text
    assert not re.search(r"\binf\b", text)


def test_an_inconclusive_label_names_why_when_the_runs_were_not_comparable_or_no_evidence() -> None:
    from dataclasses import replace

    from pytest_gpuperf.reporting.explain import label_of

    c = decide(BASE, [run(T * 1.1)], mode=MODE_GRAPH, last=True)
    assert c.lead is not None
    c = replace(c, lead=replace(c.lead, ratio=5.12, resolution=2.52, why=""))
    assert label_of(c) == "INCONCLUSIVE (would catch >= 3.52x)"
    traced = label_of(replace(c, lead=replace(c.lead, why="not-comparable")))
    assert "not comparable" in traced and "would catch" not in traced
    bad = label_of(replace(c, lead=replace(c.lead, why="unmeasurable")))
    assert "unmeasurable" in bad and "would catch" not in bad

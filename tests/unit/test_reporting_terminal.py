"""The terminal summary: a table that fits, every verdict once, flags once per note."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_gpuperf.reporting.terminal import (
    COLUMNS,
    FULL_COLUMNS,
    WIDTH,
    TableSpec,
    group_results,
    render,
    render_table,
    sort_results,
)
from tests.unit.reporting_data import result, rounds, session

LONG = "test_attention_forward_backward[8x16x8192x128-bfloat16-causal-flash-dropout0.1]"


def widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def table_lines(text: str) -> list[str]:
    return text.split("\n\n")[0].splitlines()


def test_default_table_fits_120_columns_with_long_names_and_verdicts() -> None:
    results = [*session(), result(LONG, kind="regression", ratio=412.0)]
    results[0].notes = ["noisy: rounds scatter 8.6 % (IQR/median); raise round_ms"]
    text = render_table(results)
    assert widest(text) <= WIDTH
    assert "…" in text  # the long name is shortened in the middle ...
    assert "-dropout0.1]" in text  # ... keeping the end of its parameters
    assert "412x REGRESSION" in text  # a huge change is a ratio, not a 7-digit percentage
    header = text.splitlines()[0].split()
    assert header[:3] == ["benchmark", "median", "95%"]


def test_verbose_shows_every_column_unshortened() -> None:
    results = [*session(), result(LONG, kind="regression", ratio=1.5)]
    text = render_table(results, TableSpec(verbose=True))
    assert LONG in text
    header = text.splitlines()[0]
    for key in FULL_COLUMNS:
        assert COLUMNS[key].header in header


def test_a_narrow_budget_drops_the_least_needed_columns_first() -> None:
    results = [result(LONG, kind="regression", ratio=1.5)]
    text = render_table(results, TableSpec(width=90))
    assert widest(text) <= 90
    header = text.splitlines()[0]
    assert "first call" not in header and "median" in header and "vs baseline" in header


def test_chosen_columns_sort_and_groups() -> None:
    results = [
        result("test_mm[a]", kind="no-change", ratio=1.0, level=3e-3, seed=1),
        result("test_mm[b]", kind="regression", ratio=1.3, level=1e-3, seed=2),
        result("test_add[c]", kind="improvement", ratio=0.8, level=2e-3, mode="cuda-graph"),
    ]
    text = render_table(results, TableSpec(columns=("median", "verdict"), sort="median"))
    lines = table_lines(text)
    assert lines[0].split() == ["benchmark", "median", "vs", "baseline"]
    assert [ln.split()[0] for ln in lines[2:]] == ["test_mm[b]", "test_add[c]", "test_mm[a]"]

    by_change = [r.id.display for r in sort_results(results, "change")]
    assert by_change == ["test_mm[b]", "test_mm[a]", "test_add[c]"]
    by_verdict = [r.id.display for r in sort_results(results, "verdict")]
    assert by_verdict == ["test_mm[b]", "test_add[c]", "test_mm[a]"]

    groups = group_results(results, ("func",))
    assert [(t, len(rs)) for t, rs in groups] == [("func=test_mm", 2), ("func=test_add", 1)]
    by_mode = render_table(results, TableSpec(group_by=("mode",)))
    assert "mode=cuda-events\n" in by_mode and "\n\nmode=cuda-graph\n" in by_mode
    by_param = group_results(results, ("param:dtype",))
    assert by_param[0][0] == "param:dtype=bfloat16"


def test_every_verdict_once_and_inconclusive_detail_in_one_block() -> None:
    text = render(session())
    verdicts = text[text.index("verdicts:") :]
    # Regressions: one line each (their detail is in the failure text, not here).
    assert verdicts.count("test_mm[8192-bf16]") == 1
    assert "p-value" not in verdicts.split("inconclusive (passed")[0]
    # The inconclusive one: not in the verdict lines, once in its block with its detail.
    assert text.count("test_ln[4k]") == 2  # its table row and its block
    block = text[text.index("inconclusive (passed") :]
    assert "test_ln[4k]: INCONCLUSIVE" in block and "why" in block
    assert "2 benchmarks: no baseline or no change" in verdicts


def test_failed_inconclusive_verdicts_have_their_detail_in_the_failure() -> None:
    text = render(session(), TableSpec(fail_on="inconclusive"))
    assert "inconclusive (passed" not in text
    verdicts = text[text.index("verdicts:") :]
    assert verdicts.count("test_ln[4k]") == 1


def test_quiet_lists_what_needs_a_look_and_counts_the_rest_on_one_line() -> None:
    text = render(session(), TableSpec(quiet=True))
    after = text[text.index("verdicts:") :].splitlines()
    # each regression, improvement and other environment on its line, as without -q
    assert sum("test_mm[8192-bf16]" in ln for ln in after) == 1
    assert sum("test_conv[64]" in ln for ln in after) == 1
    # the inconclusive one that passed, and the unremarkable ones: counted, no detail
    assert not any("test_ln[4k]" in ln or "test_add[1M]" in ln for ln in after)
    assert "  1 inconclusive (passed), 1 no change, 1 no baseline" in after
    assert "why" not in "\n".join(after) and "median: per-call time" not in text
    assert widest(text) <= WIDTH


def test_quiet_folds_the_flags_into_one_line_that_says_how_to_see_them() -> None:
    results = [result(f"test_{i}", kind="no-change", ratio=1.0, seed=i) for i in range(7)]
    for r in results[:5]:
        r.notes = ["noisy: rounds scatter 9 % (IQR/median); stop other work on the machine"]
    results[5].notes = ["warm-up hit its 500 ms budget before settling; raise warmup_ms"]
    quiet = render(results, TableSpec(quiet=True))
    after = quiet[quiet.index("verdicts:") :].splitlines()
    assert after == [
        "verdicts: 7 no change (-v shows why)",
        "flags: 5 NOISY, 1 other note; run without -q to see them and what to do",
    ]
    loud = render(results)
    assert loud.count("stop other work") == 1 and "flags:" in loud


def test_flags_each_note_once_with_its_benchmarks() -> None:
    results = [result(f"test_{i}", kind=None, seed=i) for i in range(5)]
    note = "unstable: the timings never settled; raise warmup_ms, check for other work"
    for r in results:
        r.notes = [note]
    text = render(results)
    flags = text[text.index("flags:") :]
    assert flags.count("unstable: the timings never settled") == 1
    assert "test_0, test_1, test_2 and 2 more" in flags
    assert widest(flags) <= WIDTH
    verbose = render(results, TableSpec(verbose=True))
    assert verbose[verbose.index("flags:") :].count("unstable:") == 5


def test_few_rounds_have_no_interval_instead_of_a_contradictory_one() -> None:
    """5 kept rounds: the median's 95 % interval would be their whole range (one outlier
    makes it ±250 % next to a 0.7 % spread); the table says '-' and the legend why."""
    r = result(
        "test_few", kind=None, measured={"rounds": [*rounds(1e-3, n=4, noise=0.002), 3.5e-3]}
    )
    text = render([r])
    row = next(line for line in text.splitlines() if line.startswith("test_few"))
    assert row.split()[3] == "-"
    assert "with fewer than 6 rounds" in text


def test_no_verdict_column_without_a_baseline() -> None:
    text = render_table([result("test_a", kind=None)])
    assert "vs baseline" not in text


def test_a_diagnosis_without_a_verdict_is_no_verdict() -> None:
    """--gpuperf-capture=always without a baseline: the capture's diagnosis, no verdict."""
    from pytest_gpuperf.artifacts.analysis.diagnose import Diagnosis
    from pytest_gpuperf.reporting import html

    r = result("test_a", kind=None)
    r.diagnosis = Diagnosis(r.id.key, "test_a ran 12 kernels.", [])
    text = render([r])
    assert "vs baseline" not in text and "verdicts:" not in text
    assert "test_a ran 12 kernels." in html.render([r])


@pytest.mark.parametrize("key", ["verdict", "collection", "name", "median", "throughput"])
def test_every_sort_key_keeps_every_row(key: str) -> None:
    results = session()
    assert sorted(r.id.key for r in sort_results(results, key)) == sorted(r.id.key for r in results)


def test_table_options_parse_and_name_the_fix() -> None:
    from pytest_gpuperf.values import OptionValueError, group_keys, sort_key, table_columns

    assert table_columns("median, ci,first-call") == ("median", "ci", "first_call")
    assert sort_key("Change") == "change"
    assert group_keys("func,param:dtype") == ("func", "param:dtype")
    with pytest.raises(OptionValueError, match=r"unknown column .medain. \(did you mean median"):
        table_columns("medain")
    with pytest.raises(OptionValueError, match=r"unknown sort key 'fastest'.*keys: verdict"):
        sort_key("fastest")
    with pytest.raises(OptionValueError, match=r"unknown group key 'params'.*param:NAME"):
        group_keys("params")


@pytest.mark.parametrize(
    "test", ["test_id[::error::start]", "test_id[%0A::warning::pct]", "Test::test_id[a::b-c]"]
)
def test_a_test_id_with_double_colons_is_not_cut(test: str) -> None:
    """T20: `test_id[::error::start]` showed as `start]` in the table, flags and titles."""
    r = result(test, kind="regression", ratio=2.0)
    want = test.removeprefix("Test::")  # the class goes, the parameters' ids stay whole
    assert r.id.display == want
    assert want in render([r], TableSpec(verbose=True))
    from pytest_gpuperf.model import short_test_id

    assert short_test_id(r.id.nodeid) == want


def test_fold_wraps_a_long_line_and_keeps_a_command_to_copy_whole() -> None:
    from pytest_gpuperf.reporting.terminal import fold

    prose = "  why        " + "a slowdown beyond its threshold " * 8
    assert all(len(ln) <= 120 for ln in fold(prose).splitlines())
    assert len(fold(prose).splitlines()) > 1
    cmd = (
        "  run it alone to see all of it: /venv/bin/python -m pytest t.py::x "
        + "--gpuperf-x=1 " * 12
    )
    assert fold(cmd) == cmd  # one line, to copy and paste


def test_quiet_says_why_timings_under_a_tracer_are_not_comparable() -> None:
    tracer = {"tracer": "sys.settrace (a Python tracer: coverage.py, a debugger)"}
    results = [
        result(f"test_{i}", kind="inconclusive", ratio=7.6, seed=i, measured=tracer)
        for i in range(5)
    ]
    for r in results:
        c = r.comparison
        assert c is not None and c.lead is not None
        r.comparison = replace(c, lead=replace(c.lead, why="not-comparable"))
    quiet = render(results, TableSpec(quiet=True))
    after = quiet[quiet.index("verdicts:") :]
    assert "5 inconclusive (passed)" in after
    said = " ".join(after.split())
    assert "not comparable: a tracer or profiler (sys.settrace" in said
    assert "5 verdicts are inconclusive, never a regression" in said
    assert widest(quiet) <= WIDTH
    # without a tracer on either side, no such line
    plain = render([result("test_x", kind="inconclusive", ratio=1.6)], TableSpec(quiet=True))
    assert "not comparable" not in plain

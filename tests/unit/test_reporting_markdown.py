"""The Markdown report: regressions first, escaping, details sections."""

from __future__ import annotations

import re

from pytest_gpuperf.artifacts.analysis.diagnose import Diagnosis
from pytest_gpuperf.outcome import DIFFERENT_ENVIRONMENT, GATED_KINDS, NO_BASELINE
from pytest_gpuperf.reporting import html, markdown
from pytest_gpuperf.reporting import verdicts as v
from tests.unit.reporting_data import HOSTILE, result, session


def table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]


def test_rows_are_ordered_regressions_first_largest_slowdown_first() -> None:
    kinds = [r.kind for r in v.rows(session())]
    assert kinds == [
        "regression",
        "regression",
        "inconclusive",
        "improvement",
        "different-environment",
        "no-change",
        "no-baseline",
    ]
    regressions = [r.ratio for r in v.rows(session()) if r.kind == "regression"]
    assert regressions == sorted(regressions, reverse=True)


def test_table_lists_every_benchmark_in_report_order() -> None:
    text = markdown.render(session(), baseline="main")
    rows = table_rows(text)
    assert len(rows) == 7
    assert "test\\_mm\\[8192-bf16\\]" in rows[0] and "**regression**" in rows[0]
    assert "test\\_mm\\[4096-bf16\\]" in rows[1]
    assert "inconclusive" in rows[2]
    assert "no baseline" in rows[-1]
    assert text.startswith("## gpuperf: 2 regressions, 1 inconclusive, 1 improvement")
    assert "Compared with baseline `main`." in text


def test_every_row_has_the_header_s_number_of_cells() -> None:
    results = [*session(), result(HOSTILE, kind="regression", ratio=1.1)]
    lines = [ln for ln in markdown.render(results).splitlines() if ln.startswith("|")]
    cells = {len(re.split(r"(?<!\\)\|", ln)) for ln in lines}
    assert len(cells) == 1  # a '|' in a test id did not add a column


def test_hostile_test_id_is_escaped() -> None:
    text = markdown.render([result(HOSTILE, kind="inconclusive", ratio=1.03)])
    row = table_rows(text)[0]
    assert "<script>" not in row and "&lt;script&gt;" in row
    assert "\\|a,b" in row  # the pipe cannot end the cell
    assert "\\[link\\]" in row and "\\*bold\\*" in row and "\\`code\\`" in row
    assert "\n*bold*" not in text.split("```")[0]  # the newline did not start a new line
    summary = re.search(r"<summary>(.*)</summary>", text)
    assert summary is not None
    assert "<script>" not in summary.group(1) and "&lt;script&gt;" in summary.group(1)


def test_explanation_sits_in_a_fence_longer_than_any_backticks_inside() -> None:
    block = markdown.code_block("a ```` b")
    assert block.startswith("`````text\n") and block.endswith("\n`````")


def test_regressions_are_open_and_others_folded() -> None:
    text = markdown.render(session())
    assert "#### 🔴 test\\_mm\\[8192-bf16\\] (cuda-events): regression\n" in text
    assert "<summary>🟡 test_ln[4k] (cuda-events): inconclusive</summary>" in text
    assert text.count("#### 🔴") == 2
    assert text.count("<details>") == 3  # inconclusive, improvement, different environment
    first_regression = text.index("#### 🔴")
    assert first_regression < text.index("<details>")
    assert "REGRESSION, confirmed" in text  # the verdict's own explanation


def test_diagnosis_and_artifacts_of_a_regression() -> None:
    r = result("test_mm[4096-bf16]", kind="regression", ratio=1.08)
    r.artifacts = [
        {
            "kind": "nsys",
            "path": "gpuperf-artifacts/test_mm/trace.nsys-rep",
            "summary": ["sm90_gemm: 92 % of GPU time (+7 %)", "launch gaps: 3 %"],
        },
        {"kind": "ncu", "path": "gpuperf-artifacts/test_mm/gemm.ncu-rep", "name": "gemm kernel"},
    ]
    text = markdown.render([r])
    assert "**Where the time went**" in text
    assert "- sm90\\_gemm: 92 % of GPU time (+7 %)" in text
    assert "`trace.nsys-rep` (nsys): `gpuperf-artifacts/test_mm/trace.nsys-rep`" in text
    assert "`gemm kernel` (ncu)" in text


def test_results_without_verdict_and_empty_session() -> None:
    text = markdown.render([result(kind=None)])
    assert "not compared" in table_rows(text)[0]
    assert "No benchmark ran." in markdown.render([])


def test_every_kind_has_its_look_and_one_this_version_does_not_know_is_plain() -> None:
    assert set(v.KINDS) == {*GATED_KINDS, NO_BASELINE, DIFFERENT_ENVIRONMENT, v.NOT_COMPARED}
    rs = [
        result("testnew", kind="faster-than-light"),
        result("testnew", kind="faster-than-light"),
    ]
    md = markdown.render(rs)
    assert table_rows(md)[0].startswith("|  | testnew |")  # no icon
    assert "2 faster-than-light" in md  # the kind's own name, never a KeyError
    page = html.render(rs)  # grey badges (the table's, the sections'), grey section edges
    assert page.count("background:#6b6b6b") == 4 and page.count("left-color:#6b6b6b") == 2


def test_capture_entries_and_the_verdict_s_diagnosis() -> None:
    r = result("test_mm[4096-bf16]", kind="regression", ratio=1.08)
    r.diagnosis = Diagnosis(
        r.id.key,
        paragraph="The slowdown is in one kernel: sm90_gemm takes 7 % longer.",
        causes=["kernel"],
        details=["sm90_gemm  512.0 µs -> 548.2 µs"],
    )
    r.artifacts = [
        {"collector": "nsys", "status": "ok", "reason": None, "files": ["a/nsys/t.nsys-rep"]},
        {"collector": "ncu", "status": "skipped", "reason": "ncu not installed", "files": []},
        {"collector": "torch-profiler", "status": "ok", "files": ["a/tp/t.json", "a/tp/t.txt"]},
    ]
    arts = v.artifacts(r)
    assert [(a.name, a.kind, a.note) for a in arts] == [
        ("t.nsys-rep", "nsys", None),
        ("ncu", "ncu", "skipped: ncu not installed"),
        ("t.json", "torch-profiler", None),
        ("t.txt", "torch-profiler", None),
    ]
    assert v.diagnosis(r) == [
        "The slowdown is in one kernel: sm90_gemm takes 7 % longer.",
        "sm90_gemm  512.0 µs -> 548.2 µs",
    ]
    text = markdown.render([r])
    assert "- The slowdown is in one kernel" in text
    assert "`ncu` (ncu) — skipped: ncu not installed" in text

"""write_ci_outputs: the files, the step summary and the annotations of a session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_gpuperf.reporting.ci import write_ci_outputs
from pytest_gpuperf.reporting.outputs import artifact_href
from pytest_gpuperf.reporting.settings import ReportSettings
from tests.unit.reporting_data import save_history, session


def settings(**kw: Any) -> ReportSettings:
    return ReportSettings(**kw)


def test_markdown_and_html_files(tmp_path: Path) -> None:
    results = session()
    base = save_history(tmp_path / "b", results)
    out = write_ci_outputs(
        settings(markdown="out/report.md", html="out/report.html"),
        results,
        baseline=base,
        env={},
        rootdir=tmp_path,
        cwd=tmp_path,
    )
    assert out.errors == [] and out.annotations == []
    assert out.messages == [
        f"Markdown report written to {tmp_path / 'out/report.md'}",
        f"HTML report written to {tmp_path / 'out/report.html'}",
    ]
    assert "Compared with baseline `main`" in (tmp_path / "out/report.md").read_text()
    page = (tmp_path / "out/report.html").read_text()
    assert "history of test_mm[4096-bf16]" in page and "baseline (6)" in page


def test_github_actions_step_summary_and_annotations(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_WORKSPACE": str(tmp_path),
    }
    out = write_ci_outputs(settings(), session(), env=env, rootdir=tmp_path / "pkg")
    text = summary.read_text()
    assert text.startswith("earlier step\n## gpuperf: 2 regressions")  # appended, not replaced
    assert [a.split(" ", 1)[0] for a in out.annotations] == ["::error"] * 2 + ["::warning"]
    assert "file=pkg/tests/test_ops.py,line=12" in out.annotations[0]
    assert "step summary added to $GITHUB_STEP_SUMMARY" in out.messages


def test_github_outputs_off_and_outside_actions(tmp_path: Path) -> None:
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp_path / "s.md")}
    assert write_ci_outputs(settings(github="off"), session(), env=env).annotations == []
    assert not (tmp_path / "s.md").exists()
    assert write_ci_outputs(settings(), session(), env={}).annotations == []
    forced = write_ci_outputs(settings(github="on"), session(), env={})
    assert len(forced.annotations) == 3  # no summary file to write, annotations still printed


def test_unwritable_reports_are_errors_not_exceptions(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp_path / "file" / "s.md")}
    out = write_ci_outputs(
        settings(markdown=str(tmp_path / "file" / "r.md")), session(), env=env, cwd=tmp_path
    )
    assert len(out.errors) == 2
    assert "cannot write the Markdown report to" in out.errors[0]
    assert "cannot append to $GITHUB_STEP_SUMMARY" in out.errors[1]


def test_no_results_no_outputs(tmp_path: Path) -> None:
    out = write_ci_outputs(settings(markdown="r.md"), [], env={}, cwd=tmp_path)
    assert out.messages == [] and not (tmp_path / "r.md").exists()


def test_artifact_links_relative_to_the_report(tmp_path: Path) -> None:
    href = artifact_href(tmp_path / "reports" / "r.html", tmp_path)
    assert href("gpuperf-artifacts/t 1/trace.nsys-rep") == (
        "../gpuperf-artifacts/t%201/trace.nsys-rep"
    )
    assert href(str(tmp_path / "reports" / "a.ncu-rep")) == "a.ncu-rep"
    assert href("") is None


def test_every_report_file_comes_from_one_registry(tmp_path: Path) -> None:
    import csv
    import io
    import json

    from pytest_gpuperf.reporting.outputs import FILE_OUTPUTS
    from pytest_gpuperf.shell.options import OPTIONS_BY_NAME

    for o in FILE_OUTPUTS:  # each is an option of its own
        assert OPTIONS_BY_NAME[o.option].metavar == "PATH"
    results = session()
    out = write_ci_outputs(
        settings(json="o/r.json", csv="o/r.csv", sort="verdict"),
        results,
        env={},
        cwd=tmp_path,
        session={"run_id": "r1"},
    )
    assert out.errors == []
    assert [m.split(" written")[0] for m in out.messages] == ["results", "CSV"]
    doc = json.loads((tmp_path / "o/r.json").read_text())
    assert doc["session"] == {"run_id": "r1"} and len(doc["results"]) == len(results)
    rows = list(csv.DictReader(io.StringIO((tmp_path / "o/r.csv").read_text())))
    assert [r["verdict"] for r in rows][:2] == ["regression", "regression"]  # --gpuperf-sort
    new = next(r for r in rows if r["verdict"] == "no-baseline")
    assert new["ratio"] == "" and float(new["median_s"]) > 0  # unknown is empty, not "None"
    assert rows[0]["param:shape"] == "4096x4096" and rows[0]["param:dtype"] == "bfloat16"


def test_a_child_writes_its_json_only(tmp_path: Path) -> None:
    out = write_ci_outputs(
        settings(json="r.json", markdown="r.md", github="on"),
        [],
        env={},
        cwd=tmp_path,
        only=("json",),
    )
    assert (tmp_path / "r.json").exists() and not (tmp_path / "r.md").exists()
    assert out.messages == [] and out.annotations == []  # nothing measured: nothing to say


def test_a_child_is_given_no_output_option_of_its_parent() -> None:
    """The outputs registry is the one list: every option that names an output file is in
    it, and a confirmation child inherits none of its options (nor one that does not exist).
    """
    from types import SimpleNamespace

    from pytest_gpuperf.reporting.outputs import FILE_OUTPUTS, OUTPUT_OPTIONS, OUTPUTS
    from pytest_gpuperf.shell.config import Setting
    from pytest_gpuperf.shell.options import OPTIONS, OPTIONS_BY_NAME
    from pytest_gpuperf.shell.rerun import _NOT_FORWARDED, forwarded_args

    files = {o.name for o in OPTIONS if o.metavar == "PATH"}
    assert files == {o.option for o in FILE_OUTPUTS}
    assert OUTPUT_OPTIONS == {o.option for o in OUTPUTS} == files | {"github"}
    assert OUTPUT_OPTIONS <= _NOT_FORWARDED
    assert set(OPTIONS_BY_NAME) >= _NOT_FORWARDED

    values = {name: "out.file" for name in files} | {"github": "on", "rounds": 7}
    run = SimpleNamespace(
        rootpath=Path("/r"),
        inipath=None,
        invocation_args=(),
        resolved=SimpleNamespace(settings={k: Setting(v, "cli") for k, v in values.items()}),
    )
    args = forwarded_args(run)  # type: ignore[arg-type]
    assert [a for a in args if a.startswith("--gpuperf-")] == ["--gpuperf-rounds=7"]


def test_a_step_summary_never_goes_into_a_baseline(tmp_path: Path) -> None:
    """T2: $GITHUB_STEP_SUMMARY naming a baseline's index got the Markdown appended to it."""
    results = session()
    save_history(tmp_path / "b", results)
    index = tmp_path / "b" / "main.json"
    before = index.read_bytes()
    for summary, dirs in ((index, []), (tmp_path / "b" / "new.json", [tmp_path / "b"])):
        env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
        out = write_ci_outputs(settings(), results, env=env, baseline_dirs=dirs)
        assert len(out.errors) == 1 and "it is a pytest-gpuperf baseline" in out.errors[0]
        assert out.errors[0].startswith("cannot append to $GITHUB_STEP_SUMMARY: refusing")
    assert index.read_bytes() == before
    assert not (tmp_path / "b" / "new.json").exists()


def test_a_child_gets_the_ini_overrides_of_the_command_line_as_given() -> None:
    """``-o gpuperf_columns=median,verdict`` reaches a child as typed (not the ini file's
    value); overrides of what a child never inherits, and other plugins' keys, stay out."""
    from types import SimpleNamespace

    from pytest_gpuperf.shell.rerun import forwarded_args

    run = SimpleNamespace(
        rootpath=Path("/r"),
        inipath=None,
        invocation_args=(
            "-o", "gpuperf_columns=median,verdict", "--override-ini=gpuperf_group_by=func",
            "-ogpuperf_html=r.html", "-o", "other_key=1",
        ),
        resolved=SimpleNamespace(settings={}),
    )  # fmt: skip
    args = forwarded_args(run)  # type: ignore[arg-type]
    assert args[args.index("-o") :] == [
        "-o", "gpuperf_columns=median,verdict", "-o", "gpuperf_group_by=func",
    ]  # fmt: skip

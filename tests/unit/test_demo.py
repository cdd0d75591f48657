"""pytest-gpuperf demo: its folder, and how it judges each step from exit codes and the JSON.

The demo itself (about a minute of real measurements) runs in CI (.ci/run), as the README's
main job; here, the rules it applies to what pytest showed.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf import demo
from pytest_gpuperf.cli import main as cli
from pytest_gpuperf.demo import (
    BENCHMARKS,
    PLANTED_TEST,
    check_planted,
    check_save,
    check_unchanged,
    read_outcome,
)


def doc(kinds: dict[str, str], *, diagnosed: tuple[str, ...] = (), saved: str | None = None):  # type: ignore[no-untyped-def]
    results: list[dict[str, Any]] = []
    for test, kind in kinds.items():
        comparison = {"kind": kind, "ratio": 4.0 if kind == "regression" else 1.0} if kind else None
        if comparison and test in diagnosed:
            comparison["diagnosis"] = {"paragraph": "aten::div 256x per call"}
        results.append(
            {
                "id": {"nodeid": f"test_demo.py::{test}"},
                "summary": {"median": 2e-5},
                "comparison": comparison,
            }
        )
    return {"session": {"saved_to": saved}, "results": results}


ALL_SAME = dict.fromkeys(BENCHMARKS, "no-change")


def test_a_save_run_must_pass_measure_everything_and_save() -> None:
    assert check_save(read_outcome(0, doc(dict.fromkeys(BENCHMARKS, ""), saved="demo")), 1) is None
    assert "exit code 1" in str(check_save(read_outcome(1, doc({}, saved="demo")), 2))
    partial = doc({"test_matmul": ""}, saved="demo")
    assert "measured no test_layer_norm" in str(check_save(read_outcome(0, partial), 1))
    assert "did not save" in str(check_save(read_outcome(0, doc(dict.fromkeys(BENCHMARKS, ""))), 1))


def test_unchanged_code_must_pass_with_every_benchmark_compared() -> None:
    assert check_unchanged(read_outcome(0, doc(ALL_SAME))) is None
    inconclusive = {**ALL_SAME, "test_matmul": "inconclusive"}
    assert check_unchanged(read_outcome(0, doc(inconclusive))) is None  # passes, by design
    alarm = {**ALL_SAME, "test_layer_norm": "regression"}
    assert "test_layer_norm came out a regression (a false alarm)" in str(
        check_unchanged(read_outcome(1, doc(alarm)))
    )
    new = {**ALL_SAME, "test_matmul": "no-baseline"}
    assert "found no baseline" in str(check_unchanged(read_outcome(0, doc(new))))
    assert "did not pass" in str(check_unchanged(read_outcome(3, None)))


def test_the_planted_slowdown_must_fail_alone_with_a_diagnosis() -> None:
    caught = {**ALL_SAME, PLANTED_TEST: "regression"}
    assert check_planted(read_outcome(1, doc(caught, diagnosed=(PLANTED_TEST,)))) is None
    assert "without a diagnosis" in str(check_planted(read_outcome(1, doc(caught))))
    missed = {**ALL_SAME, PLANTED_TEST: "inconclusive"}
    assert "was not caught: its verdict is inconclusive" in str(
        check_planted(read_outcome(0, doc(missed)))
    )
    two = {**caught, "test_matmul": "regression"}
    assert "besides the planted one, test_matmul" in str(
        check_planted(read_outcome(1, doc(two, diagnosed=(PLANTED_TEST,))))
    )
    assert "exited 2" in str(check_planted(read_outcome(2, doc(caught, diagnosed=(PLANTED_TEST,)))))


def test_the_folder_holds_the_benchmarks_and_an_ini_of_its_own(tmp_path: Path) -> None:
    folder = demo.prepare(tmp_path / "d")
    test_file = (folder / "test_demo.py").read_text()
    for name in BENCHMARKS:
        assert f"def {name}(" in test_file
    assert (folder / "pytest.ini").read_text().startswith("[pytest]")
    cmd = demo.pytest_command(folder, "--gpuperf-save=demo")
    assert cmd[:4] == [sys.executable, "-m", "pytest", "test_demo.py"]
    assert ["-c", str(folder / "pytest.ini")] == cmd[4:6]
    assert cmd[8:10] == ["-p", demo.PLUGIN]  # loaded by name: no other plugin is autoloaded
    env = demo.child_env(plant=True)
    assert env[demo.PLANT_ENV] == demo.PLANT and "PYTEST_ADDOPTS" not in env
    assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"


def test_the_plant_is_several_fold_and_the_benchmarks_collect(tmp_path: Path) -> None:
    """The planted function does the same maths, one row at a time; pytest collects 3 tests."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location(
        "demo_benchmarks", Path(demo.__file__).with_name("benchmarks.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = torch.randn(8, 16)
    plain = module.normalize_rows(x)
    module.PLANTED = True
    torch.testing.assert_close(module.normalize_rows(x), plain)

    folder = demo.prepare(tmp_path / "d")
    done = subprocess.run(
        demo.pytest_command(folder, "--collect-only", "-q"),
        cwd=folder,
        env=demo.child_env(plant=False),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 tests collected" in done.stdout


def test_a_folder_of_an_earlier_demo_is_refused(tmp_path: Path) -> None:
    (tmp_path / ".gpuperf").mkdir()
    out = io.StringIO()
    code = cli.main(["demo", "--path", str(tmp_path)], out=out)
    assert code == cli.INPUT_ERROR


def test_fewer_than_two_runs_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["demo", "--runs", "1"])
    assert e.value.code == 2
    assert "expected 2 or more runs" in capsys.readouterr().err


def _refused(path: Path | str, capsys: pytest.CaptureFixture[str]) -> str:
    """The demo's usage error for ``path`` (rc 2, no traceback), with nothing run."""
    code = cli.main(["demo", "--path", str(path)], out=io.StringIO())
    err = capsys.readouterr().err
    assert code == cli.INPUT_ERROR, err
    assert "Traceback" not in err
    return err


def test_a_folder_with_files_of_the_users_is_refused_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """T3: the demo overwrote a project's pytest.ini, test_demo.py, ... and ran its conftest."""
    mine = {
        "pytest.ini": "[pytest]\naddopts = -x\n",
        "test_demo.py": "def test_mine(): pass\n",
        "conftest.py": "raise SystemExit('the conftest ran')\n",
        "report.html": "<p>mine</p>",
    }
    for name, text in mine.items():
        (tmp_path / name).write_text(text)
    err = _refused(tmp_path, capsys)
    assert "is not empty (4 entries" in err and "new or empty folder" in err
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == mine


def test_a_file_a_link_or_a_dangling_link_as_path_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """T12: a traceback and rc 1 before; a dangling link made its target and ran there."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert "exists and is not a folder" in _refused(afile, capsys)
    (tmp_path / "tofile").symlink_to(afile)
    assert "is a symbolic link" in _refused(tmp_path / "tofile", capsys)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert "is a symbolic link" in _refused(tmp_path / "dangling", capsys)
    assert not (tmp_path / "nowhere").exists()
    assert "cannot make the demo's folder" in _refused(afile / "sub", capsys)


def test_a_place_where_no_folder_can_be_made_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """T12: a read-only place (even root cannot make a folder in /proc)."""
    err = _refused("/proc/gpuperf-demo-here", capsys)
    assert "cannot make the demo's folder" in err and "--path" in err

"""The pytest-gpuperf CLI on baselines built with BaselineStore: output, exit codes, errors."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import re
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.cli import main as cli
from pytest_gpuperf.model import Result, Run, thawed
from pytest_gpuperf.reporting import json_report
from tests.unit.reporting_data import GPU_ENV, T0, result, rounds

TESTS = ["test_mm[4096]", "test_add[1M]", "test_softmax[8k]", "test_ln[4k]"]


def session_results(
    slow: dict[str, float] | None = None,
    seed: int = 0,
    numerics: list[dict[str, Any]] | None = None,
    **env: Any,
) -> list[Result]:
    """One session: every benchmark once; ``slow`` scales a benchmark's level."""
    out = []
    for i, test in enumerate(TESTS):
        level = 1e-3 * (i + 1) * (slow or {}).get(test, 1.0)
        # run-to-run noise of about 0.5 %, seeded: a run's level moves, its rounds follow
        run_level = level * (1 + 0.005 * ((seed * 7 + i * 3) % 5 - 2) / 2)
        measured = {
            "rounds": rounds(run_level, noise=0.003, seed=seed * 10 + i),
            "environment": {**GPU_ENV, **env},
            "numerics": numerics,
        }
        r = result(test, kind=None, level=run_level, seed=seed * 10 + i, measured=measured)
        r.with_run(run_id=f"run-{seed}")
        out.append(r)
    return out


@pytest.fixture
def bdir(tmp_path: Path) -> Path:
    store = BaselineStore(tmp_path / "baselines")
    for s in range(8):
        store.save("main", runs_of(seed=s), now=T0 + dt.timedelta(hours=s))
    for s in range(3):
        store.save(
            "pr",
            runs_of({"test_mm[4096]": 1.2}, seed=20 + s),
            now=T0 + dt.timedelta(days=1, hours=s),
        )
    for s in range(3):
        store.save("same", runs_of(seed=40 + s), now=T0 + dt.timedelta(days=2, hours=s))
    return tmp_path / "baselines"


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = cli.main(list(argv), out=out)
    return code, out.getvalue()


def runs_of(*args: Any, **kw: Any) -> list[Run]:
    """The runs of :func:`session_results`, as a save stores them."""
    return [r.run for r in session_results(*args, **kw)]


def write_run_file(path: Path, results: list[Result]) -> Path:
    path.write_text(json_report.dumps(json_report.build(results, plugin_version="0.1.0")))
    return path


# --- list, show ------------------------------------------------------------------------


def test_list_shows_baselines_and_their_runs(bdir: Path) -> None:
    code, out = run("list", "--dir", str(bdir))
    assert code == cli.OK
    lines = out.splitlines()
    assert lines[0].startswith("main  (") and "4 benchmark(s), 32 run(s), 1 environment(s)" in out
    pr = next(i for i, ln in enumerate(lines) if ln.startswith("pr  ("))
    main = next(i for i, ln in enumerate(lines) if ln.startswith("main  ("))
    assert pr > main
    assert [ln.startswith("  2025-11-") for ln in lines[main + 1 : pr]] == [True] * 8  # its runs


def test_list_of_an_empty_directory(tmp_path: Path) -> None:
    code, out = run("list", "--dir", str(tmp_path / "none"))
    assert code == cli.OK and "no baselines in" in out


def test_list_reports_a_corrupt_baseline_and_lists_the_rest(
    bdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (bdir / "broken.json").write_text('{"schema": "pytest-gpuperf/baseline", ')
    code, out = run("list", "--dir", str(bdir))
    err = capsys.readouterr().err
    assert code == cli.INPUT_ERROR
    assert "main  (" in out
    assert "broken.json cannot be used" in err and "Traceback" not in err


def test_list_points_at_a_file_whose_name_is_not_a_baseline_name(
    bdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (bdir / "main.json").rename(bdir / "old.json.json")
    code, out = run("list", "--dir", str(bdir))
    assert code == cli.OK
    err = capsys.readouterr().err
    assert "old.json" not in out
    assert "old.json.json is not a baseline: a baseline name has no .json" in err
    assert "rename old.json.json to old.json" in err


def test_show(bdir: Path) -> None:
    code, out = run("show", "main", "--dir", str(bdir))
    assert code == cli.OK
    assert "test_mm[4096]" in out and "run-to-run SD" in out
    assert "environment " in out and "gpu_name=NVIDIA H200" in out


# --- compare ---------------------------------------------------------------------------


def test_compare_finds_the_regression_and_exits_1(bdir: Path, tmp_path: Path) -> None:
    md, page, table_csv = tmp_path / "r.md", tmp_path / "r.html", tmp_path / "r.csv"
    code, out = run(
        "compare", "main", "pr", "--dir", str(bdir), "--markdown", str(md), "--html", str(page),
        "--csv", str(table_csv),
    )  # fmt: skip
    assert code == cli.GATE_FAILED, out
    assert out.splitlines()[0] == "pr compared with main: 1 regression, 3 no change"
    table = out.splitlines()[3]  # the first row of the plugin's table: the regression
    assert table.startswith("test_mm[4096]") and "REGRESSION" in table
    assert "REGRESSION" in md.read_text() and "<svg" in page.read_text()
    first = table_csv.read_text().splitlines()[1]  # regressions first, as the table
    assert first.startswith("test_mm[4096],") and ",regression," in first


def test_compare_without_change_exits_0(bdir: Path) -> None:
    code, out = run("compare", "main", "same", "--dir", str(bdir))
    assert code == cli.OK, out
    assert "4 no change" in out


def test_compare_a_run_file_keeps_its_own_details(bdir: Path, tmp_path: Path) -> None:
    results = session_results({"test_add[1M]": 1.25}, seed=60)
    results[1].artifacts = [{"kind": "nsys", "path": "a/trace.nsys-rep"}]
    path = write_run_file(tmp_path / "run.json", results)
    md = tmp_path / "r.md"
    code, out = run("compare", "main", str(path), "--dir", str(bdir), "--markdown", str(md))
    assert out.splitlines()[0].startswith("run.json compared with main:")
    # one run cannot confirm: with the default threshold it is a regression or inconclusive
    kinds = {"REGRESSION": cli.GATE_FAILED, "INCONCLUSIVE": cli.OK}
    seen = [k for k in kinds if k in out.splitlines()[3]]
    assert seen and code == kinds[seen[0]]
    assert "trace.nsys-rep" in md.read_text()  # the run file's artifacts reach the report


def test_fail_on_inconclusive(bdir: Path, tmp_path: Path) -> None:
    path = write_run_file(tmp_path / "run.json", session_results({"test_ln[4k]": 1.04}, seed=70))
    code_default, out = run("compare", "main", str(path), "--dir", str(bdir))
    code_strict, _ = run(
        "compare", "main", str(path), "--dir", str(bdir), "--fail-on", "inconclusive"
    )
    if "INCONCLUSIVE" in out:
        assert code_default == cli.OK and code_strict == cli.GATE_FAILED
    else:
        assert code_strict == code_default


def test_compare_across_environments_gates_nothing(
    bdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = session_results(seed=80, driver="575.57.08")
    path = write_run_file(tmp_path / "other.json", other)
    code, out = run("compare", "main", str(path), "--dir", str(bdir))
    assert code == cli.NOTHING_COMPARED
    assert "4 in a different environment" in out
    assert "driver 580.159.04 -> 575.57.08" in out
    assert "nothing was gated" in capsys.readouterr().err


def test_two_run_files(tmp_path: Path) -> None:
    a = write_run_file(tmp_path / "a.json", session_results(seed=1))
    b = write_run_file(tmp_path / "b.json", session_results(seed=2))
    code, out = run("compare", str(a), str(b))
    assert code in (cli.OK, cli.GATE_FAILED)
    assert "b.json compared with a.json" in out


# --- errors: one line, the file, the fix ---------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compare", "mian", "pr"], "no baseline named 'mian'"),
        (["show", "nope"], "no baseline named 'nope'"),
        (["compare", "main", "missing.json"], "missing.json: no such file"),
        (["prune", "main"], "prune needs what to remove"),
        (["prune", "main", "--before", "yesterday"], "'yesterday' is not a date"),
        (["prune", "main", "--fingerprint", "0123abcd0123"], "has no fingerprint '0123abcd0123'"),
        (["prune", "nope", "--keep-runs", "1"], "no baseline named 'nope'"),
    ],
)
def test_errors_exit_2_with_one_line(
    bdir: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run(*argv, "--dir", str(bdir))
    err = capsys.readouterr().err
    assert code == cli.INPUT_ERROR
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    if "no baseline named 'mian'" in err:
        assert "Did you mean 'main'?" in err


def test_an_empty_folder_s_error_names_the_cli_s_own_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The newcomer's #13: ``show main`` in an empty folder said to point
    --gpuperf-baseline-dir at it, which the CLI refuses; its option is --dir."""
    code, _ = run("show", "main", "--dir", str(tmp_path))
    err = capsys.readouterr().err
    assert code == cli.INPUT_ERROR and "holds no baselines yet" in err
    assert "the CLI's --dir" in err


def test_corrupt_and_foreign_files(
    bdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"schema": "pytest-gpuperf/baseline", "schema_version": 2}')
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"benchmarks": []}))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("not json")
    deep = tmp_path / "deep.json"  # a RecursionError exited 1, "a regression"
    deep.write_text(
        '{"schema": "pytest-gpuperf/results", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    )
    for path, words in (
        (corrupt, "cannot be used"),
        (foreign, "is neither a pytest-gpuperf baseline nor a results file"),
        (garbage, "is not a JSON file"),
        (deep, "nested more than 32 levels deep"),
    ):
        code, _ = run("compare", "main", str(path), "--dir", str(bdir))
        err = capsys.readouterr().err
        assert code == cli.INPUT_ERROR, path
        assert str(path) in err and words in err and "Traceback" not in err


def test_argparse_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["compare", "main"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        cli.main(["compare", "a", "b", "--threshold", "3"])
    assert e.value.code == 2
    assert "fraction" in capsys.readouterr().err


def test_export_help_names_every_format(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "Markdown, HTML, CSV or pytest-benchmark JSON" in " ".join(out.split())


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for line in ("0  success", "1  compare: a regression", "2  usage or input error", "3  compare"):
        assert line in text


# --- prune, export -----------------------------------------------------------------------


def test_prune_keep_runs_and_before(bdir: Path) -> None:
    code, out = run("prune", "main", "--keep-runs", "5", "--dir", str(bdir))
    assert code == cli.OK and "removed 12 run(s)" in out
    code, out = run("prune", "main", "--before", "2025-11-30T01:00", "--dir", str(bdir))
    assert code == cli.OK and "removed 12 run(s)" in out  # 3 of the 5 left per benchmark
    runs = BaselineStore(bdir).load("main").benchmarks
    assert all(len(e.runs) == 2 for e in runs.values())


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_an_interrupted_prune_says_so_and_leaves_the_baseline_whole(
    bdir: Path, capsys: pytest.CaptureFixture[str], sig: str
) -> None:
    """R10: Ctrl-C of `pytest-gpuperf prune` exited 130 without a word; SIGTERM (a CI
    cancellation) ended it on the spot."""
    import signal

    from pytest_gpuperf.baseline.filelock import locked

    before = sorted((p.name, p.read_bytes()) for p in bdir.rglob("*") if p.is_file())
    on_term = signal.getsignal(signal.SIGTERM)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), getattr(signal, sig)))
    try:
        with locked(bdir / ".main.json.lock", owner="another save"):  # prune waits for it
            timer.start()
            code, _ = run("prune", "main", "--keep-runs", "1", "--dir", str(bdir))
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert code == cli.INTERRUPTED
    by = "Ctrl-C" if sig == "SIGINT" else sig
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"pytest-gpuperf prune: interrupted ({by}); baseline 'main' is whole, pruned or as it "
        "was (pytest-gpuperf show main says which)"
    )
    assert sorted((p.name, p.read_bytes()) for p in bdir.rglob("*") if p.is_file()) == before
    assert signal.getsignal(signal.SIGTERM) is on_term  # as before the command


def test_prune_by_fingerprint(bdir: Path) -> None:
    fid = next(iter(BaselineStore(bdir).load("same").fingerprints))
    code, out = run("prune", "same", "--fingerprint", fid, "--dir", str(bdir))
    assert code == cli.OK and "removed 12 run(s)" in out
    assert f"environment {fid} (" in out and "the environment goes with its last run" in out


def test_prune_dry_run_changes_nothing_and_combines_selectors(bdir: Path) -> None:
    fid = next(iter(BaselineStore(bdir).load("main").fingerprints))
    before = sorted((p.name, p.read_bytes()) for p in bdir.rglob("*") if p.is_file())
    args = ["prune", "main", "--fingerprint", fid, "--keep-runs", "5", "--dir", str(bdir)]
    code, out = run(*args, "--dry-run")
    assert code == cli.OK
    assert "would remove 12 run(s); nothing was changed (--dry-run)" in out
    assert f"environment {fid} (" in out and "would remove 12 of 32 run(s) of 4 benchmark(s)" in out
    assert sorted((p.name, p.read_bytes()) for p in bdir.rglob("*") if p.is_file()) == before
    code, out = run(*args)
    assert code == cli.OK and "removed 12 of 32 run(s)" in out


def test_prune_says_who_holds_the_lock_and_waits_as_long_as_told(
    bdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_gpuperf.baseline.filelock import locked

    with locked(bdir / ".main.json.lock", owner="saving into baseline main"):
        code, _ = run(
            "prune", "main", "--keep-runs", "1", "--lock-timeout", "0.2", "--dir", str(bdir)
        )
    err = capsys.readouterr().err
    assert code == cli.INPUT_ERROR
    assert "waiting for baseline 'main': it is locked by pid" in err
    assert "saving into baseline main for 0.2 s" in err and "--lock-timeout" in err


@pytest.mark.parametrize("fmt", ["markdown", "html", "csv", "pytest-benchmark"])
def test_export_a_baseline(bdir: Path, tmp_path: Path, fmt: str) -> None:
    code, out = run("export", "main", "--format", fmt, "--dir", str(bdir))
    assert code == cli.OK
    if fmt == "pytest-benchmark":
        doc = json.loads(out)
        assert len(doc["benchmarks"]) == 4 and all("ops" in b["stats"] for b in doc["benchmarks"])
    elif fmt == "csv":
        import csv

        rows = list(csv.DictReader(io.StringIO(out)))
        assert sorted(r["benchmark"] for r in rows) == sorted(TESTS)
        assert all(float(r["median_s"]) > 0 for r in rows)
        assert {r["param:shape"] for r in rows} == {"4096x4096"}
    elif fmt == "html":
        assert out.startswith("<!DOCTYPE html>") and "history of test_mm[4096]" in out
    else:
        assert "test\\_mm\\[4096\\]" in out
    target = tmp_path / "out" / f"export.{fmt}"
    code, _ = run("export", "main", "--format", fmt, "-o", str(target), "--dir", str(bdir))
    # the same text (an HTML page says when it was generated: the second may have turned)
    stamp = re.compile(r"generated \d{4}-\d\d-\d\dT[\d:]+\+00:00")
    assert code == cli.OK and stamp.sub("", target.read_text()) == stamp.sub("", out)


def test_export_without_format_takes_the_outputs_suffix_or_markdown(
    bdir: Path, tmp_path: Path
) -> None:
    code, out = run("export", "main", "--dir", str(bdir))
    assert code == cli.OK and "test\\_mm\\[4096\\]" in out  # Markdown on stdout
    for suffix, starts in ((".html", "<!DOCTYPE html>"), (".json", "{"), (".csv", "benchmark")):
        target = tmp_path / f"export{suffix}"
        code, _ = run("export", "main", "-o", str(target), "--dir", str(bdir))
        assert code == cli.OK and target.read_text().lstrip().startswith(starts)
    doc = json.loads((tmp_path / "export.json").read_text())
    assert "benchmarks" in doc  # pytest-benchmark's JSON


def test_export_a_run_file(tmp_path: Path) -> None:
    path = write_run_file(tmp_path / "run.json", session_results(seed=3))
    code, out = run("export", str(path), "--format", "pytest-benchmark")
    assert code == cli.OK
    names = {b["fullname"] for b in json.loads(out)["benchmarks"]}
    assert "tests/test_ops.py::test_mm[4096]@cuda-events" in names


# --- output files never overwrite a baseline; links are written through ---------


def _files(folder: Path) -> list[tuple[str, bytes]]:
    return sorted((str(p), p.read_bytes()) for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "main", "--format", "markdown", "-o", "{dir}/main.json"],
        ["export", "main", "--format", "html", "-o", "{copy}"],
        ["compare", "main", "pr", "--markdown", "{dir}/pr.json"],
        ["compare", "main", "pr", "--html", "{dir}/main.runs/x.json"],
        ["compare", "main", "pr", "--html", "{copy}"],
    ],
)
def test_no_output_option_overwrites_a_baseline(
    bdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """export -o and compare --markdown/--html pointed at a baseline replaced it (defect 2)."""
    copy = tmp_path / "elsewhere" / "kept.json"  # a baseline outside the --dir folder
    copy.parent.mkdir()
    copy.write_bytes((bdir / "main.json").read_bytes())
    before = _files(tmp_path)
    args = [a.format(dir=bdir, copy=copy) for a in argv]
    code, _ = run(*args, "--dir", str(bdir))
    err = capsys.readouterr().err
    assert code == cli.INPUT_ERROR
    assert "is a pytest-gpuperf baseline" in err and "choose another path" in err, err
    assert _files(tmp_path) == before


def test_an_output_that_is_a_symlink_is_written_through(bdir: Path, tmp_path: Path) -> None:
    """export -o link.md replaced the link by a regular file (defect 12)."""
    real = tmp_path / "reports" / "real.md"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "link.md"
    link.symlink_to(real)
    code, _ = run("export", "main", "--format", "markdown", "-o", str(link), "--dir", str(bdir))
    assert code == cli.OK
    assert link.is_symlink() and "gpuperf: main" in real.read_text()


@pytest.mark.skipif(not hasattr(os, "lchown") or os.geteuid() != 0, reason="needs root (lchown)")
def test_an_output_link_of_another_user_is_not_followed(
    bdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A link planted by someone else in a shared folder must not redirect a report."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    link = tmp_path / "report.md"
    link.symlink_to(victim)
    os.lchown(link, 65534, 65534)
    code, _ = run("export", "main", "--format", "markdown", "-o", str(link), "--dir", str(bdir))
    assert code == cli.INPUT_ERROR
    assert "is a symbolic link of another user" in capsys.readouterr().err
    assert victim.read_text() == "precious" and link.is_symlink()


# --- the CLI is on the core only ------------------------------------------------------------


def test_cli_imports_neither_pytest_nor_torch(bdir: Path) -> None:
    code = (
        "import sys; from pytest_gpuperf.cli.main import main; "
        f"rc = main(['compare', 'main', 'pr', '--dir', {str(bdir)!r}]); "
        "bad = [m for m in ('pytest', '_pytest', 'torch', 'pynvml') if m in sys.modules]; "
        "print('BAD', bad); sys.exit(0 if rc == 1 and not bad else 1)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_the_cli_source_has_no_pytest_import() -> None:
    source = Path(cli.__file__).read_text()
    assert not re.search(r"^\s*(import|from)\s+_?pytest\b", source, re.MULTILINE)


def test_console_script_runs(bdir: Path) -> None:
    exe = Path(sys.executable).with_name("pytest-gpuperf")
    if not exe.exists():
        pytest.skip("pytest-gpuperf is not installed as a console script here")
    done = subprocess.run(
        [str(exe), "compare", "main", "same", "--dir", str(bdir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "4 no change" in done.stdout


# --- special output paths (T1, T7, T22) -----------------------------------------


@pytest.mark.parametrize("target", ["/dev/stdout", "-"])
def test_export_to_standard_output_works_in_a_pipe(bdir: Path, target: str) -> None:
    """T22: `export -o /dev/stdout | head` failed with "No such file or directory"."""
    code = (
        "import sys; from pytest_gpuperf.cli.main import main; "
        f"sys.exit(main(['export', 'main', '--format', 'csv', '-o', {target!r}, "
        f"'--dir', {str(bdir)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().splitlines()[0].startswith("benchmark,key,nodeid,")


def test_compare_writes_its_report_into_a_fifo(bdir: Path, tmp_path: Path) -> None:
    """T7: a FIFO as an output hung the CLI (the baseline sniff opened it for reading)."""
    fifo = tmp_path / "report.md"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    box: list[int] = []
    argv = ("compare", "main", "pr", "--markdown", str(fifo), "--dir", str(bdir))
    worker = threading.Thread(target=lambda: box.append(run(*argv)[0]), daemon=True)
    worker.start()
    worker.join(30)
    try:
        assert box, "compare --markdown <a FIFO> hung"
        text, _ = reader.communicate(timeout=30)
    finally:
        reader.kill()  # a reader left waiting on a FIFO nobody writes
    code = box[0]
    assert code == cli.GATE_FAILED
    assert b"| test_mm[4096]" in text or b"test_mm[4096]" in text
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a device node needs root")
def test_export_into_a_device_node_keeps_the_node(bdir: Path, tmp_path: Path) -> None:
    """T1: `export -o <a copy of /dev/null>` replaced the node by a regular file."""
    node = tmp_path / "null"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    code, _ = run("export", "main", "--format", "markdown", "-o", str(node), "--dir", str(bdir))
    assert code == cli.OK
    assert stat.S_ISCHR(os.lstat(node).st_mode)


# --- names (T25) ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["-n", "--x", "-main"])
def test_a_name_that_reads_as_an_option_is_refused_with_what_to_type(name: str) -> None:
    """T25: --gpuperf-save=-n made a baseline the CLI could reach only as `show -- -n`."""
    from pytest_gpuperf.baseline import check_name, is_name
    from pytest_gpuperf.errors import InvalidBaselineName

    with pytest.raises(
        InvalidBaselineName, match=rf"cannot start with '-'.*use '{name.lstrip('-')}'"
    ):
        check_name(name)
    assert not is_name(name) and is_name("a-b") and is_name("_x")


def test_show_name_dot_json_shows_the_baseline_of_that_name(
    bdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """T25: `show main.json` with baseline main said "main.json: no such file"."""
    monkeypatch.chdir(tmp_path)
    assert run("show", "main", "--dir", str(bdir)) == run("show", "main.json", "--dir", str(bdir))
    code, text = run("compare", "main.json", "pr.json", "--dir", str(bdir))
    assert code == cli.GATE_FAILED and "test_mm[4096]" in text
    (tmp_path / "main.json").write_text("{}")  # a file of that name here is what it means
    code, _ = run("show", "main.json", "--dir", str(bdir))
    assert code == cli.INPUT_ERROR


def test_compare_judges_the_newest_stored_run_with_its_fingerprint_and_policy(
    tmp_path: Path,
) -> None:
    """A stored run is judged as itself: its policy and its numerics fingerprint."""
    from pytest_gpuperf.cli import runsets

    fp = [{"path": "out", "shape": [2], "dtype": "torch.float32", "numel": 2, "nan": 0,
           "inf": 0, "samples": [1.0, -1.0],
           "stats": {"mean": 0.0, "abs_mean": 1.0, "min": -1.0, "max": 1.0, "std": 1.0}}]  # fmt: skip
    store = BaselineStore(tmp_path)
    for s in range(4):
        store.save("main", runs_of(seed=s), now=T0 + dt.timedelta(hours=s))
    store.save("pr", runs_of(seed=20, numerics=fp), now=T0 + dt.timedelta(days=1))
    main, cand = store.load("main"), store.load("pr")
    got = runsets.compare(runsets.RunSet(main.name, main), runsets.RunSet(cand.name, cand))
    assert len(got.results) == len(TESTS)
    for r in got.results:
        entry = cand.benchmarks[r.id.key]
        assert r.run == entry.runs[-1] and thawed(r.run.numerics) == fp
        assert r.comparison is not None and r.diagnosis is None

"""Named baselines end to end on the CPU backend: save, compare, fail exactly the slower test."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FAST, VIRTUAL_TIME_CONFTEST, run_with_env

BENCH = """
import os, time
import pytest

def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

@pytest.mark.parametrize("which", ["steady", "changed"])
def test_spin(gpu_bench, which):
    factor = float(os.environ.get("SLOWDOWN", "1")) if which == "changed" else 1.0
    gpu_bench(spin, 0.0004 * factor)
"""

#: BENCH on :data:`VIRTUAL_TIME_CONFTEST`'s clock, for the tests that judge a slowdown: a call
#: costs 0.4 ms (times SLOWDOWN for "changed") whatever the machine's load does to a spin.
CLOCKED = """
import os
import pytest

@pytest.mark.parametrize("which", ["steady", "changed"])
def test_spin(clock, gpu_bench, which):
    factor = float(os.environ.get("SLOWDOWN", "1")) if which == "changed" else 1.0

    def call():
        clock.ns += int(400_000 * factor)

    gpu_bench(call)
"""


#: What these tests do not look at costs a profiler pass per save and a profiled child per
#: regression: off (tests/plugin/test_artifacts_plugin.py covers both). A test's own
#: arguments come later and win.
QUIET = ["--gpuperf-capture=never", "--gpuperf-inventory=never"]
#: No confirmation runs where a test needs no verdict of regression (each is a fresh pytest
#: process; a regression is confirmed by them).
NO_RERUNS = "--gpuperf-reruns=0"


def run(pytester: pytest.Pytester, *args: str, slowdown: float = 1.0) -> pytest.RunResult:
    """A fresh pytest process (one run of the benchmarks), with SLOWDOWN in its environment."""
    env = {"SLOWDOWN": str(slowdown)}
    return run_with_env(pytester, env, "-p", "no:cacheprovider", *FAST, *QUIET, *args)


def test_save_then_compare_fails_only_the_slower_test(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)
    pytester.makepyfile(test_spin=CLOCKED)
    for _ in range(3):
        result = run(pytester, "--gpuperf-save=main")
        result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["saved 2 run(s) of 2 benchmark(s) into baseline 'main'*"])
    doc = json.loads((pytester.path / ".gpuperf" / "baselines" / "main.json").read_text())
    assert doc["schema"] == "pytest-gpuperf/baseline"
    assert all(len(b["runs"]) == 3 for b in doc["benchmarks"].values())

    # 10x: settled by one run on the CPU, so no confirmation processes
    result = run(pytester, "--gpuperf-baseline=main", "--gpuperf-json=o.json", slowdown=10.0)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_spin?changed? [[]cpu[]]*",
            "*REGRESSION*",
            "*current*",
            "*baseline*median of 3 runs*",
            "*change*CI*",
            "*threshold*in force*",
            "*confirm*",
            "*noise*",
            "*FAILED test_spin.py::test_spin?changed?*",
        ]
    )
    results = json.loads((pytester.path / "o.json").read_text())["results"]
    kinds = {r["id"]["params"]["which"]: r["comparison"]["kind"] for r in results}
    assert kinds["changed"] == "regression"
    assert kinds["steady"] != "regression"
    # Comparing does not write the baseline.
    doc2 = json.loads((pytester.path / ".gpuperf" / "baselines" / "main.json").read_text())
    assert doc2 == doc


def test_a_benchmark_without_baseline_passes_and_is_reported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_spin=BENCH)
    run(pytester, "--gpuperf-save=main", "-k", "steady").assert_outcomes(passed=1, deselected=1)
    result = run(pytester, "--gpuperf-baseline=main", NO_RERUNS)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*no baseline*"])


def test_unknown_baseline_lists_those_that_exist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_spin=BENCH)
    run(pytester, "--gpuperf-save=nightly", "-k", "steady")
    result = run(pytester, "--gpuperf-baseline=main")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*main*nightly*"])


def test_corrupt_baseline_is_a_clear_error_and_is_left_untouched(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_spin=BENCH)
    path = pytester.path / ".gpuperf" / "baselines" / "main.json"
    path.parent.mkdir(parents=True)
    for text in (
        '{"schema": "pytest-gpuperf/baseline", "schema_version": 2, "bench',
        # nested 100,000 levels, an INTERNALERROR with a RecursionError
        '{"schema": "pytest-gpuperf/baseline", "schema_version": 2, "x": '
        + "[" * 100_000
        + "]" * 100_000
        + "}",
    ):
        path.write_text(text)
        before = path.read_bytes()
        for args in (["--gpuperf-baseline=main"], ["--gpuperf-save=main"]):
            result = run(pytester, *args)
            assert result.ret == pytest.ExitCode.USAGE_ERROR
            result.stderr.fnmatch_lines([f"*{path}*cannot be used*"])
            assert "RecursionError" not in result.stderr.str() + result.stdout.str()
            assert path.read_bytes() == before


def test_a_forged_run_read_when_its_test_is_judged_fails_that_test_with_the_remedy(
    pytester: pytest.Pytester,
) -> None:
    """A run whose segment the index vouches for (its SHA-256 forged too) is read when its
    test is judged: that test fails with what is wrong and how to repair it, no traceback;
    the other test is judged as usual."""
    import hashlib

    from pytest_gpuperf.baseline import fileio

    pytester.makepyfile(test_spin=BENCH)
    run(pytester, "--gpuperf-save=main").assert_outcomes(passed=2)
    folder = pytester.path / ".gpuperf" / "baselines"
    (seg,) = (folder / "main.runs").glob("*.json")
    doc = json.loads(seg.read_text())
    key = next(k for k in doc["runs"] if "changed" in k)
    next(iter(doc["runs"][key].values()))["first_call_s"] = "fast"
    seg.write_text(fileio.dumps(doc, compact_depth=3))
    index = json.loads((folder / "main.json").read_text())
    index["segments"][seg.stem]["sha256"] = hashlib.sha256(seg.read_bytes()).hexdigest()
    (folder / "main.json").write_text(fileio.dumps(index))
    result = run(pytester, "--gpuperf-baseline=main", NO_RERUNS)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*gpuperf: no verdict: baseline file", "*FAILED test_spin.py::test_spin?changed?*"]
    )
    text = " ".join(result.stdout.str().split())  # the failure text is folded
    assert f"{seg.name} (a segment of main.json) cannot be used: runs[" in text
    assert "first_call_s: expected a time in seconds" in text and "'fast'" in text
    assert "pytest-gpuperf prune main" in text
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_save_that_cannot_happen_stops_before_measuring(pytester: pytest.Pytester) -> None:
    """The baseline folder is a file: this was found only after measuring (defect 15)."""
    pytester.makepyfile(
        test_spin="""
        import pathlib

        def test_spin(gpu_bench):
            pathlib.Path("measured").touch()
            gpu_bench(sum, range(10))
        """
    )
    (pytester.path / "not-a-folder").write_text("")
    result = run(pytester, "--gpuperf-baseline-dir=not-a-folder", "--gpuperf-save=main")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*not-a-folder is a file, not a folder*"])
    assert not (pytester.path / "measured").exists()


def test_fail_on_inconclusive(pytester: pytest.Pytester) -> None:
    """A slowdown that needs confirmation runs, with none allowed: passes by default, listed
    in the summary's inconclusive block; a failure on request. (3.5x on the CPU: well above
    its class's threshold at one run (~2.1x with one baseline run), well below the slowdown
    one run settles (~8.5x), so confirmation runs would be needed.)

    On a virtual clock, so that machine load cannot change what is measured (defect 17).
    """
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)
    pytester.makepyfile(
        test_steady="""
        import os

        def test_steady(clock, gpu_bench):
            factor = float(os.environ.get("SLOWDOWN", "1"))

            def call():
                clock.ns += int(400_000 * factor)

            gpu_bench(call)
        """
    )
    run(pytester, "--gpuperf-save=main").assert_outcomes(passed=1)
    args = ("--gpuperf-baseline=main", "--gpuperf-reruns=0")
    result = run(pytester, *args, slowdown=3.5)
    result.assert_outcomes(passed=1)
    # its detail once, in the summary's inconclusive block; not as a warning too
    result.stdout.fnmatch_lines(
        [
            "inconclusive (passed: not enough evidence for a verdict):",
            "*INCONCLUSIVE*",
            "*confirmed: its class (cpu) needs*",  # "not confirmed", folded at 120 columns
        ]
    )
    assert "GpuPerfWarning" not in result.stdout.str()
    result = run(pytester, *args, "--gpuperf-fail-on=inconclusive", slowdown=3.5)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*INCONCLUSIVE*"])


def test_under_xdist_workers_judge_and_the_controller_saves(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)
    pytester.makepyfile(test_spin=CLOCKED)
    for _ in range(2):
        run(pytester, "-n", "2", "--gpuperf-save=main").assert_outcomes(passed=2)
    doc = json.loads((pytester.path / ".gpuperf" / "baselines" / "main.json").read_text())
    assert sorted(len(b["runs"]) for b in doc["benchmarks"].values()) == [2, 2]
    result = run(pytester, "-n", "2", "--gpuperf-baseline=main", slowdown=10.0)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*REGRESSION*"])


def test_a_per_test_threshold_sets_how_large_a_slowdown_may_fail(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)  # 0.4 ms x SLOWDOWN per call, whatever the load
    pytester.makepyfile(
        test_thr="""
        import os
        import pytest

        def work(clock):
            factor = float(os.environ.get("SLOWDOWN", "1"))

            def call():
                clock.ns += int(400_000 * factor)

            return call

        def test_default(clock, gpu_bench):
            gpu_bench(work(clock))

        @pytest.mark.gpuperf(threshold=0.9)
        def test_lenient(clock, gpu_bench):
            gpu_bench(work(clock))
        """
    )
    for _ in range(3):
        run(pytester, "--gpuperf-save=main").assert_outcomes(passed=2)
    # 1.5x, no confirmation runs, a lax alpha (so that the CPU's wide noise does not set the
    # threshold): above the default 3 % (inconclusive without the confirmation runs a CPU
    # benchmark needs below 2x), within the lenient test's 90 % (no change)
    result = run(
        pytester, "--gpuperf-baseline=main", "--gpuperf-json=o.json", "--gpuperf-reruns=0",
        "--gpuperf-alpha=0.2", slowdown=1.5,
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    results = json.loads((pytester.path / "o.json").read_text())["results"]
    default = next(r for r in results if r["id"]["nodeid"].endswith("test_default"))
    assert default["comparison"]["kind"] == "inconclusive"
    lenient = next(r for r in results if r["id"]["nodeid"].endswith("test_lenient"))
    assert lenient["gate"]["threshold"] == 0.9
    assert lenient["comparison"]["kind"] != "regression"


def test_no_output_option_overwrites_a_baseline(pytester: pytest.Pytester) -> None:
    """--gpuperf-json=.gpuperf/baselines/main.json replaced 44 saved runs with a results file
    and exited 0. Now the session stops before measuring."""
    pytester.makepyfile(test_spin=BENCH)
    assert run(pytester, "--gpuperf-save=main").ret == pytest.ExitCode.OK
    folder = pytester.path / ".gpuperf" / "baselines"
    before = sorted((str(p), p.read_bytes()) for p in folder.rglob("*") if p.is_file())
    for option in ("json", "markdown", "html"):
        result = run(
            pytester, "--gpuperf-save=main", f"--gpuperf-{option}=.gpuperf/baselines/main.json"
        )
        assert result.ret == pytest.ExitCode.USAGE_ERROR, option
        result.stderr.fnmatch_lines(
            [f"*--gpuperf-{option}: refusing to write *main.json: it is a pytest-gpuperf baseline*"]
        )
    assert sorted((str(p), p.read_bytes()) for p in folder.rglob("*") if p.is_file()) == before


def test_an_unwritable_json_path_is_reported_and_the_rest_still_prints(
    pytester: pytest.Pytester,
) -> None:
    """A write error of --gpuperf-json was a traceback that hid the table, the "saved" line and
    the pass/fail line, although the baseline was saved."""
    pytester.makepyfile(test_spin=BENCH)
    pytester.makeconftest(
        """
        import errno, os

        real = os.replace

        def replace(src, dst, *args, **kwargs):  # the file system turns read-only at the end
            if str(dst).endswith("r.json"):
                raise OSError(errno.EROFS, "Read-only file system")
            return real(src, dst, *args, **kwargs)

        os.replace = replace
        """
    )
    result = run(pytester, "--gpuperf-save=ok", "--gpuperf-json=r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*= gpuperf =*",
            "*saved 2 run(s) of 2 benchmark(s) into baseline 'ok'*",
            "cannot write the * to *r.json: Read-only file system*",
            "*2 passed*",
        ]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]])
def test_results_of_tests_that_did_not_pass_are_not_saved(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    """gpu_bench(...); assert False with --gpuperf-save printed "2 failed", then "saved 2
    run(s)"."""
    pytester.makepyfile(
        test_mixed="""
        import pytest

        def test_ok(gpu_bench):
            gpu_bench(sum, range(10))

        def test_own_assertion(gpu_bench):
            gpu_bench(sum, range(10))
            assert False, "the result is wrong"

        def test_misused(gpu_bench):
            gpu_bench(sum, range(10))
            gpu_bench(sum, range(10))  # twice without a name

        def test_skipped_after_measuring(gpu_bench):
            gpu_bench(sum, range(10))
            pytest.skip("not on this machine")
        """
    )
    result = run(pytester, "--gpuperf-save=main", *xdist)
    result.assert_outcomes(passed=1, failed=2, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*saved 1 run(s) of 1 benchmark(s) into baseline 'main'*; not saved: 3 result(s) of "
            "tests that did not pass (test_misused, test_own_assertion, "
            "test_skipped_after_measuring)*"
        ]
    )
    from pytest_gpuperf.baseline.store import BaselineStore

    saved = BaselineStore(pytester.path / ".gpuperf" / "baselines").load("main").benchmarks
    assert [e.ident.nodeid for e in saved.values()] == ["test_mixed.py::test_ok"]


def test_an_interrupted_session_saves_nothing_and_says_so(pytester: pytest.Pytester) -> None:
    """Ctrl-C during the 2nd of 2 benchmarks saved the 1st as a run, unmarked and unsaid."""
    pytester.makepyfile(
        test_two="""
        import os, signal

        # Ctrl-C as at a terminal: a shell's background job starts with SIGINT ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)

        def test_first(gpu_bench):
            gpu_bench(sum, range(10))

        def test_second(gpu_bench):
            gpu_bench(lambda: os.kill(os.getpid(), signal.SIGINT))
        """
    )
    result = run(pytester, "--gpuperf-save=main")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "gpuperf: the baseline was NOT saved: the session was interrupted (1 benchmark "
            "result(s) measured); run it again to save a whole run"
        ]
    )
    assert not (pytester.path / ".gpuperf" / "baselines" / "main.json").exists()


@pytest.mark.parametrize(
    "body, rc",
    [
        ("gpu_bench(spin, 0.0002)\n    raise KeyboardInterrupt", 2),  # Ctrl-C after measuring
        ("gpu_bench(spin, 0.0002)\n    assert False", 1),  # a failed test's runs are not saved
    ],
)
def test_the_results_json_says_saved_to_only_when_the_save_happened(
    pytester: pytest.Pytester, body: str, rc: int
) -> None:
    """T15: the JSON said saved_to: NAME although the terminal said NOT saved."""
    pytester.makepyfile(
        test_one=BENCH.split("@pytest")[0] + f"def test_one(gpu_bench):\n    {body}\n"
    )
    result = run(pytester, "--gpuperf-save=s15", "--gpuperf-json=o.json")
    assert result.ret == rc
    assert json.loads((pytester.path / "o.json").read_text())["session"]["saved_to"] is None
    assert not (pytester.path / ".gpuperf" / "baselines" / "s15.json").exists()
    pytester.makepyfile(
        test_one=BENCH.split("@pytest")[0]
        + "def test_one(gpu_bench):\n    gpu_bench(spin, 0.0002)\n"
    )
    run(pytester, "--gpuperf-save=s15", "--gpuperf-json=o.json").assert_outcomes(passed=1)
    assert json.loads((pytester.path / "o.json").read_text())["session"]["saved_to"] == "s15"

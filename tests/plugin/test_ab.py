"""``--gpuperf-ab=REF`` end to end on the CPU: a small git repository, two commits, one run.

The benchmarks run on the virtual clock (tests/conftest.py), so a 3x slower commit is 3x
slower in every process whatever the machine does, and an unchanged one is exactly
unchanged. The package under test lives beside the tests (flat layout), so the base
processes import the base commit's code through PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import FAST, VIRTUAL_TIME_CONFTEST
from tests.plugin.test_baselines import QUIET

#: the package under test: COST nanoseconds of virtual time per call
PACKAGE = """
COST = {cost}


def work(clock):
    clock.ns += COST
"""

#: two benchmarks: one calls the package (changed by the second commit), one does not
BENCH = """
import mypkg


def test_pkg(clock, gpu_bench):
    gpu_bench(mypkg.work, clock)


def test_steady(clock, gpu_bench):
    def call():
        clock.ns += 300_000

    gpu_bench(call)
"""

ADDED = """

def test_added(clock, gpu_bench):
    def call():
        clock.ns += 200_000

    gpu_bench(call)
"""


def git(where: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(
        ["git", *args], cwd=where, capture_output=True, text=True, env=env, check=True
    )
    return done.stdout.strip()


def commit(where: Path, message: str) -> str:
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", message)
    return git(where, "rev-parse", "HEAD")


def make_repo(pytester: pytest.Pytester, package: str, bench: str) -> Path:
    """A git repository (nothing committed yet): the package ``mypkg`` beside ``test_bench.py``,
    on the virtual clock."""
    root = pytester.path
    git(root, "init", "-q", "-b", "main")
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)
    (root / "mypkg").mkdir()
    (root / "mypkg" / "__init__.py").write_text(package)
    pytester.makepyfile(test_bench=bench)
    return root


@pytest.fixture
def repo(pytester: pytest.Pytester) -> Path:
    """A git repository: a package and its benchmarks, committed once (the base)."""
    root = make_repo(pytester, PACKAGE.format(cost=400_000), BENCH)
    commit(root, "base")
    return root


def ab(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *FAST, *QUIET, *args)


def worktrees(root: Path) -> list[str]:
    out = git(root, "worktree", "list", "--porcelain")
    return [ln for ln in out.splitlines() if ln.startswith("worktree ")]


def test_a_3x_slower_commit_fails_its_benchmark_and_passes_the_unchanged_one(
    pytester: pytest.Pytester, repo: Path
) -> None:
    base = git(repo, "rev-parse", "HEAD")
    (repo / "mypkg" / "__init__.py").write_text(PACKAGE.format(cost=1_200_000))
    commit(repo, "3x slower")
    result = ab(pytester, "--gpuperf-ab=HEAD~1", "--gpuperf-json=o.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*test_pkg* against HEAD~1 {base}",
            "*REGRESSION*3x*",
            f"gpuperf A/B against HEAD~1 ({base[:12]})*fresh process*",
            "FAILED test_bench.py::test_pkg*",
        ]
    )
    doc = json.loads((repo / "o.json").read_text())
    kinds = {r["id"]["nodeid"]: r["comparison"]["kind"] for r in doc["results"]}
    assert kinds == {
        "test_bench.py::test_pkg": "regression",
        "test_bench.py::test_steady": "no-change",
    }
    assert doc["session"]["ab"]["sha"] == base
    # the worktree is gone again
    assert len(worktrees(repo)) == 1


def test_a_3x_slower_commit_fails_with_the_table_options(
    pytester: pytest.Pytester, repo: Path
) -> None:
    """Options whose values are tuples reach both trees' processes as the user gave them."""
    (repo / "mypkg" / "__init__.py").write_text(PACKAGE.format(cost=1_200_000))
    commit(repo, "3x slower")
    result = ab(
        pytester,
        "--gpuperf-ab=HEAD~1",
        "--gpuperf-columns=median,verdict",
        "--gpuperf-group-by=func",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*REGRESSION*3x*", "FAILED test_bench.py::test_pkg*"])
    assert "ERROR" not in result.stdout.str()


def test_a_pair_process_that_fails_is_an_error_of_the_test(
    pytester: pytest.Pytester, repo: Path
) -> None:
    """Not a silent verdict: each test the pairs could not measure fails, with the child's
    own words, and the terminal says so."""
    pytester.makeconftest(
        VIRTUAL_TIME_CONFTEST
        + "\n\ndef pytest_configure(config):\n"
        + "    if config.getoption('gpuperf_child') and not config.option.collectonly:\n"
        + "        raise pytest.UsageError('--gpuperf-made-up: this child cannot start')\n"
    )
    commit(repo, "children that cannot start")
    result = ab(pytester, "--gpuperf-ab=HEAD~1")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR: the fresh A/B (* tree) process failed (exit 4)*",
            "*--gpuperf-made-up: this child cannot start*",
        ]
    )
    result.stdout.fnmatch_lines(["gpuperf: ERROR: test_bench.py::test_pkg: the fresh A/B*"])


def test_the_base_tree_runs_its_own_code(pytester: pytest.Pytester, repo: Path) -> None:
    """An unchanged tree (REF = HEAD): the package resolves to the worktree, nothing fails."""
    result = ab(pytester, "--gpuperf-ab=HEAD", "--gpuperf-json=o.json")
    result.assert_outcomes(passed=2)
    doc = json.loads((repo / "o.json").read_text())
    assert {r["comparison"]["kind"] for r in doc["results"]} == {"no-change"}


def test_a_benchmark_on_one_side_only_is_new_or_removed(
    pytester: pytest.Pytester, repo: Path
) -> None:
    bench = repo / "test_bench.py"
    bench.write_text(bench.read_text().replace("def test_steady", "def test_renamed") + ADDED)
    commit(repo, "one renamed, one added")
    result = ab(pytester, "--gpuperf-ab=HEAD~1", "--gpuperf-json=o.json")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*new (not in HEAD~1): test_bench.py::test_renamed, test_bench.py::test_added",
            "*removed (in HEAD~1, not in the current tree): test_bench.py::test_steady",
        ]
    )
    doc = json.loads((repo / "o.json").read_text())
    kinds = {r["id"]["nodeid"]: r["comparison"]["kind"] for r in doc["results"]}
    assert kinds["test_bench.py::test_added"] == "no-baseline"
    assert kinds["test_bench.py::test_pkg"] == "no-change"
    assert doc["session"]["ab"]["removed"] == ["test_bench.py::test_steady"]


def test_an_uncollectable_base_is_a_clear_error_naming_the_file(
    pytester: pytest.Pytester, repo: Path
) -> None:
    (repo / "mypkg" / "__init__.py").write_text("def broken(:\n")
    commit(repo, "broken")
    (repo / "mypkg" / "__init__.py").write_text(PACKAGE.format(cost=400_000))
    commit(repo, "fixed")
    result = ab(pytester, "--gpuperf-ab=HEAD~1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--gpuperf-ab=HEAD~1: the base tree HEAD~1 (*) cannot be collected*",
            "*gpuperf-ab-*/base/test_bench.py:",
            "*mypkg/__init__.py*",
            "*SyntaxError*",
        ]
    )
    assert len(worktrees(repo)) == 1


def test_an_unknown_ref_is_a_usage_error(pytester: pytest.Pytester, repo: Path) -> None:
    result = ab(pytester, "--gpuperf-ab=no-such-branch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpuperf-ab=no-such-branch: git knows no commit*"])


def test_outside_a_git_repository_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(pytester.path.parent))
    pytester.makepyfile(test_x="def test_x(gpu_bench):\n    gpu_bench(lambda: None)\n")
    result = ab(pytester, "--gpuperf-ab=HEAD")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpuperf-ab=HEAD: * is not inside a git repository*"])


#: In the base tree's collecting process only: Ctrl-C (or SIG) the A/B session, then hang.
CTRL_C_FROM_BASE = """
import os, signal, time
if os.environ.get("GPUPERF_AB_CHECK"):
    os.kill(os.getppid(), getattr(signal, "{sig}"))
    time.sleep(120)
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_ctrl_c_during_the_base_collection_says_so(
    pytester: pytest.Pytester, repo: Path, sig: str
) -> None:
    """T19: Ctrl-C while the base tree was being collected exited 2 with no output at all.
    R10: SIGTERM (a CI cancellation) exited 143, silent, its worktree left registered."""
    import signal
    import sys

    conftest = repo / "conftest.py"
    original = conftest.read_text()
    conftest.write_text(original + CTRL_C_FROM_BASE.format(sig=sig))
    commit(repo, "a base whose collection is interrupted")
    conftest.write_text(original)
    commit(repo, "current")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *FAST, *QUIET,
         "--gpuperf-ab=HEAD~1"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        # SIGINT as at a terminal (a shell's background job may have it ignored)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert done.returncode == pytest.ExitCode.INTERRUPTED, done.stdout + done.stderr
    by = "Ctrl-C" if sig == "SIGINT" else sig
    assert f"interrupted ({by}) while collecting the base tree of --gpuperf-ab=HEAD~1" in (
        done.stderr
    )
    assert len(worktrees(repo)) == 1

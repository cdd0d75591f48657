"""``--gpuperf-bisect=GOOD`` end to end on the CPU: synthetic git histories built here.

Each history is a package beside its benchmarks (flat layout) and commits that each change
one thing: a benchmark's cost per call (a planted slowdown), a README (docs only), a broken
module. The benchmarks run on the virtual clock (tests/conftest.py), so a planted 3x is 3x
in every process whatever the machine does, and an unchanged commit is exactly unchanged:
what is tested is the search, the steps and what the user is told, not the machine.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FAST, run_with_env
from tests.plugin.test_ab import commit, git, make_repo, worktrees
from tests.plugin.test_baselines import QUIET

#: the package under test: each benchmark's cost per call, in ns of virtual time
PACKAGE = """
COST = {costs!r}


def work(clock, name):
    clock.ns += COST[name]
"""

BENCH = """
import mypkg


def test_a(clock, gpu_bench):
    gpu_bench(mypkg.work, clock, "a")


def test_b(clock, gpu_bench):
    gpu_bench(mypkg.work, clock, "b")
"""

A, B = "test_bench.py::test_a@cpu", "test_bench.py::test_b@cpu"

#: The CPU timer on the virtual clock judged in a quiet class (the device time's): a step
#: that finds 3x settles in one pair, not the CPU class's four (what the search does with
#: the verdicts is what these tests are about; the CPU class's own are the others').
QUIET_CLASS = """
from pytest_gpuperf.measure import backend

QUIET_CPU = backend.Mode(
    "quiet", device="cpu", selected=lambda p: True, replaces="cpu", noise_class="device",
    factory="pytest_gpuperf.measure.cpu:make_cpu_timer", record=(("clock", "virtual"),),
)


def pytest_gpuperf_timing_modes():
    return [QUIET_CPU]
"""
Change = Callable[[Path], None]


def costs(**cost: int) -> Change:
    """A commit that sets benchmarks' costs per call (ns)."""

    def change(root: Path) -> None:
        init = root / "mypkg" / "__init__.py"
        now: dict[str, int] = {}
        exec(init.read_text(), {}, scope := {})  # the costs the package has now
        now.update(scope["COST"], **cost)
        init.write_text(PACKAGE.format(costs=now))

    return change


def docs(root: Path) -> None:
    """A commit that touches the README only."""
    readme = root / "README.md"
    readme.write_text((readme.read_text() if readme.exists() else "") + "more words\n")


def broken(root: Path) -> None:
    """A commit whose package does not import."""
    init = root / "mypkg" / "__init__.py"
    init.write_text(init.read_text() + "\ndef broken(:\n")


def fixed(root: Path) -> None:
    init = root / "mypkg" / "__init__.py"
    init.write_text(init.read_text().replace("\ndef broken(:\n", ""))


def history(root: Path, n: int, changes: dict[int, Change]) -> list[str]:
    """Commits 1..n after the one there is (GOOD); commit k makes ``changes[k]``, the others
    touch a notes file. Returns their shas, oldest first."""
    shas = []
    for k in range(1, n + 1):
        change = changes.get(k)
        if change is None:
            notes = root / "notes.txt"
            notes.write_text((notes.read_text() if notes.exists() else "") + f"{k}\n")
        else:
            change(root)
        shas.append(commit(root, f"commit {k}"))
    return shas


@pytest.fixture
def repo(pytester: pytest.Pytester) -> Path:
    """A git repository: a package of two benchmarks, 400 and 300 µs per call, committed."""
    root = make_repo(pytester, PACKAGE.format(costs={"a": 400_000, "b": 300_000}), BENCH)
    # what the search writes, and what pytester's runs leave beside it
    (root / ".gitignore").write_text("o.json\n.gpuperf/\nstdout\nstderr\nrunpytest-*\n")
    commit(root, "good")
    return root


def bisect(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *FAST, *QUIET, *args)


def state(root: Path) -> dict[str, Any]:
    """What a user's checkout is: branch, HEAD, index, work tree, the worktrees git knows."""
    return {
        "branch": git(root, "symbolic-ref", "HEAD"),
        "head": git(root, "rev-parse", "HEAD"),
        "index": git(root, "ls-files", "--stage"),
        "status": git(root, "status", "--porcelain"),
        "diff": git(root, "diff"),
        "worktrees": worktrees(root),
    }


def answers(root: Path) -> dict[str, dict[str, Any]]:
    doc = json.loads((root / "o.json").read_text())
    return {a["key"]: a for a in doc["session"]["bisect"]["answers"]}


@pytest.mark.parametrize("k", [1, 12])
def test_a_3x_slowdown_planted_at_commit_k_of_12_is_found(
    pytester: pytest.Pytester, repo: Path, k: int
) -> None:
    """The ends of the history (the middle ones: the next test's commits 3 and 6), judged in
    a quiet class. The last is diagnosed against its parent, as the gate's capture diagnoses
    a regression."""
    conftest = repo / "conftest.py"
    conftest.write_text(conftest.read_text() + QUIET_CLASS)
    commit(repo, "quiet")
    a, b = (key.replace("@cpu", "@quiet") for key in (A, B))
    shas = history(repo, 12, {k: costs(a=1_200_000)})
    before = state(repo)
    capture = ["--gpuperf-capture=on-failure"] if k == 12 else []
    result = bisect(pytester, "--gpuperf-bisect=HEAD~12", "--gpuperf-json=o.json", *capture)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    got = answers(repo)
    assert got[a]["status"] == "found"
    assert got[a]["commit"]["sha"] == shas[k - 1]
    assert got[a]["parent"]["index"] == k - 1
    assert got[a]["against_parent"]["kind"] == "regression"
    assert got[a]["against_good"]["ratio"] == pytest.approx(3.0, rel=0.01)
    assert got[b]["status"] == "not-slower"
    if capture:
        assert got[a]["diagnosis"]["key"] == a
        assert (Path(got[a]["evidence"]) / "manifest.json").is_file()
        result.stdout.fnmatch_lines(["*  diagnosis: *", f"*  evidence: *bisect-{shas[-1][:10]}*"])
    steps = json.loads((repo / "o.json").read_text())["session"]["bisect"]["steps"]
    assert len(steps) <= 1 + 4 + 1  # BAD, at most ceil(log2 12) probes, the confirmation
    result.stdout.fnmatch_lines(
        [
            "gpuperf bisect step 1: * (commit 12 of 12) against GOOD: *test_a@quiet: slower 3x*",
            f'*test_a@quiet: first slower commit {shas[k - 1][:10]} "commit {k}" (commit {k} of 12)',
            "*against its parent*REGRESSION 3x*",
            "*against GOOD: REGRESSION 3x*",
            "*test_b@quiet: not slower at BAD than at GOOD*left out",
            "=* 1 slower, 1 not slower in *",
        ]
    )
    assert state(repo) == before


def test_two_benchmarks_slowed_at_different_commits_past_a_broken_and_docs_commits(
    pytester: pytest.Pytester, repo: Path
) -> None:
    """One search, shared probes: test_a 10x slower from commit 3, test_b from commit 6;
    commit 4 does not build (skipped), 5 fixes it, docs-only commits are never blamed. BAD
    is the working tree, with an uncommitted change that must survive."""
    shas = history(
        repo,
        8,
        {2: docs, 3: costs(a=4_000_000), 4: broken, 5: fixed, 6: costs(b=3_000_000), 7: docs},
    )
    (repo / "README.md").write_text("an uncommitted line\n")
    before = state(repo)
    result = bisect(pytester, "--gpuperf-bisect=HEAD~8", "--gpuperf-json=o.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    got = answers(repo)
    assert (got[A]["status"], got[A]["commit"]["sha"]) == ("found", shas[2])
    assert (got[B]["status"], got[B]["commit"]["sha"]) == ("found", shas[5])
    doc = json.loads((repo / "o.json").read_text())["session"]["bisect"]
    assert doc["bad"]["here"] is True
    probes = [s for s in doc["steps"] if s["purpose"] == "probe"]
    assert probes[1]["commit"]["index"] == 4, "the first probe is the middle, for both"
    assert probes[1]["outcomes"] == {A: "skipped", B: "skipped"}
    assert "SyntaxError" in probes[1]["errors"][A]
    assert len(probes) <= 1 + 2 * 3, "shared probes: fewer than two searches"
    result.stdout.fnmatch_lines(
        ["*step 2: * (commit 4 of 8) against GOOD: *test_a@cpu: skipped (*process failed (exit *)*"]
    )
    assert state(repo) == before
    assert (repo / "README.md").read_text() == "an uncommitted line\n"


def test_a_history_with_nothing_slower_reports_none_and_exits_0(
    pytester: pytest.Pytester, repo: Path
) -> None:
    """A/A, through a merge: the search follows first parents (the merge is one commit, its
    branch's two are not), and says so in the GitHub step summary too."""
    history(repo, 2, {2: docs})
    git(repo, "checkout", "-q", "-b", "side")
    history(repo, 2, {})
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    history(repo, 1, {})
    before = state(repo)
    summary = pytester.path.parent / "step-summary.md"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    result = run_with_env(
        pytester, env, "-p", "no:cacheprovider", *FAST, *QUIET, "--gpuperf-bisect=HEAD~4",
        "--gpuperf-json=o.json",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert {a["status"] for a in answers(repo).values()} == {"not-slower"}
    doc = json.loads((repo / "o.json").read_text())["session"]["bisect"]
    assert (doc["bad"]["index"], len(doc["steps"])) == (4, 1)  # BAD against GOOD told it all
    result.stdout.fnmatch_lines(["=* 2 not slower in *"])
    assert summary.read_text().startswith("**gpuperf bisect** ")
    assert "test\\_a@cpu not slower at BAD than at GOOD" in summary.read_text()
    assert state(repo) == before


def test_a_budget_too_small_for_a_probe_reports_the_range_not_narrowed(
    pytester: pytest.Pytester, repo: Path
) -> None:
    history(repo, 4, {3: costs(a=4_000_000)})
    result = bisect(
        pytester, "--gpuperf-bisect=HEAD~4", "--gpuperf-bisect-budget=1", "-k", "test_a",
        "--gpuperf-json=o.json",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    got = answers(repo)[A]
    assert got["status"] == "not-narrowed"
    assert [c["index"] for c in got["candidates"]] == [1, 2, 3, 4]
    result.stdout.fnmatch_lines(
        [
            "*test_a@cpu: slower at BAD, not narrowed to one commit: the first slower one is one "
            "of 4: *",
            "*the budget (1 s, --gpuperf-bisect-budget) has no room for another step",
        ]
    )
    assert len(worktrees(repo)) == 1


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--gpuperf-bisect=no-such-tag"], "*--gpuperf-bisect=no-such-tag: git knows no commit*"),
        (["--gpuperf-bisect=HEAD"], "*--gpuperf-bisect=HEAD: * is not an older commit of HEAD's*"),
        (["--gpuperf-bisect-bad=HEAD"], "*--gpuperf-bisect-bad (*) is the other end of *GOOD*"),
        (
            ["--gpuperf-bisect=HEAD~1", "--gpuperf-ab=HEAD~1"],
            "*--gpuperf-bisect (*) runs no test of this session *, and --gpuperf-ab (*) acts *",
        ),
        (
            ["--gpuperf-bisect=HEAD~1", "--gpuperf-bisect-bad=HEAD~1"],
            "*--gpuperf-bisect=HEAD~1: * is not an older commit of HEAD~1's*",
        ),
        (
            ["--gpuperf-bisect=HEAD~1", "-k", "no_such_test"],
            "*--gpuperf-bisect: no benchmark is selected (*): name their files, or drop -k / -m",
        ),
    ],
)
def test_a_bisection_that_cannot_be_done_is_a_usage_error(
    pytester: pytest.Pytester, repo: Path, args: list[str], said: str
) -> None:
    history(repo, 1, {})
    result = bisect(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([said])
    assert len(worktrees(repo)) == 1


#: At commit 2 only, in a fresh process: Ctrl-C the bisecting session, then hang.
CTRL_C_AT_COMMIT_2 = """
import os, signal, time
if os.environ.get("GPUPERF_AB_BASE") and not os.environ.get("GPUPERF_AB_CHECK"):
    os.kill(os.getppid(), signal.SIGINT)
    time.sleep(120)
"""


def test_ctrl_c_leaves_no_worktree_and_the_tree_as_it_was(
    pytester: pytest.Pytester, repo: Path
) -> None:
    import signal
    import subprocess
    import sys

    history(repo, 1, {})
    conftest = repo / "conftest.py"
    original = conftest.read_text()
    conftest.write_text(original + CTRL_C_AT_COMMIT_2)
    history(repo, 1, {})
    conftest.write_text(original)
    history(repo, 1, {})
    before = state(repo)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *FAST, *QUIET,
         "--gpuperf-bisect=HEAD~3", "--gpuperf-bisect-bad=HEAD~1"],
        cwd=repo, capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert done.returncode == pytest.ExitCode.INTERRUPTED, done.stdout + done.stderr
    assert state(repo) == before

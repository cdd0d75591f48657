"""Tests marked world_size=N on the CPU (gloo), end to end: the ranks this session starts,
and torchrun's.

Each test runs pytest in fresh processes (the ranks are spawned processes of those), with
a lock folder of its own, so that the machine's CPU lock other suites use is not held
while the ranks run.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import FAST, VIRTUAL_TIME_CONFTEST, run_with_env

pytest.importorskip("torch.distributed")

ARGS = [*FAST, "-p", "no:randomly"]

GROUP_TESTS = """
import os
import pytest
import torch
import torch.distributed as dist


@pytest.fixture
def marks():
    # set up on the ranks only: the launching process runs no fixture of a distributed test
    open(f"fixture-{os.environ.get('RANK', 'none')}-{dist.is_initialized()}", "w").close()


@pytest.mark.gpuperf(world_size=2, collective="all_reduce")
def test_all_reduce(gpu_bench, marks):
    open(f"ran-2-{dist.get_rank()}-{dist.get_backend()}", "w").close()
    gpu_bench(dist.all_reduce, torch.ones(1 << 12))


@pytest.mark.gpuperf(world_size=4, collective="all_gather")
def test_all_gather(gpu_bench):
    open(f"ran-4-{dist.get_rank()}", "w").close()
    gpu_bench(dist.all_gather_into_tensor, torch.empty(4 << 10), torch.ones(1 << 10))


@pytest.mark.gpuperf
def test_one_process(gpu_bench):
    gpu_bench(torch.add, torch.ones(64), 1.0)
"""


@pytest.fixture
def own_locks(monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester) -> Path:
    """A lock folder for this test, and a log of every hold of a device lock."""
    monkeypatch.setenv("GPUPERF_LOCK_DIR", str(pytester.path / "locks"))
    log = pytester.path / "holds.jsonl"
    monkeypatch.setenv("GPUPERF_LOCK_LOG", str(log))
    return log


def _holds(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _runs(pytester: pytest.Pytester, name: str) -> list[Path]:
    return sorted((pytester.path / ".gpuperf" / "baselines" / f"{name}.runs").glob("*.json"))


def test_each_rank_runs_the_body_and_the_slowest_ranks_time_is_saved_once(
    pytester: pytest.Pytester, own_locks: Path
) -> None:
    pytester.makepyfile(test_group=GROUP_TESTS)
    # the throughput column named: under load a wide flag column pushes it out of a default fit
    res = pytester.runpytest_subprocess(
        *ARGS, "--gpuperf-save=d", "--gpuperf-json=out.json", "--gpuperf-columns=median,throughput"
    )
    res.assert_outcomes(passed=3)
    made = sorted(
        p.name for p in pytester.path.iterdir() if p.name.startswith(("ran-", "fixture-"))
    )
    assert made == [
        "fixture-0-True", "fixture-1-True",
        "ran-2-0-gloo", "ran-2-1-gloo",
        "ran-4-0", "ran-4-1", "ran-4-2", "ran-4-3",
    ]  # fmt: skip
    doc = json.loads((pytester.path / "out.json").read_text())
    by_test = {r["id"]["nodeid"].rsplit("::", 1)[-1]: r for r in doc["results"]}
    ar, ag = by_test["test_all_reduce"], by_test["test_all_gather"]
    assert (ar["id"]["mode"], ag["id"]["mode"], by_test["test_one_process"]["id"]["mode"]) == (
        "cpu-dist", "cpu-dist", "cpu",
    )  # fmt: skip
    g = ar["extra"]["group"]
    assert (g["world_size"], g["backend"], g["collective"]) == (2, "gloo", "all_reduce")
    assert ar["bytes"] == 4 * (1 << 12)
    # every rank's own time of each kept round, and the round is the slowest rank's
    assert [len(x) for x in g["rank_rounds"]] == [len(ar["rounds"])] * 2
    for i, r in enumerate(ar["rounds"]):
        assert r == pytest.approx(max(x[i] for x in g["rank_rounds"]))
    assert sum(g["slowest_counts"]) == len(ar["rounds"])
    assert ag["extra"]["group"]["world_size"] == 4 and ag["bytes"] == 4 * (4 << 10)
    # both collectives in the report, with nccl-tests' bus bandwidth
    assert re.search(r"test_all_reduce .*algbw \S+ GB/s, busbw \S+ GB/s", res.stdout.str())
    assert len(_runs(pytester, "d")) == 1
    # the CPU's lock once for each start of the ranks (none taken by a rank), as many
    # holds of it as measurements of the one-process test
    cpu = [h for h in _holds(own_locks) if h["device"] == "cpu"]
    groups = [h for h in cpu if "world_size=" in str(h["owner"])]
    assert len(groups) == 2  # one start of 2 ranks, one of 4
    assert len({h["pid"] for h in cpu}) == 1  # all taken by the launching process
    assert all("::test_one_process" in str(h["owner"]) for h in cpu if h not in groups)


BAD_TESTS = """
import os
import time
import pytest
import torch
import torch.distributed as dist


@pytest.mark.gpuperf(world_size=2)
def test_crash(gpu_bench):
    if dist.get_rank() == 1:
        os._exit(3)
    gpu_bench(dist.all_reduce, torch.ones(16))


@pytest.mark.gpuperf(world_size=2)
def test_hang(gpu_bench):
    if dist.get_rank() == 1:
        time.sleep(600)
    gpu_bench(dist.all_reduce, torch.ones(16))


@pytest.mark.gpuperf(world_size=2)
def test_disagree(gpu_bench):
    assert dist.get_rank() == 0, "rank 1 does not agree"
    gpu_bench(dist.all_reduce, torch.ones(16))


@pytest.mark.gpuperf(world_size=2)
def test_skip_alone(gpu_bench):
    if dist.get_rank() == 1:
        pytest.skip("rank 1 has no data")
    gpu_bench(dist.all_reduce, torch.ones(16))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        not Path(f"/proc/{pid}/stat").exists() or " Z " not in Path(f"/proc/{pid}/stat").read_text()
    )


def test_a_rank_that_crashes_or_hangs_is_stopped_with_what_each_rank_did_and_nothing_saved(
    pytester: pytest.Pytester, own_locks: Path
) -> None:
    pytester.makepyfile(test_bad=BAD_TESTS)
    res = pytester.runpytest_subprocess(*ARGS, "--gpuperf-save=d", "--gpuperf-dist-timeout=10")
    res.assert_outcomes(failed=4)
    out = res.stdout.str()
    assert "rank 1 (call) skipped it: Skipped: rank 1 has no data; a rank that skips" in out
    assert "rank 1 of 2 exited with status 3 in test_crash; the other ranks were stopped, and " \
           "nothing of the test was saved." in out  # fmt: skip
    assert "test_hang did not finish on its 2 ranks within 10 s (--gpuperf-dist-timeout): every " \
           "rank was killed, and nothing of it was saved." in out  # fmt: skip
    assert re.search(r"rank 1 was in test_hang \(test_bad.py:\d+\)", out)
    assert re.search(r"rank 0 was in \S+ \(\S+:\d+\), from test_bad.py:\d+ in test_hang", out)
    # rank 1 first; rank 0, if the connection its collective waited on closed, after it
    assert re.search(r"the test failed on [12] of its 2 rank\(s\):\nrank 1 \(call\): E +"
                     r"AssertionError: rank 1 does not agree", out)  # fmt: skip
    assert not _runs(pytester, "d") and not (pytester.path / ".gpuperf" / "baselines").exists()
    # the hung ranks are gone: their pids, from the folder the failure names
    folders = re.findall(r"every rank's output: (\S+)/rank-<r>\.log", out, re.IGNORECASE)
    pids = []
    for folder in folders:
        for status in Path(folder).glob("rank-*.json"):
            pids.append(json.loads(status.read_text())["pid"])
    assert len(pids) >= 4 and not [p for p in pids if _alive(p)]


PLANTED = """
import os
import pytest
import torch
import torch.distributed as dist

PLANT = os.environ.get("PLANT", "")


@pytest.mark.gpuperf(world_size=2)
def test_step(gpu_bench, clock):
    a = torch.randn(256, 256)
    grads = torch.ones(1 << 10)
    more = 3 if PLANT == "imbalance" and dist.get_rank() == 1 else 1

    def step():
        for _ in range(12 * more):  # the compute before the collective, really done
            a @ a
        clock.ns += 2_000_000 * more  # and what it costs, whatever the machine's load
        dist.all_reduce(grads)

    gpu_bench(step)


@pytest.mark.gpuperf(world_size=2)
def test_buckets(gpu_bench, clock):
    grads = torch.ones(1 << 14)
    n = 16 if PLANT == "buckets" else 1

    def step():
        for bucket in grads.chunk(n):
            dist.all_reduce(bucket)
            clock.ns += 200_000  # what a small all-reduce costs: its latency
        clock.ns += 100_000

    gpu_bench(step)
"""
#: the ranks' clock moves only when the benchmarked function says (tests/conftest.py's
#: virtual time, for the timers of a process group): a planted 3x imbalance is 3x whatever
#: else runs on the machine, and so are 16x more all-reduces; the profile the diagnosis
#: reads is of the real work
GROUP_CLOCK = VIRTUAL_TIME_CONFTEST.replace(
    '    cpu = importlib.import_module("pytest_gpuperf.measure.cpu")  # what make_timer imports\n'
    '    monkeypatch.setattr(cpu, "time", virtual)\n',
    '    group = importlib.import_module("pytest_gpuperf.measure.distributed")\n'
    '    monkeypatch.setattr(group, "time", virtual)\n',
)
PLANT_ARGS = ["--gpuperf-rounds=10", "--gpuperf-warmup-ms=150", "--gpuperf-min-warmup-ms=50",
              "-p", "no:randomly", "--gpuperf-capture-skip=nsys,ncu,torch_trace"]  # fmt: skip


def _first_line(out: str, test: str) -> str:
    """The failure's opening line, with the lines it was wrapped onto (120 columns)."""
    m = re.search(rf"_+ {test} _+\n(.+(?:\n    \S.*)*)", out)
    assert m, out
    return re.sub(r"\n    ", " ", m.group(1))


@pytest.mark.parametrize(
    ("plant", "test", "named"),
    [
        ("imbalance", "test_step", r"rank imbalance: rank 1 made the others wait \S+ \S+ per call "
                                   r"\(its compute before the collectives: "),
        ("buckets", "test_buckets", r"more, smaller collectives: all_reduce 1 -> 16 per call, "
                                    r"64 KiB -> 4 KiB each"),
    ],
)  # fmt: skip
def test_a_planted_regression_fails_with_its_cause_in_the_first_sentence(
    pytester: pytest.Pytester, own_locks: Path, plant: str, test: str, named: str
) -> None:
    pytester.makepyfile(test_planted=PLANTED)
    pytester.makeconftest(GROUP_CLOCK)
    assert GROUP_CLOCK != VIRTUAL_TIME_CONFTEST
    pytester.runpytest_subprocess(*PLANT_ARGS, "--gpuperf-save=d", "-k", test).assert_outcomes(
        passed=1
    )
    res = run_with_env(pytester, {"PLANT": plant}, *PLANT_ARGS, "--gpuperf-baseline=d", "-k", test)
    res.assert_outcomes(failed=1)
    out = res.stdout.str()
    first = _first_line(out, test).split(". ", 1)[0]
    change = r"(\+\S+ %|\S+x) [a-z -]*time"
    lead = r"; likely cause(, \d+ % of [^:]+)?: "
    assert re.match(rf"{test} is slower than its baseline: {change} \(.+\){lead}{named}", first), (
        first
    )
    # the capture re-ran the whole group: a profiler trace from each rank
    traces = sorted(p.name for p in (pytester.path / ".gpuperf").rglob("*.trace.json"))
    assert [t.rsplit(".", 3)[1] for t in traces] == ["rank0", "rank1"], traces


TORCHRUN_EXTRA = """
import os
import pytest
import torch
import torch.distributed as dist


@pytest.mark.gpuperf(world_size=2)
def test_planted(gpu_bench, clock):
    x = torch.ones(64)
    slow = 16 if os.environ.get("PLANT") else 1

    def step():
        clock.ns += 500_000 * slow
        dist.all_reduce(x)

    gpu_bench(step)


@pytest.mark.gpuperf(world_size=4)
def test_needs_four(gpu_bench):
    gpu_bench(dist.all_reduce, torch.ones(8))


@pytest.mark.gpuperf
def test_rank_zero_alone(gpu_bench):
    gpu_bench(torch.add, torch.ones(64), 1.0)


def test_not_a_benchmark():
    pass
"""
#: each rank's exit status, as pytest returns it (after the plugin made the ranks agree)
STATUS_CONFTEST = """
import os

SESSION = []


def pytest_sessionstart(session):
    SESSION.append(session)


def pytest_unconfigure(config):
    with open(f"status-{os.environ['RANK']}", "w") as f:
        f.write(str(int(SESSION[0].exitstatus)))
"""


def _torchrun(
    pytester: pytest.Pytester, *args: str, env: dict[str, str] | None = None
) -> tuple[pytest.RunResult, list[int]]:
    for p in pytester.path.glob("status-*"):
        p.unlink()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "--tee=3", "-m", "pytest", "-rfs", *args]  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        for k, v in (env or {}).items():
            mp.setenv(k, v)
        res = pytester.run(*cmd, timeout=600)
    statuses = [int((pytester.path / f"status-{r}").read_text()) for r in range(2)]
    return res, statuses


def test_torchrun_runs_the_examples_saves_once_and_every_rank_exits_alike(
    pytester: pytest.Pytester, own_locks: Path
) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples" / "test_distributed.py"
    pytester.makepyfile(test_distributed=examples.read_text(), test_extra=TORCHRUN_EXTRA)
    pytester.makeconftest(STATUS_CONFTEST + GROUP_CLOCK)
    fast = [*PLANT_ARGS, "--gpuperf-rounds=5", "--gpuperf-capture=never"]
    some = ["-k", "all_reduce and 1MiB or ddp or test_extra"]  # the examples' quickest
    res, statuses = _torchrun(pytester, *fast, *some, "--gpuperf-save=d")
    out = res.stdout.str()
    assert statuses == [0, 0], out
    assert len(_runs(pytester, "d")) == 1
    assert "[default1]:gpuperf: rank 1 of 2: benchmarks without world_size= ran on rank 0" in out
    assert re.search(
        r"\[default1\]:SKIPPED \[1\] test_extra.py:\d+: a benchmark without world_size= runs "
        r"on rank 0 alone \(rank 1 of 2",
        out,
    ), out
    assert not re.search(r"\[default0\]:SKIPPED \[1\] test_extra.py:\d+: a benchmark without", out)
    for r in (0, 1):
        assert re.search(rf"\[default{r}\]:SKIPPED \[1\] test_extra.py:\d+: it asks for "
                         r"world_size=4, and this process group has 2 rank\(s\)", out)  # fmt: skip
    doc = json.loads(next(iter(_runs(pytester, "d"))).read_text())
    keys = set(doc["runs"])
    assert any(k.endswith("test_ddp_step@cpu-dist") for k in keys)
    assert any(k.endswith("test_rank_zero_alone@cpu") for k in keys)
    assert not any("test_needs_four" in k for k in keys)

    res, statuses = _torchrun(pytester, *fast, *some, "--gpuperf-baseline=d")
    assert statuses[0] == statuses[1], res.stdout.str()
    assert len(_runs(pytester, "d")) == 1

    # a regression: every rank fails the same test, with rank 0's verdict, and exits alike
    res, statuses = _torchrun(
        pytester, *fast, "--gpuperf-baseline=d", "-k", "planted", env={"PLANT": "1"}
    )
    out = res.stdout.str()
    assert statuses == [1, 1], out
    failed = {r: re.findall(rf"\[default{r}\]:FAILED (\S+) - (.{{20}})", out) for r in (0, 1)}
    assert failed[0] == failed[1] and [f[0] for f in failed[0]] == ["test_extra.py::test_planted"]
    assert len(_runs(pytester, "d")) == 1


def test_rank_variables_left_over_from_a_launcher_do_not_turn_the_gate_off(
    pytester: pytest.Pytester, own_locks: Path
) -> None:
    """R6: RANK=1 WORLD_SIZE=2 leaked into a session made it a rank 1 with no group: every
    benchmark skipped ("runs on rank 0 alone"), nothing saved, exit status 0. Without
    MASTER_ADDR it is refused at the start; with a group that never answers, it fails."""
    import socket

    pytester.makepyfile(test_one=TORCHRUN_EXTRA)
    leaked = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}
    res = run_with_env(pytester, leaked, *ARGS, "-k", "rank_zero", "--gpuperf-save=x")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*MASTER_ADDR is not set, but RANK and WORLD_SIZE are*unset RANK*"])
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    leaked |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    args = ["-k", "rank_zero", "--gpuperf-save=x", "--gpuperf-dist-timeout=3"]
    res = run_with_env(pytester, leaked, *ARGS, *args)
    assert res.ret == pytest.ExitCode.TESTS_FAILED, res.stdout.str()
    res.stdout.fnmatch_lines(
        ["gpuperf: rank 1 of 2: the ranks could not agree on the exit status (*), so this "
         "session fails: its benchmarks ran on rank 0 alone. If this process is no rank of a "
         "group, unset RANK and WORLD_SIZE*"]
    )  # fmt: skip
    assert not _runs(pytester, "x")


def test_under_torchrun_a_hanging_rank_is_named_by_the_one_that_waited(
    pytester: pytest.Pytester, own_locks: Path
) -> None:
    """R12: under torchrun, a rank that hung left rank 0 with a raw gloo traceback ("Timed
    out waiting 20000ms for recv") and "the ranks could not agree on the exit status";
    the plugin-launched path names each rank's place."""
    pytester.makepyfile(test_bad=BAD_TESTS)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "--tee=3", "-m", "pytest", "-p", "no:cacheprovider", *FAST, "-k", "test_hang",
           "--gpuperf-dist-timeout=5"]  # fmt: skip
    res = pytester.run(*cmd, timeout=300)
    out = res.stdout.str()
    assert res.ret != 0
    failure = out.split(" test_hang ___")[1].split("short test summary")[0]
    assert re.search(
        r"rank 0 of 2: a collective of test_hang waited 5 s \(--gpuperf-dist-timeout\) for the "
        r"other ranks, and timed out:\n\[default0\]:  rank 1 was in test_hang for [\d.]+ s\n",
        failure,
    ), failure
    assert "Traceback" not in failure and "distributed_c10d.py" not in failure, failure
    assert "[default0]:gpuperf: rank 0 of 2: the ranks could not agree" not in out  # no 2nd wait


BESIDE_XDIST = """
import pytest
import torch
import torch.distributed as dist


@pytest.mark.gpuperf(world_size=2)
def test_group(gpu_bench):
    gpu_bench(dist.all_reduce, torch.ones(1 << 12))


@pytest.mark.gpuperf
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_alone(gpu_bench, n):
    gpu_bench(torch.add, torch.ones(64 * n), 1.0)
"""


def test_beside_xdist_workers_a_group_never_measures_while_they_do(
    pytester: pytest.Pytester, own_locks: Path
) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_beside=BESIDE_XDIST)
    res = pytester.runpytest_subprocess(*ARGS, "-n", "2", "--gpuperf-json=out.json")
    res.assert_outcomes(passed=5)
    holds = sorted(
        (h for h in _holds(own_locks) if h["device"] == "cpu"), key=lambda h: float(h["taken"])
    )
    assert any("world_size=2" in str(h["owner"]) for h in holds)
    assert len({h["pid"] for h in holds}) == 2  # both workers measured
    for a, b in itertools.pairwise(holds):
        assert float(a["released"]) <= float(b["taken"]), (a, b)  # one holder at a time
    modes = sorted(
        r["id"]["mode"] for r in json.loads((pytester.path / "out.json").read_text())["results"]
    )
    assert modes == ["cpu", "cpu", "cpu", "cpu", "cpu-dist"]

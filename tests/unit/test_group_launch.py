"""The launching side of world_size= tests, piece by piece: what the ranks report, where a
stopped rank was, which tests one start runs, which devices and locks a group takes; the
measurement loop and the group timer, in step."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.measure import engine
from pytest_gpuperf.measure.backend import Invocation
from pytest_gpuperf.measure.distributed import GroupTimer
from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.model import BenchId, Result, Run
from pytest_gpuperf.shell import group as g
from pytest_gpuperf.shell import locks

FAULTHANDLER = """\
Thread 0x00007f0a1b2c3700 (most recent call first):
  File "/usr/lib/python3.12/threading.py", line 331 in wait
  File "/usr/lib/python3.12/threading.py", line 629 in wait

Current thread 0x00007f0a2c4d5740 (most recent call first):
  File "/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", line 2950 in all_reduce
  File "/venv/lib/python3.12/site-packages/torch/distributed/c10d_logger.py", line 81 in wrapper
  File "/home/u/proj/tests/test_step.py", line 31 in step
  File "/venv/lib/python3.12/site-packages/pytest_gpuperf/measure/distributed.py", line 240 in _cpu_round
  File "/venv/lib/python3.12/site-packages/_pytest/python.py", line 157 in pytest_pyfunc_call
"""


def test_where_a_rank_was_names_the_call_and_the_tests_own_line() -> None:
    assert g.where_it_was(FAULTHANDLER) == (
        "in all_reduce (distributed_c10d.py:2950), from test_step.py:31 in step"
    )
    own = 'Current thread 0x1 (most recent call first):\n  File "/p/test_x.py", line 9 in test_x\n'
    assert g.where_it_was(own) == "in test_x (test_x.py:9)"
    assert g.where_it_was("no stack here") is None


def _status(folder: Path, rank: int, outcomes: dict[str, dict[str, Any]]) -> None:
    g.write_json_atomic(g.status_path(folder, rank), {"rank": rank, "pid": 1, "outcomes": outcomes})


def test_a_tests_outcome_is_the_worst_of_its_ranks_each_failing_rank_named(tmp_path: Path) -> None:
    ok = {"outcome": "passed", "done": True}
    bad = {
        "outcome": "failed",
        "when": "call",
        "text": "E  AssertionError: off by one",
        "done": True,
    }
    peer = {"outcome": "failed", "when": "call", "done": True,
            "text": "E  RuntimeError: Connection closed by peer [127.0.0.1]:4242"}  # fmt: skip
    _status(tmp_path, 0, {"a": ok, "b": peer, "c": {"outcome": "skipped", "text": "no GPU"}})
    _status(tmp_path, 1, {"a": ok, "b": bad, "c": {"outcome": "skipped", "text": "no GPU"}})
    statuses = [g.RankStatus.read(tmp_path, r) for r in (0, 1)]
    results = [Result(Run(id=BenchId("a"), device="cpu", rounds=(1.0,), calls_per_round=1))]
    assert g.outcome_of("a", statuses, results).kind == "passed"
    assert g.outcome_of("a", statuses, results).results == results
    failed = g.outcome_of("b", statuses, [])
    assert failed.kind == "failed"
    # the rank that failed first is listed first; the one whose peer left, after it
    assert failed.text.splitlines()[:3] == [
        "the test failed on 2 of its 2 rank(s):",
        "rank 1 (call): E  AssertionError: off by one",
        "rank 0 (call) (when a peer left): E  RuntimeError: Connection closed by peer [127.0.0.1]:4242",
    ]
    assert g.outcome_of("c", statuses, []) == g.Outcome("skipped", "no GPU")


def test_a_rank_that_skips_alone_is_named_as_the_cause(tmp_path: Path) -> None:
    """R12: rank 1 called pytest.skip alone; rank 0 then failed in its collective, and the
    failure showed only rank 0's "Connection closed by peer"."""
    peer = {"outcome": "failed", "when": "call", "done": True,
            "text": "E  RuntimeError: Connection closed by peer [127.0.0.1]:4242"}  # fmt: skip
    skip = {"outcome": "skipped", "when": "call", "done": True, "text": "Skipped: no data here"}
    _status(tmp_path, 0, {"a": peer})
    _status(tmp_path, 1, {"a": skip})
    statuses = [g.RankStatus.read(tmp_path, r) for r in (0, 1)]
    failed = g.outcome_of("a", statuses, [])
    assert failed.kind == "failed"
    assert failed.text.splitlines() == [
        "the test failed on 1 of its 2 rank(s), after rank 1 skipped it alone:",
        "rank 1 (call) skipped it: Skipped: no data here; a rank that skips leaves the others "
        "waiting in its collectives: skip on every rank, or on none",
        "rank 0 (call) (when a peer left): E  RuntimeError: Connection closed by peer "
        "[127.0.0.1]:4242",
    ]


def test_rank_zeros_results_are_read_back_and_a_line_cut_by_a_kill_is_dropped(
    tmp_path: Path,
) -> None:
    r = Result(Run(id=BenchId("t.py::a", mode="cpu-dist"), device="cpu", rounds=(1e-3,) * 5,
                   calls_per_round=1, first_call_s=1e-3))  # fmt: skip
    line = json.dumps({"nodeid": "t.py::a", "results": [r.to_dict()]})
    (tmp_path / g.RESULTS_FILE).write_text(line + "\n" + line[: len(line) // 2])
    got = g.read_results(tmp_path)
    assert list(got) == ["t.py::a"] and got["t.py::a"][0].id.key == "t.py::a@cpu-dist"
    assert g.read_results(tmp_path / "missing") == {}


class _Item:
    def __init__(self, nodeid: str, world: int):
        self.nodeid = nodeid
        self.world_size = world


def test_one_start_runs_the_next_tests_of_its_world_size(monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = g.GroupLauncher.__new__(g.GroupLauncher)
    launcher.look_ahead, launcher.outcomes = True, {}
    items = [_Item("a", 2), _Item("b", 2), _Item("c", 4), _Item("d", 2)]
    monkeypatch.setattr(g, "GroupItem", _Item)
    launcher.set_collected(items)  # type: ignore[arg-type]
    assert launcher.batch(items[0]) == ["a", "b"]  # type: ignore[arg-type]
    assert launcher.batch(items[2]) == ["c"]  # type: ignore[arg-type]
    launcher.outcomes["b"] = g.Outcome("passed")
    assert launcher.batch(items[0]) == ["a"]  # type: ignore[arg-type]
    launcher.look_ahead = False  # an xdist worker does not know what it runs next
    assert launcher.batch(items[1]) == ["b"]  # type: ignore[arg-type]


def test_too_few_gpus_is_a_skip_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = g.GroupLauncher.__new__(g.GroupLauncher)
    monkeypatch.setattr(g, "machine_gpus", lambda: ["GPU-aaa"])
    gpus, why = launcher._gpus(2, "cuda")
    assert gpus == [] and why == (
        "world_size=2 needs 2 GPUs, one per rank; this machine has 1 (GPU-aaa)"
    )
    monkeypatch.setattr(g, "machine_gpus", lambda: ["GPU-b", "GPU-a", "GPU-c"])
    assert launcher._gpus(2, "cuda") == (["GPU-b", "GPU-a"], None)
    assert launcher._gpus(4, "cpu") == ([], None)  # on the CPU, ranks are processes


def test_a_group_locks_each_gpu_by_uuid_or_the_cpu_once() -> None:
    assert g.lock_keys("cpu", []) == ["cpu"]
    assert g.lock_keys("cuda", ["GPU-b", "GPU-a"]) == ["gpu-GPU-b", "gpu-GPU-a"]


def test_the_devices_of_a_group_are_locked_in_one_order_and_each_hold_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPERF_LOCK_DIR", str(tmp_path / "locks"))
    log = tmp_path / "holds.jsonl"
    monkeypatch.setenv("GPUPERF_LOCK_LOG", str(log))
    order: list[str] = []
    real = locks.device_lock

    def spy(key: str, **kw: Any) -> Any:
        order.append(key)
        return real(key, **kw)

    monkeypatch.setattr(locks, "device_lock", spy)
    with locks.devices_locked(["gpu-GPU-b", "gpu-GPU-a", "gpu-GPU-b"], owner="t (world_size=2)"):
        pass
    assert order == ["gpu-GPU-a", "gpu-GPU-b"]
    holds = [json.loads(x) for x in log.read_text().splitlines()]
    assert [h["device"] for h in holds] == ["gpu-GPU-b", "gpu-GPU-a"]  # released in reverse
    assert all(h["owner"] == "t (world_size=2)" and h["released"] >= h["taken"] for h in holds)


def test_two_groups_that_need_the_same_gpus_never_deadlock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPERF_LOCK_DIR", str(tmp_path))
    inside = []

    def group(keys: list[str]) -> None:
        with locks.devices_locked(keys, timeout_s=20):
            inside.append(keys)
            time.sleep(0.05)

    a = threading.Thread(target=group, args=(["gpu-1", "gpu-2"],))
    b = threading.Thread(target=group, args=(["gpu-2", "gpu-1"],))
    a.start(), b.start()
    a.join(30), b.join(30)
    assert len(inside) == 2


class FakeGroup:
    """``world`` ranks in one process: the others' times are given, as gathered."""

    def __init__(self, others: list[float]):
        self.device = "cpu"
        self.others = others
        self.barriers = 0

    def barrier(self) -> None:
        self.barriers += 1

    def gather_floats(self, values: list[float]) -> list[list[float]]:
        return [list(values), *[[t, *values[1:]] for t in self.others]]


def test_a_round_is_the_slowest_ranks_and_every_ranks_time_is_kept() -> None:
    group = FakeGroup(others=[5e-3])  # rank 1 takes 5 ms per call
    timer = GroupTimer(Invocation(lambda: None, group=group), group, mode="cpu-dist")  # type: ignore[arg-type]
    r = timer.time_round(10)
    assert r.per_call == 5e-3 and r.ranks is not None and len(r.ranks) == 2
    assert r.ranks[1] == 5e-3 and r.ranks[0] < 1e-3
    assert group.barriers == 1  # every round starts together
    seconds, out = timer.first_call()
    assert seconds == 5e-3 and out is None


def test_the_loop_keeps_each_ranks_times_aligned_with_the_kept_rounds() -> None:
    class Timer:
        def time_round(self, calls: int) -> engine.Round:
            return engine.Round(1e-3, 1e-3 * calls, calls, None, (1e-3, 0.5e-3))

    fake = [0.0]

    def clock() -> float:
        fake[0] += 1e-3
        return fake[0]

    raw = engine.run(Timer(), MeasurePolicy(warmup_ms=10, min_warmup_ms=1, rounds=6), clock=clock)
    assert len(raw.rank_rounds) == len(raw.rounds) >= 5
    assert raw.rank_rounds[0] == (1e-3, 0.5e-3)

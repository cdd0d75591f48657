"""A group's collectives from its ranks' profiles, and the distributed diagnosis.

The traces are built with a known truth in the shapes torch.profiler writes: NCCL
kernels on their own stream beside compute kernels (a GPU), gloo's work ranges on its
own thread beside the calling thread's operators (the CPU).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.artifacts.analysis import comms, nccl_log
from pytest_gpuperf.artifacts.analysis.diagnose import (
    LOST_OVERLAP,
    MORE_COLLECTIVES,
    RANK_IMBALANCE,
    TRANSPORT_FALLBACK,
    Evidence,
    diagnose,
)
from tests.unit.kineto import FakeTrace

NCCL_LOGS = Path(__file__).resolve().parents[1] / "data" / "nccl"
AR_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def gpu_rank(
    compute_us: float,
    *,
    calls: int = 4,
    buckets: int = 1,
    overlap: bool = False,
    arrive_us: float | None = None,
    nbytes: int = 4 << 20,
    kernel: str = AR_KERNEL,
    idle_us: float = 0.0,
) -> dict[str, Any]:
    """One rank's trace: per call, ``compute_us`` of compute kernels and ``buckets``
    all-reduces of ``nbytes / buckets`` each. Each collective ends when the last rank
    arrives (``arrive_us`` after the call's start: the slowest rank's compute), plus 50 µs
    of transfer. ``overlap``: the collectives run beside the compute (a bucket launched
    as soon as its gradients exist), else after it. ``idle_us``: the rank reaches its
    collectives that much later than its compute ends (held up by something else)."""
    t = FakeTrace()
    arrive = compute_us if arrive_us is None else arrive_us
    host = 1000.0
    for i in range(calls):
        start = host + 10
        t.call(i, host, 5.0)
        t.kernel("sm90_xmma_gemm_bf16", host + 1, start, compute_us)
        for b in range(buckets):
            launch = host + 2 + b * 0.1
            mine = start + idle_us + compute_us * ((b + 1) / buckets if overlap else 1.0)
            last = start + arrive * ((b + 1) / buckets if overlap else 1.0)
            begin = mine if not overlap else min(mine, start + compute_us - 1)
            end = max(begin, last) + 50.0 / buckets
            t.events.append(
                {"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": 1,
                 "tid": 1, "ts": launch - 0.05, "dur": 0.04,
                 "args": {"Input Dims": [[nbytes // buckets // 4]], "Input type": ["float"]}}
            )  # fmt: skip
            t.kernel(kernel, launch, begin, end - begin, stream=20)
        host += 2 * max(arrive, compute_us) + 200
    return t.doc()


def cpu_rank(
    compute_us: float, arrive_us: float, *, calls: int = 4, buckets: int = 1
) -> dict[str, Any]:
    """One rank's CPU trace: ``aten::mm`` on the calling thread, then gloo's all-reduces on
    its own thread, each waiting for the last rank (``arrive_us``)."""
    events: list[dict[str, Any]] = []
    host = 1000.0
    for i in range(calls):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"gpuperf/call#{i}", "pid": 1,
                       "tid": 1, "ts": host, "dur": arrive_us + 100.0 * buckets + 20})  # fmt: skip
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                       "ts": host + 1, "dur": compute_us})  # fmt: skip
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                       "ts": host + 2, "dur": compute_us / 2})  # nested: counted once  # fmt: skip
        at = host + 1 + compute_us
        for _ in range(buckets):
            end = max(at, host + 1 + arrive_us) + 100.0
            events.append({"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1,
                           "tid": 1, "ts": at, "dur": 5.0})  # fmt: skip
            events.append({"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce",
                           "pid": 1, "tid": 99, "ts": at + 1, "dur": end - at - 1,
                           "args": {"Input Dims": [[4096 // buckets]], "Input type": ["float"]}})  # fmt: skip
            at = end
        host += arrive_us + 100.0 * buckets + 500
    return {"traceEvents": events}


def group(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return comms.combine([comms.rank_comms(d, r) for r, d in enumerate(docs)])


def test_one_rank_reads_its_collectives_with_sizes_algorithm_and_compute_before() -> None:
    rc = comms.rank_comms(gpu_rank(300.0, buckets=2), rank=0)
    assert rc.device == "cuda" and len(rc.calls) == 4
    first = rc.calls[0]
    assert [c.op for c in first] == ["all_reduce", "all_reduce"]
    assert [c.nbytes for c in first] == [2 << 20, 2 << 20]
    assert {c.algo for c in first} == {"RING_LL"}
    assert first[0].compute_before == pytest.approx(300.0, abs=1)
    assert first[1].compute_before == pytest.approx(0.0, abs=1)  # nothing between the two


def test_the_straggler_is_named_with_the_wait_it_causes() -> None:
    # rank 1 computes 300 µs, the others 100 µs: they wait ~200 µs in each all-reduce
    docs = [gpu_rank(100.0, arrive_us=300.0), gpu_rank(300.0), gpu_rank(100.0, arrive_us=300.0)]
    g = group(docs)
    assert g["collectives_per_call"] == 1
    assert g["ops"] == {"all_reduce": {"count": 1, "bytes": 4 << 20, "mean_bytes": 4 << 20}}
    assert g["straggler"]["rank"] == 1
    assert g["straggler"]["caused_wait_us"] == pytest.approx(200.0, abs=1)
    assert g["straggler"]["compute_us"] == pytest.approx(300.0, abs=1)
    assert g["straggler"]["others_compute_us"] == pytest.approx(100.0, abs=1)
    waits = [r["wait_us"] for r in g["per_rank"]]
    assert waits[1] == pytest.approx(0.0, abs=1) and waits[0] == pytest.approx(200.0, abs=1)


def test_a_balanced_group_causes_no_wait() -> None:
    g = group([gpu_rank(200.0), gpu_rank(200.0)])
    assert g["straggler"]["caused_wait_us"] == pytest.approx(0.0, abs=1)
    assert g["overlap"] == pytest.approx(0.0, abs=0.01)


def test_overlap_is_the_share_of_collective_time_beside_compute() -> None:
    over = group(
        [gpu_rank(400.0, buckets=4, overlap=True), gpu_rank(400.0, buckets=4, overlap=True)]
    )
    after = group([gpu_rank(400.0, buckets=4), gpu_rank(400.0, buckets=4)])
    assert over["overlap"] > 0.5
    assert after["overlap"] < 0.05
    assert len(over["overlap_by_collective"]) == 4


def test_gloo_on_the_cpu_gives_the_same_reading() -> None:
    g = group([cpu_rank(100.0, arrive_us=400.0), cpu_rank(400.0, arrive_us=400.0)])
    assert g["device"] == "cpu" and g["overlap"] is None
    assert g["ops"]["all_reduce"]["bytes"] == 4096 * 4
    assert g["straggler"]["rank"] == 1
    assert g["straggler"]["caused_wait_us"] == pytest.approx(300.0, abs=2)
    assert g["per_rank"][0]["compute_us"] == pytest.approx(100.0, abs=1)  # the nested op once


def test_no_collectives_is_said_not_guessed() -> None:
    t = FakeTrace()
    t.call(0, 0.0, 10.0)
    t.kernel("elementwise", 1.0, 2.0, 5.0)
    assert group([t.doc()])["collectives_per_call"] == 0


def _slowdown(base: dict[str, Any], cur: dict[str, Any]) -> float:
    return float(cur["call_us"]) - float(base["call_us"])


def test_findings_name_an_imbalance_against_a_balanced_baseline() -> None:
    base = group([gpu_rank(100.0), gpu_rank(100.0)])
    cur = group([gpu_rank(100.0, arrive_us=300.0), gpu_rank(300.0)])
    found = comms.findings(base, cur, 200.0)
    assert found[0].cause == comms.RANK_IMBALANCE
    assert found[0].sentence.startswith(
        "rank imbalance: rank 1 made the others wait 200 µs per call"
    )


def test_a_late_rank_that_computed_no_more_is_not_called_an_imbalance() -> None:
    base = group([gpu_rank(100.0), gpu_rank(100.0)])
    # rank 1 arrives 200 µs late, yet computes what the others do: something else held it up
    cur = group([gpu_rank(100.0, arrive_us=300.0), gpu_rank(100.0, arrive_us=300.0, idle_us=200.0)])
    late = [f for f in comms.findings(base, cur, 200.0) if f.cause == comms.RANK_IMBALANCE]
    assert late and late[0].sentence.startswith("a late rank: rank")
    assert late[0].extra_us is None  # unmeasured: never given a share of the slowdown


def test_findings_name_more_smaller_collectives() -> None:
    base = group([gpu_rank(200.0, buckets=1), gpu_rank(200.0, buckets=1)])
    cur = group([gpu_rank(200.0, buckets=16), gpu_rank(200.0, buckets=16)])
    found = comms.findings(base, cur, 100.0)
    assert found[0].cause == comms.MORE_COLLECTIVES
    assert "all_reduce 1 -> 16 per call, 4 MiB -> 256 KiB each" in found[0].sentence


def test_findings_name_lost_overlap() -> None:
    base = group([gpu_rank(400.0, buckets=4, overlap=True) for _ in range(2)])
    cur = group([gpu_rank(400.0, buckets=4) for _ in range(2)])
    found = comms.findings(base, cur, 50.0)
    assert found[0].cause == comms.LOST_OVERLAP
    assert found[0].sentence.startswith("lost overlap: 0 % of the collectives' time")


def test_findings_name_an_algorithm_and_a_message_size_change() -> None:
    base = group([gpu_rank(200.0) for _ in range(2)])
    tree = "ncclDevKernel_AllReduce_Sum_f32_TREE_SIMPLE(ncclDevKernelArgsStorage<4096ul>)"
    cur = group([gpu_rank(200.0, kernel=tree, nbytes=16 << 20) for _ in range(2)])
    causes = {f.cause: f.sentence for f in comms.findings(base, cur, 100.0)}
    assert "TREE_SIMPLE" in causes[comms.ALGORITHM] and "RING_LL" in causes[comms.ALGORITHM]
    assert "4 MiB -> 16 MiB each" in causes[comms.MESSAGE_SIZE]


def test_an_unchanged_group_has_no_finding() -> None:
    base = group([gpu_rank(200.0) for _ in range(2)])
    assert comms.findings(base, group([gpu_rank(200.0) for _ in range(2)]), 10.0) == []
    assert comms.findings(base, None, 10.0) == []


def _first_sentence(text: str) -> str:
    return text.split(". ", 1)[0]


def _evidence(base: dict[str, Any], cur: dict[str, Any], b_s: float, c_s: float) -> Evidence:
    return Evidence(key="t.py::test_step@cuda-dist", display="test_step", baseline_s=b_s,
                    current_s=c_s, group=cur, baseline_group=base)  # fmt: skip


@pytest.mark.parametrize(
    ("cause", "base_docs", "cur_docs", "named", "slower"),
    [
        (RANK_IMBALANCE, [gpu_rank(100.0)] * 2,
         [gpu_rank(100.0, arrive_us=300.0), gpu_rank(300.0)], "rank imbalance: rank 1", "+75.0 %"),
        (MORE_COLLECTIVES, [gpu_rank(200.0)] * 2, [gpu_rank(200.0, buckets=16)] * 2,
         "more, smaller collectives: all_reduce 1 -> 16 per call", "+75.0 %"),
        # the 38 µs per call no longer hidden is the slowdown: a finding leads with its share
        (LOST_OVERLAP, [gpu_rank(400.0, buckets=4, overlap=True)] * 2,
         [gpu_rank(400.0, buckets=4)] * 2, "lost overlap", "+10.0 %"),
    ],
)  # fmt: skip
def test_the_diagnosis_names_the_distributed_cause_in_its_first_sentence(
    cause: str, base_docs: list[dict[str, Any]], cur_docs: list[dict[str, Any]], named: str,
    slower: str,
) -> None:  # fmt: skip
    base, cur = group(base_docs), group(cur_docs)
    current = 700e-6 if slower == "+75.0 %" else 440e-6
    d = diagnose(_evidence({"comms": base}, {"comms": cur}, 400e-6, current))
    assert d.cause == cause
    first = _first_sentence(d.paragraph)
    assert first.startswith(f"test_step is slower than its baseline: {slower} time")
    assert named in first


def test_a_transport_fallback_leads_the_diagnosis() -> None:
    p2p = nccl_log.summarize([nccl_log.parse((NCCL_LOGS / "two-rank-p2p-nvlink.log").read_text())])
    shm = nccl_log.summarize([nccl_log.parse((NCCL_LOGS / "two-rank-shm.log").read_text())])
    same = group([gpu_rank(200.0)] * 2)
    ev = _evidence({"comms": same, "nccl": p2p}, {"comms": same, "nccl": shm}, 35e-6, 390e-6)
    d = diagnose(ev)
    assert d.cause == TRANSPORT_FALLBACK
    first = _first_sentence(d.paragraph)
    assert "transport fallback: the ranks now connect via SHM/direct" in first
    assert "NCCL_P2P_DISABLE=1" in first
    assert any(line.startswith("NCCL in the baseline: NCCL 2.28.9") for line in d.details)


def test_rank_comms_travel_as_plain_data() -> None:
    rc = comms.rank_comms(gpu_rank(100.0), 1)
    back = comms.RankComms.from_dict(rc.to_dict())
    assert back.rank == 1 and back.calls[0][0].op == "all_reduce"
    assert back.calls[0][0].nbytes == rc.calls[0][0].nbytes

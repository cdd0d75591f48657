"""Collectives' names, nccl-tests' bus-bandwidth factors, message sizes; torchrun's variables."""

from __future__ import annotations

import math

import pytest

from pytest_gpuperf.measure import collectives as c
from pytest_gpuperf.measure.ranks import GROUP_DIR_ENV, RankEnvError, rank_env
from pytest_gpuperf.model import BenchId, Result, Run
from pytest_gpuperf.reporting.columns import fmt_result_rate
from pytest_gpuperf.values import OptionValueError, collective_name


@pytest.mark.parametrize(
    ("name", "n", "factor"),
    [
        ("all_reduce", 1, 0.0),
        ("all_reduce", 2, 1.0),
        ("all_reduce", 4, 1.5),
        ("all_reduce", 8, 1.75),
        ("all_gather", 2, 0.5),
        ("all_gather", 8, 0.875),
        ("reduce_scatter", 4, 0.75),
        ("all_to_all", 8, 0.875),
        ("broadcast", 1, 1.0),
        ("broadcast", 8, 1.0),
        ("reduce", 4, 1.0),
        ("send_recv", 2, 1.0),
    ],
)
def test_bus_factors_are_nccl_tests_ones(name: str, n: int, factor: float) -> None:
    assert c.bus_factor(name, n) == pytest.approx(factor)


def test_the_factors_follow_their_formulas_at_every_world_size() -> None:
    for n in range(1, 65):
        assert c.bus_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
        for op in ("all_gather", "reduce_scatter", "all_to_all"):
            assert c.bus_factor(op, n) == pytest.approx((n - 1) / n)


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("all_reduce", "all_reduce"),
        ("AllReduce", "all_reduce"),
        ("allreduce", "all_reduce"),
        ("nccl:all_reduce", "all_reduce"),
        ("gloo:all_reduce", "all_reduce"),
        ("c10d::allreduce_", "all_reduce"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_reduce"),
        ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", "all_gather"),
        ("nccl:_allgather_base", "all_gather"),
        ("all_gather_into_tensor", "all_gather"),
        ("reduce_scatter_tensor", "reduce_scatter"),
        ("nccl:_reduce_scatter_base", "reduce_scatter"),
        ("all_to_all_single", "all_to_all"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "send_recv"),
        ("broadcast", "broadcast"),
    ],
)
def test_every_spelling_of_a_collective_is_understood(spelling: str, canonical: str) -> None:
    assert c.normalize(spelling) == canonical


def test_an_unknown_collective_is_refused_with_the_known_ones() -> None:
    assert c.normalize("aten::mm") is None
    with pytest.raises(OptionValueError, match="unknown collective 'allreduse'; one of all_reduce"):
        collective_name("allreduse")
    assert collective_name("AllGather") == "all_gather"
    with pytest.raises(ValueError, match="at least 1"):
        c.bus_factor("all_reduce", 0)


def test_the_message_is_the_largest_argument_a_list_counting_as_its_sum() -> None:
    # all_reduce(t); all_gather_into_tensor(out, inp): the gathered whole; all_gather(list, inp)
    assert c.message_bytes([4096]) == 4096
    assert c.message_bytes([8192, 4096]) == 8192
    assert c.message_bytes([[1024, 1024, 1024, 1024], 1024]) == 4096
    assert c.message_bytes([None, 2048, None]) == 2048
    assert c.message_bytes([None]) is None


def _result(median: float, nbytes: float | None, group: dict[str, object] | None) -> Result:
    return Result(Run(id=BenchId("t.py::test_ar", mode="cpu-dist"), device="cpu",
                      rounds=(median,) * 5, calls_per_round=1, first_call_s=median, bytes=nbytes,
                      extra={} if group is None else {"group": group}))  # fmt: skip


def test_algbw_and_busbw_of_a_collective_result() -> None:
    # 1 GiB all-reduce in 3.3 ms at 2 ranks: algbw 325 GB/s, busbw the same (factor 1)
    r = _result(3.3e-3, 2**30, {"world_size": 2, "backend": "nccl", "collective": "all_reduce"})
    assert r.run.gbps == pytest.approx(2**30 / 3.3e-3 / 1e9)
    assert c.busbw_gbps(r.run) == pytest.approx(r.run.gbps)
    assert fmt_result_rate(r) == "algbw 325 GB/s, busbw 325 GB/s"
    one = _result(1e-3, 2**20, {"world_size": 1, "backend": "nccl", "collective": "all_reduce"})
    assert c.busbw_gbps(one.run) == 0.0  # world size 1: nothing crosses a bus
    assert math.isclose(one.run.gbps or 0.0, 2**20 / 1e-3 / 1e9)


def test_a_result_that_times_no_collective_keeps_its_plain_throughput() -> None:
    plain = _result(1e-3, 1e6, None)
    assert c.busbw_gbps(plain.run) is None
    assert fmt_result_rate(plain) == "1 GB/s"
    step = _result(1e-3, None, {"world_size": 2, "backend": "gloo", "collective": None})
    assert c.busbw_gbps(step.run) is None and fmt_result_rate(step) == "-"


TORCHRUN = {
    "RANK": "3",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "0",
    "MASTER_ADDR": "node-0",
    "MASTER_PORT": "29400",
    "TORCHELASTIC_RUN_ID": "abc",
}


def test_torchruns_variables_name_the_rank() -> None:
    env = rank_env({**TORCHRUN, "GROUP_RANK": "0"})
    assert env is not None
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (3, 8, 1, 4)
    assert not env.is_lead and not env.spawned
    assert env.label() == "rank 3 of 8"
    spawned = rank_env({**TORCHRUN, "RANK": "0", "WORLD_SIZE": "2", GROUP_DIR_ENV: "/tmp/g"})
    assert spawned is not None and spawned.is_lead and spawned.spawned


def test_no_rank_outside_a_group_and_a_clear_error_for_a_broken_one() -> None:
    assert rank_env({}) is None
    assert rank_env({"RANK": "0"}) is None  # not a rank without WORLD_SIZE
    with pytest.raises(RankEnvError, match="RANK=2 and WORLD_SIZE=2 do not describe a rank"):
        rank_env({**TORCHRUN, "RANK": "2", "WORLD_SIZE": "2"})
    with pytest.raises(RankEnvError, match="LOCAL_RANK='x' is not a whole number"):
        rank_env({**TORCHRUN, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "x"})


@pytest.mark.parametrize("missing", ["MASTER_ADDR", "MASTER_PORT"])
def test_rank_variables_left_over_without_a_group_are_no_rank(missing: str) -> None:
    """R6: RANK=1 WORLD_SIZE=2 leaked into a session (a launcher, a container spec) made it
    a rank 1 that skipped every benchmark, saved nothing and exited 0."""
    leaked = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}
    if missing == "MASTER_PORT":
        leaked["MASTER_ADDR"] = "127.0.0.1"
    with pytest.raises(RankEnvError, match=f"{missing} is not set, but RANK and WORLD_SIZE are"):
        rank_env(leaked)

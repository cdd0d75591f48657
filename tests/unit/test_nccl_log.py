"""NCCL's init log (NCCL_DEBUG=INFO) read into transports, and a transport change told."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpuperf.artifacts.analysis import nccl_log

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl"


def _read(name: str) -> nccl_log.NcclLog:
    return nccl_log.parse((DATA / name).read_text())


def test_a_two_rank_nvlink_log_names_peer_access_through_cumem() -> None:
    log = _read("two-rank-p2p-nvlink.log")
    assert log.version == "2.28.9+cuda13.0"
    assert log.network == "Socket"
    assert dict(log.transports) == {"P2P/CUMEM": 6}
    assert log.comms == [("0x55d0c1a2b2c0", 0, 2)]
    assert log.nvls is True
    assert log.env == {}


def test_p2p_disabled_falls_back_to_shared_memory_and_says_why() -> None:
    log = _read("two-rank-shm.log")
    assert dict(log.transports) == {"SHM/direct": 4}
    assert log.env == {"NCCL_P2P_DISABLE": "1"}
    assert log.nvls is False


def test_two_hosts_connect_over_the_network() -> None:
    log = _read("two-rank-net-socket.log")
    assert dict(log.transports) == {"NET/Socket": 4}
    assert log.nranks == 2


@pytest.mark.parametrize("name", ["one-rank-handwritten.log", "h200-ws1.log"])
def test_world_size_one_has_no_peer_transport(name: str) -> None:
    if not (DATA / name).exists():
        pytest.skip(f"{name} is recorded on the H200 by bench/gpu/part-dist.sh")
    log = _read(name)
    assert log.version and log.version.startswith("2.")
    assert not log.transports
    assert log.nranks == 1
    summary = nccl_log.summarize([log])
    assert nccl_log.main_transport(summary) is None
    assert "no peer transport (world size 1)" in nccl_log.describe(summary)


def test_transport_names_keep_what_tells_them_apart() -> None:
    assert nccl_log.transport_name("P2P/CUMEM/read") == "P2P/CUMEM"
    assert nccl_log.transport_name("P2P/direct") == "P2P/direct"
    assert nccl_log.transport_name("NET/IB/0/GDRDMA") == "NET/IB"
    assert nccl_log.transport_name("NVLS") == "NVLS"


def test_other_lines_and_other_levels_are_ignored() -> None:
    text = (
        "some python output\n"
        "h:1:1 [0] NCCL WARN Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n"
        "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
    )
    log = nccl_log.parse(text)
    assert dict(log.transports) == {"P2P/CUMEM": 1}
    assert log.lines == 1


def test_the_ranks_summaries_merge_into_the_group_one() -> None:
    a = nccl_log.summarize([_read("two-rank-p2p-nvlink.log")])
    b = nccl_log.summarize([_read("two-rank-p2p-nvlink.log")])
    merged = nccl_log.merge([a, b, None])
    assert merged["transports"] == {"P2P/CUMEM": 12}
    assert merged["ranks_logged"] == 2
    assert merged["version"] == "2.28.9+cuda13.0"


def test_a_fallback_to_a_slower_transport_is_named_with_the_setting_behind_it() -> None:
    p2p = nccl_log.summarize([_read("two-rank-p2p-nvlink.log")])
    shm = nccl_log.summarize([_read("two-rank-shm.log")])
    net = nccl_log.summarize([_read("two-rank-net-socket.log")])
    said = nccl_log.transport_change(p2p, shm)
    assert said is not None
    assert said.startswith("transport fallback: the ranks now connect via SHM/direct")
    assert "(the baseline via P2P/CUMEM)" in said
    assert "NCCL_P2P_DISABLE=1 in the environment" in said
    assert (nccl_log.transport_change(shm, net) or "").startswith("transport fallback")
    # back to a faster transport is a change, not a fallback; the same is nothing
    assert (nccl_log.transport_change(shm, p2p) or "").startswith("transport change:")
    assert nccl_log.transport_change(p2p, p2p) is None
    # a side that logged nothing (NCCL_DEBUG not INFO, world size 1) says nothing
    assert nccl_log.transport_change(None, shm) is None
    assert nccl_log.transport_change(p2p, nccl_log.summarize([nccl_log.parse("")])) is None


def test_describe_says_what_a_report_shows() -> None:
    p2p = nccl_log.summarize([_read("two-rank-p2p-nvlink.log")])
    assert nccl_log.describe(p2p) == (
        "NCCL 2.28.9+cuda13.0, 2 rank(s), P2P/CUMEM (6 connection(s)), network Socket"
    )
    assert nccl_log.describe(None) == "no NCCL log"

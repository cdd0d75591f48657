"""The environment fingerprint: which keys are hard, stable ids, readable differences."""

from __future__ import annotations

import pytest

from pytest_gpuperf.baseline.codec import fingerprint_id
from pytest_gpuperf.baseline.fingerprint import CPU_KEYS, GPU_KEYS, differences, fingerprint
from tests.unit.reporting_data import CPU_ENV as SAMPLE_CPU_ENV
from tests.unit.reporting_data import GPU_ENV as SAMPLE_GPU_ENV

GPU_ENV = {
    **SAMPLE_GPU_ENV,
    # soft: recorded by collect_environment, never part of the fingerprint
    "gpu_uuid": "GPU-1234",
    "gpu_index": 3,
    "hostname": "runner-7",
    "cpu_model": "AMD EPYC 9654",
    "cudnn": 91002,
    "cuda_visible_devices": "3",
}
CPU_ENV = {
    **SAMPLE_CPU_ENV,
    "triton": None,
    "hostname": "laptop",
    "cpu_count": 16,
}


def test_gpu_fingerprint_holds_exactly_the_hard_gpu_keys() -> None:
    fp = fingerprint(GPU_ENV)
    assert list(fp) == list(GPU_KEYS)
    assert fp["gpu_name"] == "NVIDIA H200"
    assert fp["sm_count"] == 132
    assert "gpu_uuid" not in fp and "hostname" not in fp and "python" not in fp


def test_cpu_fingerprint_holds_exactly_the_hard_cpu_keys() -> None:
    fp = fingerprint(CPU_ENV)
    assert list(fp) == list(CPU_KEYS)
    assert fp["python"] == "3.11"  # patch releases do not split baselines
    assert fp["torch_threads"] == 8
    assert "triton" not in fp and "cpu_count" not in fp


def test_device_is_inferred_when_the_environment_lacks_it() -> None:
    gpu = {k: v for k, v in GPU_ENV.items() if k != "device"}
    cpu = {k: v for k, v in CPU_ENV.items() if k != "device"}
    assert fingerprint(gpu)["device"] == "cuda"
    assert fingerprint(cpu)["device"] == "cpu"


def test_missing_values_are_kept_as_none() -> None:
    env = {k: v for k, v in GPU_ENV.items() if k != "triton"}
    fp = fingerprint(env)
    assert fp["triton"] is None
    assert fingerprint_id(fp) != fingerprint_id(fingerprint(GPU_ENV))


@pytest.mark.parametrize("soft", ["gpu_uuid", "gpu_index", "hostname", "python", "cudnn"])
def test_soft_keys_do_not_change_the_id(soft: str) -> None:
    changed = dict(GPU_ENV, **{soft: "something else"})
    assert fingerprint_id(fingerprint(changed)) == fingerprint_id(fingerprint(GPU_ENV))


@pytest.mark.parametrize("hard", [k for k in GPU_KEYS if k != "device"])
def test_every_hard_gpu_key_changes_the_id(hard: str) -> None:
    changed = dict(GPU_ENV, **{hard: "something else"})
    assert fingerprint_id(fingerprint(changed)) != fingerprint_id(fingerprint(GPU_ENV))


@pytest.mark.parametrize("hard", [k for k in CPU_KEYS if k != "device"])
def test_every_hard_cpu_key_changes_the_id(hard: str) -> None:
    changed = dict(CPU_ENV, **{hard: "4.0"})
    assert fingerprint_id(fingerprint(changed)) != fingerprint_id(fingerprint(CPU_ENV))


def test_cpu_and_gpu_runs_never_share_a_fingerprint() -> None:
    assert fingerprint_id(fingerprint(CPU_ENV)) != fingerprint_id(fingerprint(GPU_ENV))


def test_id_is_stable_across_key_order_and_releases() -> None:
    fp = fingerprint(GPU_ENV)
    reordered = dict(reversed(list(fp.items())))
    assert fingerprint_id(reordered) == fingerprint_id(fp)
    # Frozen: ids are written into baseline files, so the hash must never change.
    assert fingerprint_id(fp) == "c83906fe2b68"
    assert len(fingerprint_id(fp)) == 12


def test_extra_keys_from_a_hook_are_hard_keys() -> None:
    fp = fingerprint(GPU_ENV, {"clocks_locked": True, "model_rev": "abc"})
    assert fp["clocks_locked"] is True and fp["model_rev"] == "abc"
    other = fingerprint(GPU_ENV, {"clocks_locked": False, "model_rev": "abc"})
    assert fingerprint_id(fp) != fingerprint_id(other)
    assert differences(fp, other) == ["clocks_locked true -> false"]


def test_extra_cannot_override_a_builtin_key() -> None:
    with pytest.raises(ValueError, match="'driver' is a built-in fingerprint key"):
        fingerprint(GPU_ENV, {"driver": "any"})


def test_extra_values_must_be_json_scalars() -> None:
    with pytest.raises(TypeError, match="'clocks' must be a string, number, boolean or None"):
        fingerprint(GPU_ENV, {"clocks": [1980, 3201]})


def test_differences_are_readable_and_ordered() -> None:
    a = fingerprint(GPU_ENV)
    b = fingerprint(
        dict(
            GPU_ENV,
            gpu_name="NVIDIA H100 80GB HBM3",
            gpu_memory_bytes=85_520_809_984,
            sm_count=132,
            driver="575.57.08",
        )
    )
    assert differences(a, b) == [
        "GPU NVIDIA H200 -> NVIDIA H100 80GB HBM3",
        "GPU memory 139.8 GiB -> 79.6 GiB",
        "driver 580.159.04 -> 575.57.08",
    ]
    assert differences(a, a) == []


def test_differences_show_unknown_and_unrecorded_values() -> None:
    a = fingerprint(GPU_ENV)
    b = dict(a, triton=None)
    del b["cuda_runtime"]
    assert differences(a, b) == ["CUDA 13.0 -> (not recorded)", "triton 3.6.0 -> (unknown)"]


def test_differences_between_cpu_and_gpu_list_the_device_first() -> None:
    diff = differences(fingerprint(GPU_ENV), fingerprint(CPU_ENV))
    assert diff[0] == "device cuda -> cpu"


def test_differences_that_round_alike_are_shown_exactly() -> None:
    a = dict(fingerprint(GPU_ENV), gpu_memory_bytes=150_121_086_976)
    b = dict(a, gpu_memory_bytes=150_121_086_977)
    assert differences(a, b) == ["GPU memory 150121086976 -> 150121086977"]


def test_every_differing_pair_of_ids_has_differences() -> None:
    """Ids and differences agree: int 1 and float 1.0 hash differently, so they differ."""
    a = dict(fingerprint(GPU_ENV), sm_count=132)
    b = dict(a, sm_count=132.0)
    assert fingerprint_id(a) != fingerprint_id(b)
    assert differences(a, b) == ["SM count 132 -> 132.0"]

"""The spin sizing of the device-time figure, against a simulated GPU and host."""

from __future__ import annotations

import pytest

from pytest_gpuperf.measure.host_hiding import HostHiding


class SimGpu:
    """A stream fed by a host: the host spends ``host`` s per call (``extra`` more in a
    device round), the GPU runs ``spin`` then the calls; at most ``queue`` calls may be
    pending (more block the host until the spin ends); ``sync`` calls wait for the GPU."""

    def __init__(self, host: float, device: float, *, queue: int = 10_000, sync: bool = False):
        self.host, self.device, self.queue, self.sync = host, device, queue, sync
        self.clock_hz = 1.5e9

    def spin(self, cycles: int) -> float:
        return cycles / self.clock_hz

    def device_round(self, h: HostHiding, calls: int) -> bool:
        cycles = h.spin_cycles(calls)
        spin_s = self.spin(cycles)
        per = self.host + 15e-6
        if self.sync and cycles:
            enqueue = spin_s + calls * (per + self.device)  # the first call waits for the spin
        elif calls > self.queue and cycles:
            enqueue = max(spin_s, self.queue * per) + (calls - self.queue) * max(per, self.device)
        else:
            enqueue = calls * per
        return h.observe(calls, cycles, spin_s, enqueue)

    def e2e_round(self, h: HostHiding, calls: int) -> None:
        per = self.host + (self.device if self.sync else 0.0)
        h.observe_enqueue(calls, calls * per)


def drive(gpu: SimGpu, wanted: int = 64, rounds: int = 40) -> tuple[HostHiding, list[bool]]:
    h = HostHiding()
    h.observe_rate(200_000, gpu.spin(200_000))
    # the probe: one call behind a spin 20x its host time
    one = gpu.host + (gpu.device if gpu.sync else 0.0)
    spin = max(0.02, 20 * one)
    h.probe(spin + one if gpu.sync else gpu.host, spin)
    flags = []
    for _ in range(rounds):
        gpu.e2e_round(h, wanted)
        ok = False
        for _ in range(3):
            ok = gpu.device_round(h, h.round_calls(wanted, 64))
            if ok or not h.hideable:
                break
        flags.append(ok)
    return h, flags


@pytest.mark.parametrize("host", [5e-6, 80e-6, 2e-3])
def test_a_host_bound_function_is_hidden_after_at_most_a_round(host: float) -> None:
    h, flags = drive(SimGpu(host=host, device=3e-6))
    assert h.hideable and all(flags[1:])
    # the spin stays within a small multiple of the enqueue it hides
    assert h.spin_cycles(64) / 1.5e9 <= 4 * 64 * (host + 15e-6) + 1e-3


def test_a_full_launch_queue_lowers_the_calls_per_round() -> None:
    h, flags = drive(SimGpu(host=10e-6, device=2e-6, queue=20))
    assert h.hideable and h.calls is not None and h.calls <= 20
    assert all(flags[-10:])


def test_a_function_that_waits_for_the_gpu_is_marked_unhideable_by_the_probe() -> None:
    h, flags = drive(SimGpu(host=20e-6, device=50e-6, sync=True))
    assert not h.hideable and not any(flags)
    assert h.spin_cycles(1) == 0  # no spinning at all
    assert h.rounds == 40  # one try per round: nothing to retry


def test_a_slow_moment_of_the_host_is_retried_not_taken_for_a_sync() -> None:
    gpu = SimGpu(host=50e-6, device=3e-6)
    h, _ = drive(gpu, rounds=5)
    gpu.host = 400e-6  # the host slows down 8x for a while
    more = [gpu.device_round(h, h.round_calls(64, 64)) for _ in range(4)]
    gpu.host = 50e-6
    gpu.e2e_round(h, 64)
    after = [gpu.device_round(h, h.round_calls(64, 64)) for _ in range(3)]
    assert h.hideable and all(after)
    assert not all(more)


def test_a_slower_clock_only_lengthens_the_spin() -> None:
    h = HostHiding()
    h.observe_rate(1_000_000, 1e-3)  # 1 GHz
    h.observe_rate(1_000_000, 2e-3)  # 0.5 GHz later: the fastest rate is kept
    assert h.rate == pytest.approx(1e9)


def test_spin_before_calibration_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="calibrated"):
        HostHiding().spin_cycles(4)

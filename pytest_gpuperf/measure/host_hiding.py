"""Sizing the spin kernel that holds the GPU while the host enqueues a round (pure Python).

The device figure is the GPU alone only if the spin outlasts the host's enqueue (nvbench's
blocking-kernel method); the fastest spin rate seen is used, since a slower clock only
lengthens a spin. A function that waits for the GPU itself can never be hidden.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class HostHiding:
    #: the spin must last this many times the expected enqueue time
    margin: float = 2.0
    #: shortest spin (s): the host's own latency from the spin's launch to the first call
    min_spin_s: float = 100e-6
    #: longest spin (s)
    max_spin_s: float = 0.25
    #: a round counts as hidden when the host finished enqueuing within this share of the spin
    hidden_share: float = 0.9
    #: host seconds per call that the device round adds to the call itself (flush, events)
    overhead_per_call: float = 15e-6
    #: spin cycles per second, fastest seen (None until calibrated)
    rate: float | None = None
    #: host seconds to enqueue one call without a spin (from the end-to-end rounds)
    enqueue_per_call: float = 0.0
    #: calls per device round, once lowered because the host was blocked
    calls: int | None = None
    #: False once the function showed that it waits for the GPU itself
    hideable: bool = True
    #: rounds measured
    rounds: int = 0

    def observe_rate(self, cycles: int, seconds: float) -> None:
        """A spin of ``cycles`` took ``seconds`` on the GPU."""
        if cycles > 0 and seconds > 0:
            self.rate = max(self.rate or 0.0, cycles / seconds)

    def observe_enqueue(self, calls: int, seconds: float) -> None:
        """The host enqueued ``calls`` calls without a spin in ``seconds`` (an end-to-end round)."""
        if calls > 0 and seconds > 0:
            per = seconds / calls
            # Lean to the slower of old and new: a short spin costs a failed round.
            self.enqueue_per_call = max(per, 0.5 * (self.enqueue_per_call + per))

    def round_calls(self, wanted: int, cap: int) -> int:
        """Calls for the next device round: the engine's ``wanted``, at most ``cap`` or fewer."""
        n = max(1, min(wanted, cap))
        return n if self.calls is None else max(1, min(n, self.calls))

    def spin_cycles(self, calls: int) -> int:
        """Cycles to spin before enqueuing ``calls`` calls (0: do not spin)."""
        if not self.hideable:
            return 0
        if self.rate is None:
            raise RuntimeError("HostHiding.spin_cycles() before the spin rate was calibrated")
        expected = calls * (self.enqueue_per_call + self.overhead_per_call)
        seconds = min(self.max_spin_s, max(self.min_spin_s, self.margin * expected))
        return max(1, int(seconds * self.rate))

    def probe(self, host_s: float, spin_s: float) -> None:
        """One call enqueued behind a spin of ``spin_s`` (far beyond its own host time)
        returned after ``host_s``: after half the spin, it waits for the GPU."""
        if host_s >= 0.5 * spin_s:
            self.hideable = False

    def observe(self, calls: int, cycles: int, spin_s: float, enqueue_s: float) -> bool:
        """Record a device round; True if its host was hidden (its figure is device time).
        ``spin_s``: the spin on the GPU; ``enqueue_s``: host time from its launch to the end."""
        self.rounds += 1
        if not self.hideable or cycles <= 0:
            return False
        self.observe_rate(cycles, spin_s)
        if enqueue_s <= self.hidden_share * spin_s:
            return True
        expected = calls * (self.enqueue_per_call + self.overhead_per_call)
        if enqueue_s >= spin_s and spin_s >= 1.2 * expected and calls > 1:
            # The host was still enqueuing when a spin well beyond its expected enqueue time
            # had ended: the launch queue held it back; enqueue fewer calls.
            self.calls = max(1, calls // 2)
        elif enqueue_s >= spin_s:
            # The spin was too short for this host (a slow moment): learn its enqueue cost.
            self.enqueue_per_call = max(
                self.enqueue_per_call, enqueue_s / calls - self.overhead_per_call
            )
        else:
            self.margin = min(8.0, self.margin * 1.5)
        return False

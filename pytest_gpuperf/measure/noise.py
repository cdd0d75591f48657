"""How much a kind of timed figure moves between fresh processes: a :class:`NoiseClass`.

A timing mode declares the class of its figures; the classes, with the measurements behind
them, are :data:`pytest_gpuperf.verdict.policy.CLASSES`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class NoiseClass:
    """How the fast mode of one kind of figure moves between fresh processes.

    ``noise`` is the prior SD (log scale) of a process's level around the fast mode (with
    ``noise_small``: its value at ``small_s`` or less, falling log-log to ``noise`` at
    ``large_s``). ``mode`` is the largest slowdown that process modes alone produced: beyond
    it one run is evidence enough; below it a regression needs ``runs`` fresh-process runs,
    every one slower (all ``runs`` slow by chance with probability p^runs).
    """

    name: str
    noise: float
    mode: float
    runs: int
    noise_small: float | None = None
    small_s: float = 20e-6
    large_s: float = 200e-6
    about: str = ""
    #: (seconds, noise): the prior for calls of that time or less, falling log-log to the
    #: prior at ``small_s`` (calls of a few µs timed by an event pair each move more)
    tiny: tuple[float, float] | None = None

    def prior(self, median_s: float) -> float:
        small = self.noise if self.noise_small is None else self.noise_small
        if self.tiny is not None and median_s < self.small_s:
            tiny_s, tiny = self.tiny
            return _loglog(median_s, tiny_s, tiny, self.small_s, small)
        if self.noise_small is None:
            return self.noise
        return _loglog(median_s, self.small_s, self.noise_small, self.large_s, self.noise)


def _loglog(t: float, t0: float, y0: float, t1: float, y1: float) -> float:
    """y0 at t0 or less, y1 at t1 or more, log-log linear between."""
    t = min(max(t, t0), t1)
    frac = math.log(t / t0) / math.log(t1 / t0)
    return math.exp(math.log(y0) + frac * math.log(y1 / y0))

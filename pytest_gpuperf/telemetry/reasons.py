"""NVML clock-event (throttle) reasons: readable names for the bits of the reason mask.

Each bit says why the SM clock is below its maximum; :func:`reason_names` adds the bits
the installed pynvml defines beyond :data:`KNOWN`, so a newer driver's reasons are named.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import ModuleType

#: Readable names of the documented bits (NVML ``nvmlClocksEventReason*``).
KNOWN: Mapping[int, str] = {
    0x1: "GPU idle",
    0x2: "applications clocks setting",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
    0x100: "display clock setting",
    0x200: "board limit",
    0x400: "reliability",
}

#: Bits that do not slow a benchmark down on their own: an idle GPU (the
#: clock check catches a low idle clock), and clocks chosen by the user.
BENIGN = 0x1 | 0x2 | 0x100
BENIGN_NAMES = frozenset(KNOWN[b] for b in (0x1, 0x2, 0x100))
#: Bits that point at the machine (cooling, power delivery) rather than the workload. The SW
#: power cap is how a GPU normally runs sustained heavy work (an H200 bf16 matmul at 700 W).
MACHINE = 0x8 | 0x20 | 0x40 | 0x80
MACHINE_NAMES = frozenset(KNOWN[b] for b in (0x8, 0x20, 0x40, 0x80))

_SKIP = {"None", "All", "UserDefinedClocks"}
_WORDS = {"Hw": "HW", "Sw": "SW", "Gpu": "GPU"}


def _readable(suffix: str) -> str:
    words = re.findall(r"[A-Z][a-z0-9]*", suffix) or [suffix]
    return " ".join(_WORDS.get(w, w.lower()) for w in words)


def reason_names(pynvml: ModuleType | None = None) -> dict[int, str]:
    """Bit value -> readable name, for every single-bit reason known here or in ``pynvml``."""
    names = dict(KNOWN)
    if pynvml is None:
        return names
    for attr in dir(pynvml):
        m = re.fullmatch(r"nvmlClocks(?:Event|Throttle)Reason(\w*)", attr)
        value = getattr(pynvml, attr, None) if m else None
        if m is None or m[1] in _SKIP or not isinstance(value, int) or isinstance(value, bool):
            continue
        if value > 0 and value & (value - 1) == 0:  # one bit
            names.setdefault(value, _readable(m[1]))
    return names


def decode(mask: int, names: Mapping[int, str] | None = None) -> list[str]:
    """Readable names of the bits set in ``mask``, lowest first: ``0x4`` -> ``["SW power cap"]``."""
    names = KNOWN if names is None else names
    bits = [1 << i for i in range(mask.bit_length()) if mask >> i & 1]
    return [names.get(b, f"unknown reason 0x{b:x}") for b in bits]


def slowdown(mask: int) -> int:
    """The bits of ``mask`` that hold the clock down (everything but idle and user clocks)."""
    return mask & ~BENIGN

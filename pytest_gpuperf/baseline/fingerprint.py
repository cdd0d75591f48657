"""The environment fingerprint: which runs may be compared with each other.

Only *hard* keys, whose change alone moves timings by more than the gate's threshold,
refuse a comparison. The rest of the environment is kept for the record: the GPU's UUID
and the host name stay soft, so that a pool of identical runners shares one baseline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Hard keys of GPU runs, in the order differences are listed, with their names there.
GPU_KEYS: dict[str, str] = {
    "device": "device",
    "gpu_name": "GPU",
    "compute_capability": "compute capability",
    "sm_count": "SM count",
    "gpu_memory_bytes": "GPU memory",
    "driver": "driver",
    "cuda_runtime": "CUDA",
    "torch": "torch",
    "triton": "triton",
}
#: Hard keys of CPU runs, likewise.
CPU_KEYS: dict[str, str] = {
    "device": "device",
    "cpu_model": "CPU",
    "machine": "architecture",
    "torch_threads": "torch threads",
    "python": "Python",
    "torch": "torch",
}
#: How a key is named in :func:`differences`; every built-in key (``extra`` may not reuse one).
LABELS = GPU_KEYS | CPU_KEYS
BUILTIN_KEYS: frozenset[str] = frozenset(LABELS)
_ORDER = {k: i for i, k in enumerate(LABELS)}

Scalar = str | int | float | bool | None


def fingerprint(env: Mapping[str, Any], extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The hard keys of ``env`` (missing ones as None), plus ``extra``: JSON scalars that
    must not reuse a built-in key (a hook cannot loosen the built-in keys)."""
    device = env.get("device") or ("cuda" if env.get("gpu_name") else "cpu")
    keys = GPU_KEYS if device == "cuda" else CPU_KEYS
    fp: dict[str, Any] = {}
    for key in keys:
        value = device if key == "device" else env.get(key)
        if key == "python" and isinstance(value, str):
            value = ".".join(value.split(".")[:2])
        fp[key] = _scalar(key, value)
    for key, value in (extra or {}).items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"fingerprint extra keys must be non-empty strings, got {key!r}")
        if key in BUILTIN_KEYS:
            raise ValueError(
                f"fingerprint extra key {key!r} is a built-in fingerprint key; "
                "use another name (built-in keys cannot be overridden)"
            )
        fp[key] = _scalar(key, value)
    return fp


def _scalar(key: str, value: Any) -> Scalar:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        # JSON has no NaN; an integral float stays a float so that the hash is stable.
        return value if value == value and abs(value) != float("inf") else None
    raise TypeError(
        f"fingerprint value of {key!r} must be a string, number, boolean or None, "
        f"got {type(value).__name__} {value!r}"
    )


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """What differs from fingerprint ``a`` (the baseline's) to ``b`` (this run's), one line
    per key, built-in keys first: ``"driver 580.159.04 -> 575.57.08"``."""
    keys = sorted(set(a) | set(b), key=lambda k: (_ORDER.get(k, len(_ORDER)), k))
    out = []
    for key in keys:
        va, vb = a.get(key, _ABSENT), b.get(key, _ABSENT)
        if va == vb and type(va) is type(vb):
            continue
        fa, fb = _show(va, key), _show(vb, key)
        if fa == fb:  # rounding made them look alike: show them exactly
            fa, fb = _show(va), _show(vb)
        out.append(f"{LABELS.get(key, key)} {fa} -> {fb}")
    return out


_ABSENT: Any = object()


def _show(value: Any, key: str = "") -> str:
    """``value`` in a difference; GPU memory (``key``) rounded to GiB."""
    if value is _ABSENT:
        return "(not recorded)"
    if value is None:
        return "(unknown)"
    if isinstance(value, bool):
        return str(value).lower()
    if key == "gpu_memory_bytes" and isinstance(value, int):
        return f"{value / 2**30:.1f} GiB"
    return str(value)

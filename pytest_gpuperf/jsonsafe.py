"""JSON-safe builtins: what a result, a verdict and an export become before they travel
(pure Python, importing nothing of the package)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def json_safe(obj: Any) -> Any:
    """Plain JSON builtins, recursively: NaN/inf become None, subclasses (torch's
    ``TorchVersion`` is a str, numpy scalars) their base type, so that the dict
    survives xdist's channel and ``json.dumps``."""
    if obj is None or type(obj) in (bool, int, str):
        return obj
    if isinstance(obj, float):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        return json_safe(obj.item())
    return str(obj)

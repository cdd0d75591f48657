"""Every result as a CSV row, for spreadsheets and pandas (``--gpuperf-csv``, ``export``).

Times in seconds, memory in bytes, the change a ratio; an empty cell is unknown. Each test
parameter gets a column (``param:shape``), so a sweep pivots directly.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting import verdicts as v
from pytest_gpuperf.reporting.columns import added_columns

#: The fixed columns, in order; the ``param:NAME`` columns follow ``params``, and the
#: declared columns beyond these (``reporting/columns.py:added_columns``) come last.
COLUMNS: tuple[str, ...] = (
    "benchmark",
    "key",
    "nodeid",
    "name",
    "mode",
    "device",
    "device_name",
    "params",
    "median_s",
    "mean_s",
    "min_s",
    "max_s",
    "q1_s",
    "q3_s",
    "spread",
    "ci_low_s",
    "ci_high_s",
    "rounds",
    "calls_per_round",
    "first_call_s",
    "peak_memory_bytes",
    "tflops",
    "gbps",
    "stability",
    "flags",
    "verdict",
    "change",
    "ratio",
    "ratio_low",
    "ratio_high",
    "baseline_s",
    "run_id",
)


#: the statistics of the rounds, each a ``<name>_s`` column
_STATS = ("median", "mean", "min", "max", "q1", "q3", "ci_low", "ci_high")


def _num(x: Any) -> Any:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return ""
    if isinstance(x, float) and not math.isfinite(x):
        return ""
    return repr(x) if isinstance(x, float) else x


#: What makes a spreadsheet read a cell as a formula (CSV injection), when it is not a number.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def cell(x: Any) -> Any:
    """``x``, with a text that a spreadsheet would run as a formula (``=HYPERLINK(...)``,
    ``+1+1``, ``@SUM(A1)``) made plain text by a leading ``'``; numbers (``-2.5``) stay."""
    if not isinstance(x, str) or not x.startswith(_FORMULA_STARTS):
        return x
    try:
        float(x)
    except ValueError:
        return "'" + x
    return x


def row(r: Result) -> dict[str, Any]:
    s = r.run.summary
    measured = bool(r.run.rounds)
    c = r.comparison
    shown = None if c is None else c.shown
    out: dict[str, Any] = {
        "benchmark": r.id.display,
        "key": r.id.key,
        "nodeid": r.id.nodeid,
        "name": r.id.name or "",
        "mode": r.id.mode,
        "device": r.run.device,
        "device_name": r.run.device_name or "",
        "params": ", ".join(f"{k}={x}" for k, x in r.id.params),
        **{f"{k}_s": _num(getattr(s, k)) if measured else "" for k in _STATS},
        "spread": _num(s.rel_iqr) if measured else "",
        "rounds": s.n,
        "calls_per_round": r.run.calls_per_round,
        "first_call_s": _num(r.run.first_call_s),
        "peak_memory_bytes": _num(r.run.peak_memory_bytes),
        "tflops": _num(r.run.tflops),
        "gbps": _num(r.run.gbps),
        "stability": r.run.stability,
        "flags": " | ".join(r.notes),
        "verdict": v.kind_of(r),
        "change": v.row(r).change if c is not None else "",
        "ratio": _num(c.ratio if c is not None else None),
        "ratio_low": _num(shown.ratio_low if shown is not None else None),
        "ratio_high": _num(shown.ratio_high if shown is not None else None),
        "baseline_s": _num(c.baseline_s if c is not None else None),
        "run_id": r.run.run_id or "",
    }
    for k, x in r.id.params:
        out[f"param:{k}"] = x
    for col in added_columns():  # the declared columns beyond these (reporting/columns.py)
        x = col.raw(r)
        out[col.key] = _num(x) if isinstance(x, (int, float)) else _text(x)
    return {k: cell(x) for k, x in out.items()}


def _text(x: Any) -> str:
    return "" if x is None else str(x)


def render(results: Sequence[Result], *, sort: str = "collection") -> str:
    """The CSV text (a header row, then one row per result; ``sort`` as ``--gpuperf-sort``)."""
    from pytest_gpuperf.reporting.terminal import sort_results

    rows = [row(r) for r in sort_results(results, sort)]
    params = list(dict.fromkeys(k for r in results for k, _ in r.id.params))
    fields = list(COLUMNS)
    at = fields.index("params") + 1
    fields[at:at] = [f"param:{k}" for k in params]
    fields += [c.key for c in added_columns() if c.key not in fields]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n", restval="")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()

"""Every result as a CSV row (``--gpuperf-csv``, ``export``): times in seconds, memory in
bytes, the change a ratio, an empty cell unknown; each test parameter a column
(``param:shape``), so a sweep pivots directly."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from typing import Any

from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting import verdicts as v
from pytest_gpuperf.reporting.columns import added_columns, summary_stat
from pytest_gpuperf.reporting.terminal import sort_results


def _shown(r: Result) -> Any:
    return None if r.comparison is None else r.comparison.shown


#: The fixed columns, in order, each with its value of a result; the ``param:NAME`` columns
#: follow ``params``, and the declared columns beyond these
#: (``reporting/columns.py:added_columns``) come last.
FIELDS: dict[str, Callable[[Result], Any]] = {
    "benchmark": lambda r: r.id.display,
    "key": lambda r: r.id.key,
    "nodeid": lambda r: r.id.nodeid,
    "name": lambda r: r.id.name,
    "mode": lambda r: r.id.mode,
    "device": lambda r: r.run.device,
    "device_name": lambda r: r.run.device_name,
    "params": lambda r: ", ".join(f"{k}={x}" for k, x in r.id.params),
    **{f"{k}_s": summary_stat(k) for k in ("median", "mean", "min", "max", "q1", "q3")},
    "spread": summary_stat("rel_iqr"),
    **{f"{k}_s": summary_stat(k) for k in ("ci_low", "ci_high")},
    "rounds": lambda r: r.run.summary.n,
    "calls_per_round": lambda r: r.run.calls_per_round,
    "first_call_s": lambda r: r.run.first_call_s,
    "peak_memory_bytes": lambda r: r.run.peak_memory_bytes,
    "tflops": lambda r: r.run.tflops,
    "gbps": lambda r: r.run.gbps,
    "stability": lambda r: r.run.stability,
    "flags": lambda r: " | ".join(r.notes),
    "verdict": v.kind_of,
    "change": lambda r: None if r.comparison is None else v.row(r).change,
    "ratio": lambda r: None if r.comparison is None else r.comparison.ratio,
    "ratio_low": lambda r: None if _shown(r) is None else _shown(r).ratio_low,
    "ratio_high": lambda r: None if _shown(r) is None else _shown(r).ratio_high,
    "baseline_s": lambda r: None if r.comparison is None else r.comparison.baseline_s,
    "run_id": lambda r: r.run.run_id,
}


def _value(x: Any) -> Any:
    """A number as Python reads it back exactly, a text as it is; ``""`` for unknown."""
    if isinstance(x, bool) or (isinstance(x, float) and not math.isfinite(x)):
        return ""
    if isinstance(x, (int, float)):
        return repr(x) if isinstance(x, float) else x
    return "" if x is None else str(x)


#: What makes a spreadsheet read a cell as a formula (CSV injection), when it is not a number.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def cell(x: Any) -> Any:
    """``x``, a text a spreadsheet would run as a formula (``=HYPERLINK(...)``) made plain."""
    if not isinstance(x, str) or not x.startswith(_FORMULA_STARTS):
        return x
    try:
        float(x)
    except ValueError:
        return "'" + x
    return x


def row(r: Result) -> dict[str, Any]:
    out = {k: value(r) for k, value in FIELDS.items()}
    out.update((f"param:{k}", x) for k, x in r.id.params)
    out.update((col.key, col.raw(r)) for col in added_columns())  # reporting/columns.py
    return {k: cell(_value(x)) for k, x in out.items()}


def render(results: Sequence[Result], *, sort: str = "collection") -> str:
    """The CSV text (a header row, then one row per result; ``sort`` as ``--gpuperf-sort``)."""
    rows = [row(r) for r in sort_results(results, sort)]
    params = list(dict.fromkeys(k for r in results for k, _ in r.id.params))
    fields = list(FIELDS)
    at = fields.index("params") + 1
    fields[at:at] = [f"param:{k}" for k in params]
    fields += [c.key for c in added_columns() if c.key not in fields]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n", restval="")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()

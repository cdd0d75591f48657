"""The terminal summary: one table of every benchmark, then the flags with their remedies."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_gpuperf.model import MODE_EVENTS, MODE_GRAPH, Result
from pytest_gpuperf.reporting.units import fmt_bytes, fmt_pct, fmt_rate, fmt_time

HEADERS = [
    "benchmark",
    "params",
    "mode",
    "median",
    "spread",
    "95% CI",
    "rounds",
    "first call",
    "memory",
    "throughput",
    "flag",
]


def _params(r: Result) -> str:
    return ", ".join(f"{k}={v}" for k, v in r.id.params) or "-"


def _flag(r: Result) -> str:
    flags = []
    if r.unstable:
        flags.append("UNSTABLE")
    elif r.stability == "warmup-capped":
        flags.append("warm-up capped")
    if any(n.startswith("noisy") for n in r.notes):
        flags.append("NOISY")
    return ", ".join(flags)


def launch_overhead(results: Sequence[Result]) -> list[tuple[Result, Result, float]]:
    """Pairs of (events, graph) results of one measurement, with the launch-overhead share."""
    by_key: dict[tuple[str, str | None], dict[str, Result]] = {}
    for r in results:
        by_key.setdefault((r.id.nodeid, r.id.name), {})[r.id.mode] = r
    out = []
    for modes in by_key.values():
        ev, gr = modes.get(MODE_EVENTS), modes.get(MODE_GRAPH)
        if ev and gr and ev.median > 0:
            out.append((ev, gr, max(0.0, (ev.median - gr.median) / ev.median)))
    return out


def render_table(results: Sequence[Result]) -> str:
    from tabulate import tabulate

    rows = []
    for r in results:
        s = r.summary
        rows.append(
            [
                r.id.display,
                _params(r),
                r.id.mode,
                fmt_time(s.median),
                fmt_pct(s.rel_iqr),
                "±" + fmt_pct(s.rel_ci),
                f"{s.n}x{r.calls_per_round}",
                fmt_time(r.first_call_s),
                fmt_bytes(r.peak_memory_bytes),
                fmt_rate(r.tflops, r.gbps),
                _flag(r),
            ]
        )
    return tabulate(rows, headers=HEADERS, tablefmt="simple", disable_numparse=True)


def render(results: Sequence[Result], verbose: bool = False) -> str:
    """The whole summary section: table, launch overhead, then flags and remedies."""
    lines = [render_table(results), ""]
    lines.append(
        "median: per-call time of the steady state; spread: IQR of the rounds over the median; "
        "95% CI: of the median; rounds: rounds x calls per round"
    )
    overhead = launch_overhead(results)
    if overhead:
        lines.append("")
        lines.append("launch overhead (CUDA events vs graph replay):")
        for ev, gr, share in overhead:
            lines.append(
                f"  {ev.id.display}: {fmt_pct(share)} of the eager time "
                f"(events {fmt_time(ev.median)}, graph {fmt_time(gr.median)})"
            )
    flagged = [r for r in results if r.notes]
    if flagged:
        lines.append("")
        lines.append("flags:")
        for r in flagged:
            for note in r.notes:
                lines.append(f"  {r.id.display} [{r.id.mode}]: {note}")
    return "\n".join(lines)

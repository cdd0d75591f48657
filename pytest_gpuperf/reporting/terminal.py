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


def verdict_cell(r: Result) -> str:
    """``+4.1 % REGRESSION``: the change against the baseline and the verdict, in one cell."""
    c = r.comparison
    if not c:
        return "-"
    kind = str(c.get("kind", "?"))
    label = kind.upper() if kind in ("regression", "inconclusive") else kind.replace("-", " ")
    ratio = c.get("ratio")
    if ratio is None or kind in ("no-baseline",):
        return label
    return f"{fmt_pct(ratio - 1, sign=True)} {label}"


def render_table(results: Sequence[Result]) -> str:
    from tabulate import tabulate

    with_verdict = any(r.comparison for r in results)
    headers = [*HEADERS, "vs baseline"] if with_verdict else HEADERS
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
            + ([verdict_cell(r)] if with_verdict else [])
        )
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


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
    judged = [r for r in results if r.comparison]
    if judged:
        from pytest_gpuperf.reporting.explain import summary_line
        from pytest_gpuperf.verdict import Comparison

        order = {"regression": 0, "inconclusive": 1, "different-environment": 2, "improvement": 3}
        notable = sorted(
            (r for r in judged if r.comparison and r.comparison.get("kind") in order),
            key=lambda r: order[str((r.comparison or {}).get("kind"))],
        )
        if notable:
            lines.append("")
            lines.append("verdicts:")
            for r in notable:
                c = Comparison.from_dict(r.comparison or {})
                lines.append(f"  [{r.id.mode}] {summary_line(c)}")
        quiet = len(judged) - len(notable)
        if quiet:
            lines.append(f"  ({quiet} other benchmark(s): no change or no baseline)")
    flagged = [r for r in results if r.notes]
    if flagged:
        lines.append("")
        lines.append("flags:")
        for r in flagged:
            for note in r.notes:
                lines.append(f"  {r.id.display} [{r.id.mode}]: {note}")
    return "\n".join(lines)

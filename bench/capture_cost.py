"""What a red run costs: the time from each verdict to its first diagnosis, and the rest.

Saves a small baseline of some zoo cases (``bench/zoo``), runs one session of their bad
variants at the plugin's defaults (capture on failure, the session's capture budget), and
prints, per regressed benchmark, how long after its verdict the first diagnosis (the
torch.profiler pass, with TORCH_TRACE for compiled code) was ready and where that time
went (the child's start-up, its brief re-measurement, the profiled window, reading the
trace), what Nsight Systems and Nsight Compute added, and the diagnosis' first sentences;
for the session, its wall time, the capture's seconds, its plain time (wall minus capture)
and whether it ended within 2x its plain time plus the capture budget. A benchmark left
over by the budget has its command run once, to show that it captures.

    python3 bench/capture_cost.py --out /tmp/capcost                       # CPU or GPU
    python3 bench/capture_cost.py --out /tmp/capcost --cases python_loop_adds,h2d_pageable
    python3 bench/capture_cost.py --report /tmp/capcost/session.json      # figures only
    python3 bench/capture_cost.py --out /tmp/capcost --always              # every case captured

Arguments after ``--`` go to the session's pytest (e.g. ``--gpuperf-capture-session-budget=90``).
The saves: ``--saves`` runs (default 2), the first with its kernel inventory, the others
with ``--gpuperf-inventory=never``: the inventory is a profiler pass after each measurement,
for the kernel diff, and one run's serves (the baseline's inventory is combined from the
runs that have one); it changes nothing that is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ZOO = HERE / "zoo"
#: Cases that run on the CPU and slow down there too, of different kinds: a loop of small
#: ops, host-side work per call, a per-parameter optimizer, extra copies, a graph break in
#: a compiled loop (TORCH_TRACE), recompiles to the limit (TORCH_TRACE).
CPU_CASES = (
    "python_loop_adds",
    "rotary_host_rebuild",
    "optimizer_foreach_off",
    "contiguous_heads",
    "graph_break_in_loop",
    "recompile_on_float",
)
#: The GPU's seven of bench/gpu/part-capture.sh: a host sync, a graph break (compiled code:
#: TORCH_TRACE), a dtype change, a precision change, an SDPA kernel change, an H2D copy, a
#: Python loop of launches. Not recompile_on_float: its bad variant compiles 8 graphs from a
#: cold cache in the session, seconds the part's 180 s cannot spare.
GPU_CASES = (
    "decode_item_sync",
    "graph_break_in_loop",
    "autocast_dropped",
    "tf32_off",
    "sdpa_mask_fallback",
    "h2d_pageable",
    "python_loop_adds",
)


def pytest_run(
    out: Path, tag: str, cases: Sequence[str], args: Sequence[str], bad: bool
) -> dict[str, Any]:
    """One fresh pytest process of the selected zoo cases, run from the zoo's folder."""
    js = out / f"{tag}.json"
    env = dict(os.environ, GPUPERF_ZOO=f"bad:{','.join(cases)}" if bad else "")
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [
        sys.executable, "-m", "pytest", "test_zoo.py", "-p", "no:cacheprovider",
        "-k", " or ".join(cases), f"--gpuperf-json={js}",
        f"--gpuperf-baseline-dir={out / 'baselines'}",
        f"--gpuperf-artifacts-dir={out / 'artifacts'}", *args,
    ]  # fmt: skip
    print(f"$ cd {ZOO} && {'GPUPERF_ZOO=' + env['GPUPERF_ZOO'] + ' ' if bad else ''}"
          f"{shlex.join(cmd[2:])}", flush=True)  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ZOO, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    (out / f"{tag}.log").write_text(proc.stdout + proc.stderr)
    print(
        f"  {tag}: exit {proc.returncode} in {wall:.1f} s ({proc.stdout.strip().splitlines()[-1:]})"
    )
    meta = {"tag": tag, "rc": proc.returncode, "wall_s": wall, "command": cmd, "bad": bad}
    (out / f"{tag}.meta").write_text(json.dumps(meta))
    return meta


def manifest_of(result: Mapping[str, Any], base: Path) -> dict[str, Any] | None:
    """The capture manifest of a result: where the session wrote it, else under ``base``
    (a session's folder copied from the GPU machine: its paths are of that machine)."""
    for a in result.get("artifacts") or ():
        if a.get("collector") == "manifest" and a.get("files"):
            path = Path(a["files"][0])
            if not path.exists() and "/artifacts/" in str(path):
                path = base / "artifacts" / str(path).split("/artifacts/", 1)[1]
            try:
                doc: dict[str, Any] = json.loads(path.read_text())
                return doc
            except (OSError, ValueError):
                return None
    return None


def tool_figures(manifest: Mapping[str, Any] | None, key: str) -> dict[str, Any]:
    """Per tool: status and seconds, and the profiler child's phases for ``key``."""
    out: dict[str, Any] = {}
    for c in (manifest or {}).get("collectors") or ():
        s = c.get("summary") or {}
        entry = {"status": c.get("status"), "wall_s": c.get("wall_s"), "reason": c.get("reason")}
        if c.get("name") == "torch_profiler":
            entry["child_s"] = s.get("child_wall_s")
            entry["parse_s"] = s.get("parse_s")
            entry["phases"] = (s.get(key) or {}).get("timing") or {}
        elif isinstance(s.get("timing"), Mapping):
            entry["phases"] = s["timing"]
        out[str(c.get("name"))] = entry
    return out


def first_sentences(paragraph: str, n: int = 2, width: int = 220) -> str:
    parts = paragraph.split(". ")
    text = ". ".join(parts[:n]).rstrip(".") + "."
    return text if len(text) <= width else text[: width - 1] + "…"


def _fmt(x: float | None, unit: str = "s") -> str:
    return "-" if x is None else f"{x:.1f} {unit}"


def benchmark_rows(doc: Mapping[str, Any], base: Path) -> list[dict[str, Any]]:
    """One row per captured benchmark: its change, timings per tool, first sentences."""
    rows = []
    for r in doc.get("results") or ():
        c = r.get("comparison") or {}
        manifest = manifest_of(r, base)
        if manifest is None and not any(a.get("collector") for a in r.get("artifacts") or ()):
            continue
        key = f"{r['id']['nodeid']}@{r['id'].get('mode')}"
        key = next(
            (
                b
                for b in (manifest or {}).get("benchmarks") or ()
                if b.startswith(r["id"]["nodeid"])
            ),
            key,
        )
        timing = (manifest or {}).get("timing") or {}
        diag = (c.get("diagnosis") or {}).get("paragraph") or ""
        rows.append({
            "test": r["id"]["nodeid"].rsplit("::", 1)[-1],
            "kind": c.get("kind"),
            "ratio": c.get("ratio"),
            "figure": c.get("figure"),
            "first_s": timing.get("first_diagnosis_s"),
            "capture_s": (manifest or {}).get("wall_s"),
            "tools": tool_figures(manifest, key),
            "sentence": first_sentences(diag) if diag else "(no diagnosis)",
        })  # fmt: skip
    return rows


def _tool(tools: Mapping[str, Any], name: str) -> str:
    """A tool's seconds where it ran, else its status (skipped, deferred, ...)."""
    e = tools.get(name) or {}
    if e.get("status") in ("ok", "failed", "timeout"):
        return _fmt(e.get("wall_s"))
    return str(e.get("status") or "-")[:7]


def print_rows(rows: Sequence[Mapping[str, Any]]) -> None:
    print(
        f"{'benchmark':<32} {'change':>10} {'1st diag':>9} {'capture':>8} {'child':>7} {'start':>6} "
        f"{'test':>6} {'1st':>6} {'prof':>6} {'exit':>6} {'parse':>6} {'trace':>6} {'nsys':>7} "
        f"{'ncu':>7}"
    )
    for row in rows:
        t = row["tools"]
        prof = t.get("torch_profiler") or {}
        ph = prof.get("phases") or {}
        ratio = f"{row['ratio']:.3g}x" if isinstance(row["ratio"], (int, float)) else "-"
        child, spawned = prof.get("child_s"), ph.get("since_spawn_s")
        ended = child - spawned if child is not None and spawned is not None else None
        print(
            f"{row['test'][:32]:<32} {ratio:>10} {_fmt(row['first_s']):>9} "
            f"{_fmt(row['capture_s']):>8} "
            f"{_fmt(prof.get('child_s')):>7} {_fmt(ph.get('startup_s')):>6} "
            f"{_fmt(ph.get('test_s')):>6} {_fmt(ph.get('first_call_s')):>6} "
            f"{_fmt(ph.get('hook_s')):>6} {_fmt(ended):>6} "
            f"{_fmt(prof.get('parse_s')):>6} {_tool(t, 'torch_trace'):>6} "
            f"{_tool(t, 'nsys'):>7} {_tool(t, 'ncu'):>7}"
        )
    print(
        "columns: 1st diag = seconds from the verdict to the first diagnosis; capture = the "
        "test's whole capture (all its passes); child = the "
        "profiler's fresh process, of which start = its start-up, collection and the test's "
        "set-up up to gpu_bench (a compiled test's torch.compile imports), test = the device "
        "lock, the first call (1st) and the brief re-measurement, prof = warm-up calls, profiled window and the "
        "trace written, exit = from then to the process's end; parse = reading the trace "
        "here; trace, nsys, ncu = each tool's seconds (or its status)"
    )
    for row in rows:
        print(f"  {row['test']}: {row['sentence']}")


def session_figures(doc: Mapping[str, Any], wall_s: float | None) -> list[str]:
    """The session's figures: wall, capture, plain time, the 2x-plain-plus-budget check."""
    s = doc.get("session") or {}
    cap = s.get("capture") or {}
    duration = float(wall_s if wall_s is not None else s.get("duration_s") or 0.0)
    spent = float(cap.get("spent_s") or 0.0)
    budget = float(cap.get("budget_s") or 0.0)
    plain = duration - spent
    firsts = [t["first_diagnosis_s"] for t in cap.get("tests") or () if t.get("first_diagnosis_s")]
    inline = {
        e["nodeid"]
        for e in cap.get("passes") or ()
        if e.get("phase") == 1 and "torch_profiler" in (e.get("tools") or {})
    }
    at_verdict = [
        t["first_diagnosis_s"]
        for t in cap.get("tests") or ()
        if t.get("first_diagnosis_s") and t["nodeid"] in inline
    ]
    kinds: dict[str, int] = {}
    for r in doc.get("results") or ():
        kind = str((r.get("comparison") or {}).get("kind") or "none")
        kinds[kind] = kinds.get(kind, 0) + 1
    lines = [
        "verdicts: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())),
        f"session: {duration:.1f} s wall, capture {spent:.1f} s of a {budget:g} s budget, plain "
        f"time (wall minus capture) {plain:.1f} s; within 2x plain + budget "
        f"({2 * plain + budget:.0f} s): {'yes' if duration <= 2 * plain + budget else 'NO'}",
    ]
    if firsts:
        lines.append(
            f"first diagnosis after the verdict: median {statistics.median(firsts):.1f} s, "
            f"max {max(firsts):.1f} s, over {len(firsts)} regressed test(s)"
        )
    # The session's first capture runs in the spare started at the session's start (on 4+
    # cores; imports only, its profile pays the profiler's start), else cold; the others run
    # in a spare Python started during the capture before
    profiled = [e for e in cap.get("passes") or () if "torch_profiler" in (e.get("tools") or {})]
    warm = {e["nodeid"] for e in profiled[1:]} - {profiled[0]["nodeid"]} if profiled else set()
    spare = [t["first_diagnosis_s"] for t in cap.get("tests") or ()
             if t.get("first_diagnosis_s") and t["nodeid"] in warm]  # fmt: skip
    if profiled and firsts:
        lines.append(
            f"  the first capture (the session's spare, or cold under 4 cores): {profiled[0]['nodeid'].rsplit('::', 1)[-1]}"
            + (f"; the others, in a spare Python: median {statistics.median(spare):.1f} s, max "
               f"{max(spare):.1f} s" if spare else "")
        )  # fmt: skip
    if at_verdict and len(at_verdict) < len(firsts):
        lines.append(
            f"  of which made at the verdict: {len(at_verdict)}, median "
            f"{statistics.median(at_verdict):.1f} s, max {max(at_verdict):.1f} s; the other "
            f"{len(firsts) - len(at_verdict)} waited for the pass after the last verdict (the "
            "first diagnoses' half of the budget was spent)"
        )
    # A first diagnosis that failed is not in the median above: say so, loudly (on the H200
    # six of seven once failed in under a second and the median was taken over one).
    failed = [
        str(t.get("nodeid", "?")).rsplit("::", 1)[-1]
        for t in cap.get("tests") or ()
        if (t.get("tools") or {}).get("torch_profiler", {}).get("status") == "failed"
    ]
    if failed:
        lines.append(
            f"FIRST DIAGNOSIS FAILED for {len(failed)} of {len(cap.get('tests') or ())} "
            f"regressed test(s): {', '.join(failed)} (each one's torch_profiler/child.log says why)"
        )
    for name in ("nsys", "ncu"):
        walls = [
            float((t.get("tools") or {}).get(name, {}).get("wall_s") or 0.0)
            for t in cap.get("tests") or ()
            if (t.get("tools") or {}).get(name, {}).get("status") == "ok"
        ]
        if walls:
            lines.append(f"{name} per benchmark: median {statistics.median(walls):.1f} s, max "
                         f"{max(walls):.1f} s, over {len(walls)}")  # fmt: skip
    later = [
        float(e.get("wall_s") or 0.0)
        for e in cap.get("passes") or ()
        if e.get("phase") == 2 and set(e.get("tools") or ()) & {"nsys", "ncu"}
    ]
    if later:
        lines.append(
            f"Nsight pass per benchmark after the verdicts (nsys, then ncu while nsys's report "
            f"is read): median {statistics.median(later):.1f} s, max {max(later):.1f} s, "
            f"over {len(later)}"
        )
    for lo in cap.get("left_over") or ():
        lines.append(f"left over: {lo['nodeid']} ({', '.join(lo['tools'])}): {lo['command']}")
    return lines


def check_leftover(
    doc: Mapping[str, Any], out: Path, cases: Sequence[str], timeout_s: float = 600.0
) -> list[str]:
    """Run the first leftover's command, where the session ran, and say what it captured."""
    from pytest_gpuperf.artifacts.collectors.process import run_process

    left = ((doc.get("session") or {}).get("capture") or {}).get("left_over") or []
    if not left:
        return ["no benchmark was left over: no leftover command to check"]
    command = left[0]["command"]
    env = dict(os.environ, GPUPERF_ZOO=f"bad:{','.join(cases)}")
    env.pop("PYTEST_ADDOPTS", None)
    args = shlex.split(command)
    run = run_process([sys.executable, *args[1:]], timeout_s=timeout_s, env=env, cwd=ZOO,
                      log_path=out / "leftover.log")  # fmt: skip
    captured = [
        ln.strip()
        for ln in run.output.splitlines()
        if ln.strip().startswith(("torch_profiler: ", "torch_trace: ", "nsys: ", "ncu: "))
    ]
    return [
        f"leftover command: {command}",
        f"  ran in {run.wall_s:.1f} s, exit {run.returncode}"
        + (" (killed at the part's time limit)" if run.timed_out else "")
        + "; it captured: "
        + ("; ".join(captured[:4]) if captured else "nothing (see leftover.log)"),
    ]


def report(path: Path, wall_s: float | None = None) -> list[str]:
    doc = json.loads(path.read_text())
    rows = benchmark_rows(doc, path.parent)
    print_rows(rows)
    lines = session_figures(doc, wall_s)
    for line in lines:
        print(line)
    return lines


def session_budget(deadline: float | None, verdicts_s: float, margin_s: float) -> float | None:
    """The session's capture budget that ends the script by ``deadline`` (None: the default),
    after ``verdicts_s`` for the session's own measuring and ``margin_s`` to spare."""
    if deadline is None:
        return None
    return max(30.0, deadline - time.time() - verdicts_s - margin_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("/tmp/gpuperf-capture-cost"))
    ap.add_argument("--cases", help="zoo cases, comma-separated (default: by device)")
    ap.add_argument("--saves", type=int, default=2)
    ap.add_argument("--report", type=Path, help="only print the figures of this session JSON")
    ap.add_argument("--no-leftover-check", action="store_true")
    ap.add_argument("--always", action="store_true", help="capture every case, whatever its "
                    "verdict (--gpuperf-capture=always): the capture's cost per case where the "
                    "verdicts of a loaded CPU vary")  # fmt: skip
    ap.add_argument("--deadline", type=float, help="epoch seconds by which to end: the "
                    "session's capture budget is cut to fit (a time-boxed GPU part)")  # fmt: skip
    ap.add_argument("--verdicts-s", type=float, default=45.0, help="with --deadline: what the "
                    "session's measuring and confirmations are expected to take")  # fmt: skip
    ap.add_argument("--margin-s", type=float, default=20.0)
    args, extra = ap.parse_known_args()
    extra = [a for a in extra if a != "--"]
    if args.report:
        report(args.report)
        return
    import torch

    cases = (args.cases.split(",") if args.cases else
             list(GPU_CASES if torch.cuda.is_available() else CPU_CASES))  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"capture cost: {len(cases)} zoo cases ({', '.join(cases)}), torch {torch.__version__}, "
          f"{'CUDA ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'CPU'}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")  # fmt: skip
    for i in range(1, args.saves + 1):
        later = ["--gpuperf-inventory=never"] if i > 1 else []
        meta = pytest_run(args.out, f"save-{i}", cases, ["--gpuperf-save=capcost", *later], False)
        if meta["rc"] != 0:
            sys.exit(f"save {i} failed (exit {meta['rc']}): see {args.out}/save-{i}.log")
    if args.always:
        extra.append("--gpuperf-capture=always")
    budget = session_budget(args.deadline, args.verdicts_s, args.margin_s)
    if budget is not None and not any("capture-session-budget" in a for a in extra):
        extra.append(f"--gpuperf-capture-session-budget={budget:.0f}")
        print(f"the session's capture budget is cut to {budget:.0f} s (the default 180 s would "
              "not end by the deadline); every other setting is the default")  # fmt: skip
    meta = pytest_run(args.out, "session", cases, ["--gpuperf-baseline=capcost", *extra], True)
    report(args.out / "session.json", meta["wall_s"])
    left = None if args.deadline is None else args.deadline - time.time()
    if args.no_leftover_check or (left is not None and left < 40):
        print("leftover command: not run" + (f" ({left:.0f} s left)" if left is not None else ""))
        return
    doc = json.loads((args.out / "session.json").read_text())
    for line in check_leftover(doc, args.out, cases, (left or 605.0) - 5.0):
        print(line)


if __name__ == "__main__":
    main()

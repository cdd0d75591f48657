"""The nsys, ncu and TORCH_TRACE collectors end to end, with stand-ins for the tools.

The stand-ins behave like the real command lines the collectors run (they
run the child pytest they are given and write the report files), and answer
``stats`` / ``analyze`` / ``--import`` with what the real tools wrote on the
H200 (tests/data/artifacts/). The child runs on the CPU.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest

from pytest_gpuperf.artifacts import OK, CaptureContext
from pytest_gpuperf.artifacts.collectors.ncu import NcuCollector
from pytest_gpuperf.artifacts.collectors.nsys import NsysCollector
from pytest_gpuperf.artifacts.collectors.torch_trace import TorchTraceCollector
from tests.child_runner import standalone_runner

DATA = Path(__file__).parent.parent / "data" / "artifacts"

FAKE_NSYS = f"""#!{sys.executable}
import shutil, subprocess, sys
from pathlib import Path
data = Path({str(DATA)!r})
args = sys.argv[1:]
if args[0] == "profile":
    out = args[args.index("-o") + 1]
    app = args[args.index("-f") + 2:]
    code = subprocess.call(app)
    Path(out + ".nsys-rep").write_bytes(b"fake")
    sys.exit(code)
base = args[args.index("-o") + 1]
if args[0] == "stats":
    for r in args[args.index("-r") + 1].split(","):
        shutil.copy(data / f"nsys_st_{{r}}.csv", f"{{base}}_{{r}}.csv")
elif args[0] == "analyze":
    for r in ("cuda_api_sync", "cuda_memcpy_async", "gpu_time_util"):
        shutil.copy(data / f"nsys_an_{{r}}.csv", f"{{base}}_{{r}}.csv")
    Path(f"{{base}}_gpu_gaps.csv").write_text("")
"""

FAKE_NCU = f"""#!{sys.executable}
import subprocess, sys
from pathlib import Path
data = Path({str(DATA)!r})
args = sys.argv[1:]
if args[0] == "-i":
    page = args[args.index("--page") + 1]
    name = "ncu_raw_all_sections.csv" if page == "raw" else "ncu_details.csv"
    sys.stdout.write((data / name).read_text())
    sys.exit(0)
Path(args[args.index("-o") + 1] + ".ncu-rep").write_bytes(b"fake")
Path(args[args.index("-o") + 1] + ".args").write_text(" ".join(args))
sys.exit(subprocess.call(args[args.index("-f") + 1:]))
"""


def _tool(folder: Path, name: str, text: str) -> None:
    p = folder / name
    p.write_text(text)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, "nsys", FAKE_NSYS)
    _tool(bin_dir, "ncu", FAKE_NCU)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    root = tmp_path / "proj"
    root.mkdir()
    (root / "test_b.py").write_text(
        "import torch\n\ndef test_b(gpu_bench):\n    gpu_bench(torch.mul, torch.ones(100), 2.0)\n"
    )
    return root


def _ctx(root: Path, **state: object) -> CaptureContext:
    fast = ["--gpuperf-warmup-ms=20", "--gpuperf-min-warmup-ms=5", "--gpuperf-round-ms=1",
            "--gpuperf-rounds=5"]  # fmt: skip
    runner = standalone_runner("test_b.py::test_b", rootdir=root, device="cpu", args=fast)
    return CaptureContext(
        "test_b.py::test_b", root / "out", "cuda", ["test_b.py::test_b@cpu"],
        timeout_s=60, deadline=time.monotonic() + 120, run_child=runner, state=dict(state),
    )  # fmt: skip


def test_nsys_collector(project: Path) -> None:
    ctx = _ctx(project)
    res = NsysCollector().collect(ctx)
    assert res.status == OK, res.reason
    ctx.settle()  # its summaries ran beside what would come next; the capture waits for them
    names = {p.name for p in res.files}
    assert {"report.nsys-rep", "stats_cuda_gpu_kern_sum.csv", "analyze_cuda_api_sync.csv"} <= names
    assert res.summary["capture"].startswith("cudaProfilerApi window")
    assert any(s.startswith("cuda_api_sync: 3") for s in ctx.state["nsys_findings"])
    assert any(s.startswith("top kernels: nvjet_sm90") for s in ctx.state["nsys_findings"])
    log = (project / "out" / "nsys" / "profile.log").read_text()
    assert "--capture-range=cudaProfilerApi" in log and "--gpuperf-child" in log


def test_ncu_collector(project: Path) -> None:
    hot = [
        {"name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "kind": "kernel", "launches": 1.0,
         "us_per_call": 25.0, "grid": [66, 2, 1], "block": [384, 1, 1]},
        {"name": "triton_per_fused_add_gelu_native_layer_norm_0", "kind": "kernel", "launches": 1.0,
         "us_per_call": 3.0},
    ]  # fmt: skip
    ctx = _ctx(project, hotspots=hot, profiles={"k": {"inventory": {"kernels": hot}}})
    res = NcuCollector().collect(ctx)
    assert res.status == OK, res.reason
    args = (project / "out" / "ncu" / "report.args").read_text()
    assert (
        "-k regex:^(nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT|triton_per_fused_add_gelu_native_layer_norm_0)$"
        in args
    )
    assert "--launch-count 2" in args and "--nvtx-include gpuperf_capture/" in args
    found = ctx.state["ncu"]
    assert found["nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"]["bottleneck"] == "compute-bound"
    assert res.summary["lines"][0].startswith(
        "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT: compute-bound"
    )
    assert {p.name for p in res.files} >= {"report.ncu-rep", "raw.csv", "details.csv"}


def test_torch_trace_collector_without_a_log_says_why(project: Path) -> None:
    # the child does not compile anything, so TORCH_TRACE writes no log
    res = TorchTraceCollector().collect(_ctx(project, compiled=True))
    assert res.status == "failed" and "no TORCH_TRACE log written" in str(res.reason)


def test_torch_trace_collector_on_compiled_code(project: Path) -> None:
    # backend="eager": the graphs and graph breaks the collector reads are dynamo's; inductor's
    # code generation (seconds of C++ compiles on a CPU) would add nothing this test checks
    (project / "test_b.py").write_text(
        "import torch\n\n"
        "def f(x):\n"
        "    y = x * 2\n"
        "    torch._dynamo.graph_break()\n"
        "    return (y + 1).relu()\n\n"
        "def test_b(gpu_bench):\n"
        '    gpu_bench(torch.compile(f, backend="eager"), torch.ones(1000))\n'
    )
    ctx = _ctx(project, compiled=True, hotspots=[])
    res = TorchTraceCollector().collect(ctx)
    assert res.status == OK, res.reason
    comp = ctx.state["compile"]
    assert comp["graph_break_count"] == 1 and comp["graphs"] >= 2
    assert comp["graph_breaks"][0]["where"].endswith("test_b.py:5")
    tlparse = [p for p in res.files if p.name == "index.html"]
    assert tlparse or "tlparse" in res.summary or "tlparse_error" in res.summary
    assert any(p.suffix == ".log" for p in res.files)


def test_torch_trace_reads_the_log_of_the_profilers_child(tmp_path: Path) -> None:
    """The profiler's child ran with TORCH_TRACE: its log is read, no child of its own runs."""
    import shutil

    log_dir = tmp_path / "out" / "torch_trace" / "log"
    log_dir.mkdir(parents=True)
    shutil.copy(DATA / "torch_trace_cpu_graph_break_in_loop.log", log_dir / "rank_0.log")

    def no_child(**kw: object) -> None:
        raise AssertionError("the trace collector ran a child of its own")

    ctx = CaptureContext(
        "t.py::t", tmp_path / "out", "cpu", ["k"], run_child=no_child,
        state={"compiled": True, "torch_trace_log": str(log_dir)},
    )  # fmt: skip
    res = TorchTraceCollector().collect(ctx)
    assert res.status == OK, res.reason
    assert ctx.state["compile"]["frame_failures"][0]["skip_reason"] == "graph break in loop"
    assert [p.name for p in res.files if p.suffix == ".log"] == ["rank_0.log"]
    assert not (tmp_path / "out" / "torch_trace" / "child.log").exists()

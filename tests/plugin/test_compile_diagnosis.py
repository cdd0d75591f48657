"""Compiler regressions end to end on the CPU: the diagnosis names the compiler first.

A compiled function is saved as a baseline (with its inventory: one compiled
region per call), then broken the way people break it: a data-dependent
``.item()`` inside a loop (dynamo skips the whole frame, the function runs
eagerly), or a Python float that changes on every call under
``dynamic=False`` (recompiles until the recompile limit, then eager). The
capture reads the compile log of its profiler child (run under TORCH_TRACE)
because the *baseline* ran compiled code, although the current profile shows none. Time is virtual (the ``clock``
fixture), so the verdict does not depend on the machine; what the capture
finds is real torch.compile (Inductor's C++ backend).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import VIRTUAL_TIME_CONFTEST
from tests.plugin.test_baselines import run

BENCH = """
import os

import torch

PLANT = os.environ.get("GPUPERF_PLANT", "")


def chain(x):
    for _ in range(3):
        x = torch.sin(x) * 2
        if "loop_break" in PLANT and x.sum().item() > 1e9:
            x = x + 1
    return x


def scaled(x, scale):
    return torch.sin(x) * scale + 1


# a low recompile limit keeps the test fast: every process that runs the drifting case
# compiles up to it (the default is 8)
if hasattr(torch._dynamo.config, "recompile_limit"):
    torch._dynamo.config.recompile_limit = 3
else:  # torch before 2.7 names it cache_size_limit
    torch._dynamo.config.cache_size_limit = 3

compiled_chain = torch.compile(chain)
compiled_scaled = torch.compile(scaled, dynamic=False)


def test_loop(clock, gpu_bench):
    x = torch.randn(2048)
    slow = float(os.environ.get("SLOWDOWN", "1"))

    def call():
        clock.ns += int(400_000 * slow)
        return compiled_chain(x)

    gpu_bench(call)


def test_scale(clock, gpu_bench):
    x = torch.randn(2048)
    slow = float(os.environ.get("SLOWDOWN", "1"))
    state = {"scale": 1.0}

    def call():
        clock.ns += int(400_000 * slow)
        if "drift" in PLANT:
            state["scale"] += 0.001  # a new Python float each call: a new guard each time
        return compiled_scaled(x, state["scale"])

    gpu_bench(call)
"""


def _paragraph(pytester: pytest.Pytester, plant: str, test: str) -> tuple[str, dict]:
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)
    pytester.makepyfile(test_compiled=BENCH)
    # one saved run: a 10x slowdown is settled by one run of each side
    run(pytester, f"test_compiled.py::{test}", "--gpuperf-save=main",
        "--gpuperf-inventory=always").assert_outcomes(passed=1)  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUPERF_PLANT", plant)  # the failing run and its capture children see it
        result = run(
            pytester, f"test_compiled.py::{test}", "--gpuperf-baseline=main",
            "--gpuperf-capture=on-failure", "--gpuperf-capture-skip=nsys,ncu",
            "--gpuperf-json=o.json", slowdown=10.0,
        )  # fmt: skip
    result.assert_outcomes(failed=1)
    (res,) = json.loads((pytester.path / "o.json").read_text())["results"]
    diag = res["comparison"]["diagnosis"]
    assert diag["paragraph"][:60] in result.stdout.str()  # the failure message opens with it
    return diag["paragraph"], diag


def _likely(paragraph: str) -> str:
    """The cause as the first sentence names it, after the head's numbers and its share."""
    from pytest_gpuperf.artifacts.analysis.diagnose import lead

    # virtual time: the profiles do not measure the planted slowdown, so no share may be given
    assert re.search(r" per call\); likely cause(, \d+ % of [^:]+)?: ", paragraph), paragraph
    return lead(paragraph).split(". Also")[0]


def test_a_graph_break_in_a_loop_is_named_first_as_compiled_code_gone(
    pytester: pytest.Pytester,
) -> None:
    paragraph, diag = _paragraph(pytester, "loop_break", "test_loop")
    first = _likely(paragraph)
    assert diag["cause"] == "compiled-code-gone", paragraph
    assert first.startswith(
        "the compiled code is gone: the baseline ran 1 compiled region(s) per call"
    ), paragraph
    assert '"graph break in loop"' in first and "Tensor.item()" in first
    assert 'test_compiled.py:11: `if "loop_break" in PLANT and x.sum().item() > 1e9:`' in first
    # the capture took the compile log because the baseline ran compiled code
    (manifest,) = Path(pytester.path / ".gpuperf" / "artifacts").glob("*/*/manifest.json")
    doc = json.loads(manifest.read_text())
    trace = next(c for c in doc["collectors"] if c["name"] == "torch_trace")
    assert trace["status"] == "ok", trace
    assert trace["summary"]["why"].startswith("the compiled code is gone: the baseline ran 1")
    assert any(f.endswith(".log") for f in trace["files"])
    # the log is the profiler child's: one fresh process profiled the code and logged its
    # compile (from the Inductor caches as they were), no second child compiled it again
    assert not (manifest.parent / "torch_trace" / "child.log").exists()
    assert all(f.startswith("torch_trace/log/") for f in trace["files"] if f.endswith(".log"))
    print(paragraph)


def test_recompiles_to_the_limit_are_named_first_with_the_guard(
    pytester: pytest.Pytester,
) -> None:
    paragraph, diag = _paragraph(pytester, "drift", "test_scale")
    first = _likely(paragraph)
    assert diag["cause"] == "recompile", paragraph
    assert re.match(
        r"torch.compile recompiled `scaled` \d+ time\(s\) and hit the recompile "
        r"limit \(torch._dynamo.config.(recompile_limit|cache_size_limit) = \d+\)",
        first,
    ), paragraph
    assert "the guard that failed: `scale == 1.0" in first
    assert "test_compiled.py:17: `return torch.sin(x) * scale + 1`" in first
    print(paragraph)

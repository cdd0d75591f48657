"""Whether a tracer or profiler is active in this thread: its timings are not comparable.

coverage.py, a debugger, cProfile or a conftest's trace function make every Python line of
the benchmark pay for a callback, so host time runs several times slower. A run measured so
is compared only with runs measured the same way. Read at the start of each measurement, in
the thread that measures (trace functions are per thread).
"""

from __future__ import annotations

import sys
from typing import Any

#: sys.monitoring tool ids and what they are for (PEP 669; 3, 4 have no assigned use)
_MONITORING_IDS = {0: "debugger", 1: "coverage", 2: "profiler", 5: "optimizer"}


def _owner(hook: Any) -> str:
    """Who installed a trace or profile function: coverage.py, a debugger, cProfile, ..."""
    module = getattr(type(hook), "__module__", "") or ""
    if module in ("builtins", ""):  # a Python function or method: where it is defined
        module = getattr(hook, "__module__", "") or ""
    name = getattr(hook, "__qualname__", "") or type(hook).__name__
    if module.startswith("coverage"):
        return "coverage.py"
    if module.startswith(("pydevd", "_pydevd", "debugpy")):
        return "the debugger (pydevd)"
    if module in ("bdb", "pdb"):
        return "pdb"
    if module in ("cProfile", "_lsprof", "profile"):
        return "cProfile"
    return f"{module}.{name}" if module else name


def _monitoring_tools() -> list[str]:
    """sys.monitoring tools (Python 3.12+) that listen to events: coverage.py with
    COVERAGE_CORE=sysmon, debuggers and profilers built on PEP 669."""
    mon = getattr(sys, "monitoring", None)
    if mon is None:
        return []
    found = []
    for tool, use in _MONITORING_IDS.items():  # valid ids (0-5): neither call raises
        name = mon.get_tool(tool)
        if name and (mon.get_events(tool) or use == "coverage"):
            found.append(f"sys.monitoring {use} tool {name!r}")
    return found


def active_tracer() -> str | None:
    """Each tracer or profiler active in this thread (``"sys.settrace (coverage.py)"``), or None."""
    hooks = (("sys.settrace", sys.gettrace()), ("sys.setprofile", sys.getprofile()))
    found = [f"{name} ({_owner(hook)})" for name, hook in hooks if hook is not None]
    return "; ".join(found + _monitoring_tools()) or None


def tracer_note(tracer: str) -> str:
    """What a result says when it was measured under a tracer."""
    return (
        f"measured under a tracer ({tracer}): host time runs several times slower than "
        "without one, so these timings compare only with runs measured under the same tracer "
        "(a baseline saved without one gives 'not comparable')"
    )


def torch_profiler_active() -> str | None:
    """``"torch.profiler"`` while a torch (autograd) profiler records in this process."""
    torch = sys.modules.get("torch")  # a profiler that is on has torch imported already
    if torch is None:
        return None
    on = getattr(torch.autograd.profiler, "_is_profiler_enabled", False)
    return "torch.profiler" if on else None

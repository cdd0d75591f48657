"""Follow one benchmark through the package: which modules its path visits, in order.

Runs a one-benchmark pytest session in this process (CPU backend, a tiny workload) with a
profiler hook that sees every call into, and return from, a ``pytest_gpuperf`` module, and
prints three journeys (docs/architecture.md shows today's figures):

* **measure -> verdict -> saved run**: from the ``gpu_bench(...)`` call to the baseline
  written, in a session run with ``--gpuperf-baseline=main --gpuperf-save=main`` against a
  baseline saved first (under the same profiler, which slows the timed calls as much; its
  calls are not shown);
* **--gpuperf-baseline**: from ``pytest_configure`` (where the option is resolved) to the
  first benchmark, the baseline loaded and its gate ready;
* **save**: the call of ``shell/save.py:SavePlugin._save`` that appends the session's run
  to a baseline of one saved run, from its start to its return.

The first journey also counts the *shapes of the run*: the classes the value takes from the
loop to the rule (:data:`STAGES`), and any other class on its route that holds a copy of the
run's rounds.

Each journey also says how often it *returns to a module already left*: its stops less its
modules (a module entered once and left for good is one stop; every later stop in it is a
return).

Each journey is shown as a sequence of *stops* (a stop: one or more calls in a row in one
module; a run of 3 or more repeats of 2 to 4 stops, such as the measurement loop's rounds,
is written once with its count, ``[measure.engine -> measure.cpu] x40``, and counted in
full; "as read" counts it once, as a reader reads it: the full count follows the number of
warm-up rounds, which changes from run to run), with two figures:

* **all calls**: every call of the journey. Code without source to read is not a call
  here: the ``__init__`` that ``@dataclass`` generates (a dataclass built is one step of
  its caller) and a module body run at its import.
* **the route of the value**: only the calls that are handed the journey's value, or hand
  it back. The value of the first journey is what a timer's ``time_round`` returns, then
  the ``RawMeasurement``, the ``Run`` and the ``Result`` that holds it, the verdict's
  ``RunStat`` and ``Comparison``, and a new object that a call handed one of them returns,
  or each part of a tuple it returns (the judge's ``Verdict``, a run's line, a segment; not one
  of the call's arguments nor an attribute of one); that of the second is the option's value (the baseline's name), then
  what a call handed it returns (the loaded ``Baseline``) and the objects built with it
  (the gate and its judge). "Handed": an argument (``self``
  included), or an item of a list, tuple or dict argument, two levels deep. A figure read
  off the value and passed alone (``result.environment`` to the fingerprint, the rounds'
  floats to a quantile) is not followed: those modules are on the "all calls" line only.

Both figures leave out the helpers every path calls (``model`` value objects, ``errors``,
option parsing, the progress line, the per-device lock, telemetry and NVTX, which are off
or idle on the CPU, the descriptive statistics, the file helpers); they are listed apart,
and ``--all`` counts them as stops too. A *climb back up* is a call from a module into a
module of a higher ring (core < device adapters < pytest shell < command line), the caller
being the nearest ``pytest_gpuperf`` frame down the stack, when the callee is in the pytest
shell or already on the stack (it called down and is called back): a core loop calling a
closure of the fixture is one; a return to the shell is not, nor the core calling an
adapter object it was handed (a timer, an NVTX range: the way the rings are built). A
*callback* is a call into a module that is on the stack below its caller's, the caller being
in another module: a module called back, before its call returned, by one it called (a rule
handing another module a function of its own to call for each figure; a store handing its
reader a function to convert each run). A module going on with its own next step after a
call returned is a return, not a callback.

    python3 bench/journey.py            # both journeys, both figures
    python3 bench/journey.py --all      # helpers counted as stops too
    python3 bench/journey.py --calls    # and each call of the route, by function
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE = "pytest_gpuperf"
RING = {"shell": 3, "plugin": 3, "cli": 4, "demo": 4}
ADAPTERS = (
    "measure.cpu",
    "measure.cuda",
    "measure.memory",
    "measure.numerics",
    "measure.device",
    "measure.environment",
    "measure.nvtx_ranges",
    "telemetry.nvml",
    "telemetry.probe",
    "telemetry.header",
    "artifacts.collectors",
)
#: modules every path calls for small things: shown apart, not counted as stops
HELPERS = (
    "model",
    "errors",
    "values",
    "settings_fields",
    "shell.progress",
    "shell.locks",
    "shell.config",
    "shell.settings",
    "shell.markers",
    "shell.options",
    "measure.summary",
    "measure.nvtx_ranges",
    "telemetry",
    "units",
    "baseline.fileio",
    "baseline.filelock",
)
SCALARS = (bool, int, float, complex, bytes, type(None))

BENCH = """
import torch

def test_add(gpu_bench):
    x = torch.ones(64)
    gpu_bench(torch.add, x, x)
"""


def ring(mod: str) -> int:
    top = mod.split(".")[0]
    if top in RING:
        return RING[top]
    if mod.startswith("artifacts") and not mod.startswith("artifacts.analysis"):
        return 2
    return 2 if mod.startswith(ADAPTERS) else 1


def is_helper(mod: str) -> bool:
    return mod.startswith(HELPERS)


@dataclass
class Call:
    module: str
    function: str
    #: its caller is a module of a lower ring
    up: bool
    #: handed the value, or handed it back
    route: bool = False
    #: its module is on the stack below its caller's: a module called back by one it called
    back: bool = False


@dataclass
class Value:
    """What the route follows: instances of ``types``, what a function named in
    ``returned_by`` returns, strings equal to ``text``, what a call handed the value
    returns (``kept``), and the objects built with it (``holders``: an object whose
    ``__init__`` is handed the value; not one built with a holder)."""

    types: tuple[type, ...] = ()
    returned_by: tuple[str, ...] = ()
    text: str | None = None
    kept: dict[int, Any] = field(default_factory=dict)
    holders: dict[int, Any] = field(default_factory=dict)
    #: the classes the value was seen as (not a builtin container), in the order first
    #: seen, each with its first instance
    seen: dict[str, Any] = field(default_factory=dict)

    def holds(self, x: Any, *, holders: bool = True, depth: int = 2) -> bool:
        """Whether ``x`` is the value (or, with ``holders``, holds it): itself (a string only
        as itself, not inside another object), or a list, tuple or dict with it among its
        items (two levels deep)."""
        if isinstance(x, SCALARS):
            return False
        if isinstance(x, str):
            return depth == 2 and self.text is not None and x == self.text
        if id(x) in self.kept or isinstance(x, self.types):
            if type(x).__module__ != "builtins":
                self.seen.setdefault(type(x).__qualname__, x)
            return True
        if holders and id(x) in self.holders:
            return True
        if not depth or not isinstance(x, (list, tuple, dict)):
            return False
        items = itertools.islice(x.values() if isinstance(x, dict) else x, 64)
        return any(self.holds(e, holders=holders, depth=depth - 1) for e in items)

    def keep(self, x: Any, *, holder: bool = False) -> None:
        """Follow ``x`` from now on (and the parts of a tuple: a call's several results)."""
        if not isinstance(x, (*SCALARS, str)):
            (self.holders if holder else self.kept)[id(x)] = x
        if isinstance(x, tuple) and not holder:
            for part in x:
                if not isinstance(part, (*SCALARS, str)):
                    self.kept[id(part)] = part


def _module(frame: Any) -> str | None:
    name = frame.f_globals.get("__name__", "")
    if name == PACKAGE:
        return "__init__"
    if name.startswith(PACKAGE + "."):
        return str(name[len(PACKAGE) + 1 :])
    return None


def _arguments(frame: Any) -> list[Any]:
    code = frame.f_code
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kwargs
    local = frame.f_locals
    return [local[v] for v in code.co_varnames[:n] if v in local]


def _part_of(x: Any, args: list[Any], depth: int = 2) -> bool:
    """Whether ``x`` is one of ``args`` or an attribute of one: not made by the call. An
    attribute read through a part the object holds (``result.run.rounds``) is an attribute
    too: two levels deep."""
    level = list(args)
    for _ in range(depth + 1):
        if any(x is v for v in level):
            return True
        level = [v for a in level for v in _attributes(a)]
    return False


def _attributes(a: Any) -> list[Any]:
    """The values of ``a``'s attributes, kept in its ``__dict__`` or its slots."""
    if hasattr(a, "__dict__"):
        return list(vars(a).values())
    slots = getattr(type(a), "__slots__", ())
    return [getattr(a, s) for s in slots if isinstance(s, str) and hasattr(a, s)]


def _below(frame: Any) -> list[str]:
    """The package modules down the stack from ``frame``'s caller, nearest first."""
    below: list[str] = []
    f = frame.f_back
    while f is not None:
        m = _module(f)
        if m is not None:
            below.append(m)
        f = f.f_back
    return below


def _climbs(below: list[str], mod: str) -> bool:
    """Whether a call into ``mod`` (``below``: the modules down the stack, :func:`_below`)
    climbs back up: from a module into one of a higher ring, the shell's, or one already on
    the stack (a caller's closure or method)."""
    if not below or ring(below[0]) >= ring(mod):
        return False  # called by pytest or the test itself, or not upwards
    return ring(mod) >= RING["shell"] or mod in below


def _calls_back(below: list[str], mod: str) -> bool:
    """Whether a call into ``mod`` (``below``: the modules down the stack, :func:`_below`) is
    a *callback*: its caller is in another module, and ``mod`` is further down the stack
    (``mod`` called down, and is called back before that call returned). A module's calls of
    its own functions, and a call into a module that is not waiting on the caller (the timer
    the loop was handed), are not."""
    return bool(below) and below[0] != mod and mod in below[1:]


class Tracer:
    """The profiler hook: the journey's calls, from the first call of ``start``."""

    def __init__(self, start: tuple[str, str], value: Value, *, until_return: bool = False):
        self.start = start
        self.value = value
        self.started = False
        #: with ``until_return``, the journey ends when the first call of ``start`` returns
        self.until_return = until_return
        self.start_frame: int | None = None
        self.ended = False
        self.calls: list[Call] = []
        #: per running call: its arguments where it was handed the value itself, its Call
        self.open: dict[int, tuple[list[Any], Call | None]] = {}

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        mod = _module(frame)
        if mod is None or self.ended:
            return
        code = frame.f_code
        if event == "call":
            self._enter(frame, mod, code)
        else:
            self._leave(frame, code, arg)
            if self.until_return and id(frame) == self.start_frame:
                self.ended = True

    def _enter(self, frame: Any, mod: str, code: Any) -> None:
        if not self.started:
            if (mod, code.co_name) != self.start:
                return
            self.started = True
            self.start_frame = id(frame)
        args = _arguments(frame)
        handed = any(self.value.holds(a) for a in args)
        direct = handed and any(self.value.holds(a, holders=False) for a in args)
        call = None
        if not code.co_filename.startswith("<") and code.co_name != "<module>":
            below = _below(frame)  # walked once per call: the hook runs on every call
            call = Call(
                mod,
                code.co_name,
                up=_climbs(below, mod),
                route=handed,
                back=_calls_back(below, mod),
            )
            self.calls.append(call)
        self.open[id(frame)] = (args if direct else [], call)

    def _leave(self, frame: Any, code: Any, returned: Any) -> None:
        args, call = self.open.pop(id(frame), ([], None))
        direct = bool(args)
        value = self.value
        gives = value.holds(returned)
        made = (direct and not _part_of(returned, args)) or code.co_name in value.returned_by
        if made and not isinstance(returned, (*SCALARS, str)):
            if not value.holds(returned, holders=False):
                value.keep(returned)  # made from the value
            gives = True
        if direct and code.co_name == "__init__" and "self" in frame.f_locals:
            value.keep(frame.f_locals["self"], holder=True)  # an object built with the value
        if call is not None and gives:
            call.route = True


def record(
    argv: list[str], start: tuple[str, str], value: Value, *, until_return: bool = False
) -> list[Call]:
    """The package's calls, in order, from the first call of ``start`` (module, function),
    to its return with ``until_return``."""
    tracer = Tracer(start, value, until_return=until_return)
    sys.setprofile(tracer)
    try:
        _quietly(argv)
    finally:
        sys.setprofile(None)
    return tracer.calls


def _quietly(argv: list[str]) -> None:
    """``pytest.main(argv)``, its terminal output thrown away (the same calls are made)."""
    import pytest

    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        pytest.main(argv)


def _stops(calls: list[Call]) -> list[str]:
    mods = [c.module for c in calls]
    return [m for i, m in enumerate(mods) if i == 0 or mods[i - 1] != m]


def _folded(stops: list[str]) -> list[tuple[list[str], int]]:
    """``stops`` as (block, repeats): a run of 3 or more repeats of 2 to 4 stops is one."""
    out: list[tuple[list[str], int]] = []
    i = 0
    while i < len(stops):
        for width in (2, 3, 4):
            block = stops[i : i + width]
            n = 1
            while stops[i + n * width : i + (n + 1) * width] == block:
                n += 1
            if len(block) == width and n >= 3:
                out.append((block, n))
                i += n * width
                break
        else:
            out.append(([stops[i]], 1))
            i += 1
    return out


def _line(name: str, calls: list[Call]) -> None:
    stops = _stops(calls)
    climbs = sum(c.up for c in calls)
    back = sum(c.back for c in calls)
    modules = list(dict.fromkeys(stops))
    folded = _folded(stops)
    read = sum(len(block) for block, _ in folded)
    print(
        f"  {name}: {len(modules)} modules, {len(stops)} stops ({read} as read, each loop once), "
        f"{len(stops) - len(modules)} returns to a module already left, {climbs} climbs back up, "
        f"{back} callbacks"
    )
    text = " -> ".join(f"[{' -> '.join(block)}] x{n}" if n > 1 else block[0] for block, n in folded)
    print(textwrap.fill(text, 100, initial_indent="    ", subsequent_indent="    "))


def report(title: str, calls: list[Call], everything: bool, each: bool = False) -> None:
    main = [c for c in calls if everything or not is_helper(c.module)]
    print(f"\n{title}")
    _line("all calls", main)
    route = [c for c in main if c.route]
    _line("route of the value", route)
    if each:
        print("  the route's calls:")
        for c in route:
            mark = ("  (climbs back up)" if c.up else "") + ("  (a callback)" if c.back else "")
            print(f"    {c.module}.{c.function}" + mark)
    helpers = sorted({c.module for c in calls if is_helper(c.module)})
    if helpers and not everything:
        print("  helpers along the way: " + ", ".join(helpers))


def _journey_values() -> Value:
    from pytest_gpuperf.measure.engine import RawMeasurement
    from pytest_gpuperf.model import Result, Run
    from pytest_gpuperf.verdict.decide import Comparison, RunStat

    return Value(
        types=(RawMeasurement, Run, Result, RunStat, Comparison), returned_by=("time_round",)
    )


#: The stages of the run from the loop to the rule: the loop's measurement, the run (which a
#: ``Result`` holds, beside what the session adds), the rule's per-run statistic, its verdict.
STAGES = ("RawMeasurement", "Run", "RunStat", "Comparison")


def run_shapes(value: Value) -> list[str]:
    """The shapes the route's value took: the :data:`STAGES` it passed through, and any other
    class seen on the route holding the run's kept rounds as a field of its own (a copy of
    the run in another shape, as a stored record was)."""
    run = value.seen.get("Run")
    rounds = list(run.rounds) if run is not None else None

    def copies_the_run(x: Any) -> bool:
        return any(isinstance(v, (list, tuple)) and list(v) == rounds for v in _attributes(x))

    return [n for n, x in value.seen.items() if n in STAGES or copies_the_run(x)]


def _saved_types() -> tuple[type, ...]:
    """What the save journey's route follows: the session's results and their runs, and
    what is made of them (a run's line, a segment, the summary)."""
    from pytest_gpuperf.model import Result, Run

    return (Result, Run)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="count helper modules as stops too")
    ap.add_argument("--calls", action="store_true", help="list each call of the route")
    ap.add_argument("--only-save", action="store_true", help="only the save journey")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuperf-journey-") as tmp:
        root = Path(tmp)
        (root / "test_bench.py").write_text(BENCH)
        (root / "pytest.ini").write_text("[pytest]\n")
        os.chdir(root)
        fast = [
            "-q", "-p", "no:cacheprovider", "--gpuperf-device=cpu", "--gpuperf-rounds=5",
            "--gpuperf-round-ms=1", "--gpuperf-warmup-ms=20", "--gpuperf-capture=never",
            "--gpuperf-inventory=never", "--gpuperf-telemetry=off", "--gpuperf-reruns=0",
        ]  # fmt: skip
        # The baseline, measured under the same profiler (it slows the timed calls down as
        # much), so that the verdict below is the usual "no change"; its calls are not shown.
        record([*fast, "--gpuperf-save=main", "test_bench.py"], ("", ""), Value())
        if not args.only_save:
            _first_two(fast, args)
        calls = record(
            [*fast, "--gpuperf-save=main", "test_bench.py"],
            ("shell.save", "_save"),
            Value(types=_saved_types()),
            until_return=True,
        )
        report("save (shell/save.py:SavePlugin._save, to its return)", calls, args.all, args.calls)
    return 0


def _first_two(fast: list[str], args: argparse.Namespace) -> None:
    """The journeys from ``gpu_bench(...)`` and from ``pytest_configure``."""
    value = _journey_values()
    calls = record(
        [*fast, "--gpuperf-baseline=main", "--gpuperf-save=main", "test_bench.py"],
        ("shell.fixture", "__call__"),
        value,
    )
    ends = [i for i, c in enumerate(calls) if c.module == "baseline.store"]
    report(
        "measure -> verdict -> saved run (from gpu_bench(...))",
        calls[: ends[-1] + 1] if ends else calls,
        args.all,
        args.calls,
    )
    shapes = run_shapes(value)
    print(f"  shapes of the run: {len(shapes)} ({', '.join(shapes)})")
    calls = record(
        [*fast, "--gpuperf-baseline=main", "test_bench.py"],
        ("plugin", "pytest_configure"),
        Value(text="main"),
    )
    first = next((i for i, c in enumerate(calls) if c.module == "shell.fixture"), None)
    report("--gpuperf-baseline (from pytest_configure to the first benchmark)",
           calls[:first], args.all, args.calls)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())

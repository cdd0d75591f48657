"""Value objects: one benchmark's :class:`Run`, and the :class:`Result` a session makes of it.

A :class:`Run` is the one shape of a run from the fixture to the baseline file to the rule.
It is frozen and plain when made (tuples and read-only mappings of JSON values, at every
depth); statistics are derived from the rounds, never stored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any

from pytest_gpuperf.jsonsafe import json_safe
from pytest_gpuperf.measure.names import MODE_CPU, STEADY, UNSTABLE_CLASSES
from pytest_gpuperf.measure.peaks import of_peak
from pytest_gpuperf.measure.summary import Summary, summarize
from pytest_gpuperf.outcome import Comparison, Diagnosis, Words

#: What must not reach a report raw: C0 and C1 controls (ESC, newline), DEL, the Unicode line
#: and paragraph separators and the bidirectional controls.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with its control characters escaped (``\\x1b``, ``\\n``), as pytest escapes
    test ids: a name cannot colour the terminal or start a line (GitHub's ``::error::``)."""
    if _UNPRINTABLE.search(text) is None:
        return text
    return _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1], text)


def short_test_id(nodeid: str) -> str:
    """The test's part of a nodeid (``test_x[a::b]`` of ``f.py::C::test_x[a::b]``): a ``::``
    in the parameters' ids, between the brackets, does not cut it."""
    head, bracket, ids = nodeid.partition("[")
    return head.rsplit("::", 1)[-1] + bracket + ids


@dataclass(frozen=True)
class BenchId:
    """Identity of one benchmark: which test, which named measurement, which timing mode;
    ``params``: the test's parameters, rendered readably. Baselines are keyed by ``key``."""

    nodeid: str
    name: str | None = None
    mode: str = MODE_CPU
    params: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        # From users' code and files: escaped once, here, for every report.
        object.__setattr__(self, "nodeid", printable(self.nodeid))
        if self.name is not None:
            object.__setattr__(self, "name", printable(self.name))
        if any(_UNPRINTABLE.search(k + v) for k, v in self.params):
            params = tuple((printable(k), printable(v)) for k, v in self.params)
            object.__setattr__(self, "params", params)

    @property
    def key(self) -> str:
        base = self.nodeid if self.name is None else f"{self.nodeid}::{self.name}"
        return f"{base}@{self.mode}"

    @property
    def display(self) -> str:
        """The nodeid's last part plus the measurement name."""
        short = short_test_id(self.nodeid)
        return short if self.name is None else f"{short}::{self.name}"

    def to_dict(self) -> dict[str, Any]:
        d = {"nodeid": self.nodeid, "name": self.name, "mode": self.mode}
        return {**d, "params": dict(self.params), "key": self.key}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BenchId:
        params = tuple((str(k), str(v)) for k, v in (d.get("params") or {}).items())
        return cls(d["nodeid"], d.get("name"), d.get("mode", MODE_CPU), params)


EMPTY: Mapping[str, Any] = MappingProxyType({})


def frozen(value: Any) -> Any:
    """``value`` as plain JSON values that cannot change: tuples and read-only mappings at
    every depth, other values as :func:`~pytest_gpuperf.jsonsafe.json_safe` makes them."""
    if isinstance(value, MappingProxyType):  # made here: frozen already
        return value
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): frozen(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(frozen(v) for v in value)
    if type(value) in _PLAIN or (type(value) is float and math.isfinite(value)):
        return value
    return json_safe(value)


_PLAIN = frozenset({str, int, bool, type(None)})  # kept as they are, and finite floats


def thawed(value: Any) -> Any:
    """A frozen value as the plain lists and dicts ``json.dumps`` writes."""
    if isinstance(value, Mapping):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thawed(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class Run:
    """One run (process) of one benchmark: what it measured, where, under which settings.

    Times are seconds per call. ``rounds``: the kept steady-state rounds; ``trimmed``: the
    measured rounds dropped as leftover transient. The CUDA events backend adds
    ``e2e_rounds`` (host included; ``rounds`` are then device time) and ``host_s`` (the
    host's time to issue a call). ``extra``: what the after-measure hooks found. A stored
    run's ``environment`` is its fingerprint. A changed copy: ``dataclasses.replace``.
    """

    id: BenchId
    device: str  # "cuda" or "cpu"
    rounds: tuple[float, ...]
    calls_per_round: int
    first_call_s: float | None = None
    warmup: tuple[float, ...] = ()
    trimmed: int = 0
    stability: str = STEADY
    warmup_s: float = 0.0
    wall_s: float = 0.0
    l2_flush: bool = False
    peak_memory_bytes: int | None = None
    flops: float | None = None
    bytes: float | None = None
    device_name: str | None = None
    #: the measurement settings that make two runs comparable
    policy: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    environment: Mapping[str, Any] | None = None
    e2e_rounds: tuple[float, ...] = ()
    host_hidden: bool | None = None
    host_s: float | None = None
    numerics: tuple[Mapping[str, Any], ...] | None = None
    memory: Mapping[str, Any] | None = None
    contention: Mapping[str, Any] | None = None
    tracer: str | None = None
    #: NVML telemetry over the measurement (a stored run keeps its summary)
    telemetry: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    #: the session that measured it
    run_id: str | None = None
    timestamp: str | None = None
    meta: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    plugin_version: str | None = None
    fingerprint_id: str | None = None

    def __post_init__(self) -> None:
        for name in RUN_FIELDS[1:]:  # all but the identity, a value of its own
            if (plain := frozen(value := getattr(self, name))) is not value:
                object.__setattr__(self, name, plain)

    def __copy__(self) -> Run:  # immutable: a copy is the run itself
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Run:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (Run.from_dict, (self.to_dict(),))

    @property
    def summary(self) -> Summary:
        return summarize(self.rounds)

    @property
    def median(self) -> float:
        return self.summary.median

    @property
    def e2e_median(self) -> float | None:  # the CUDA events backend's end-to-end figure
        return summarize(self.e2e_rounds).median if self.e2e_rounds else None

    @property
    def commit(self) -> str | None:
        """The commit the run measured (git HEAD, else the CI's sha), if recorded."""
        return next(
            (s for k in ("git_sha", "ci_sha") if isinstance(s := self.meta.get(k), str) and s), None
        )

    @property
    def unstable(self) -> bool:
        return self.stability in UNSTABLE_CLASSES

    @property
    def tflops(self) -> float | None:
        return None if self.flops is None or not self.rounds else self.flops / self.median / 1e12

    @property
    def gbps(self) -> float | None:
        return None if self.bytes is None or not self.rounds else self.bytes / self.median / 1e9

    @property
    def of_peak(self) -> dict[str, Any] | None:
        """Achieved FLOP/s and bandwidth as fractions of the GPU's datasheet peaks, or None."""
        if self.device != "cuda" or not self.rounds:
            return None
        d = self
        return of_peak(
            device_name=d.device_name, seconds=d.median, flops=d.flops, nbytes=d.bytes,
            params=d.id.params,
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values: the identity as ``BenchId.to_dict()``, each field by its name."""
        d = {f.name: thawed(getattr(self, f.name)) for f in fields(self)}
        d["id"] = self.id.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Run:
        """Back from :meth:`to_dict` (or a results file's result: other keys are ignored)."""
        given = {f.name: d[f.name] for f in fields(cls) if f.name in d and d[f.name] is not None}
        given["id"] = BenchId.from_dict(d["id"])
        return cls(**given)


RUN_FIELDS = tuple(f.name for f in fields(Run))


@dataclass(slots=True)
class Result:
    """A :class:`Run` and what the session adds to it: the verdict, the captured artifacts
    and their diagnosis, notes, the verdict settings of the test and where it is."""

    run: Run
    comparison: Comparison | None = None
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: the verdict settings in force for this benchmark (threshold, secondary gates)
    gate: dict[str, Any] = field(default_factory=dict)
    #: where the test is defined: ``[path relative to the rootdir, 1-based line]``
    location: list[Any] | None = None
    #: where the time went (``--gpuperf-capture``); the JSON has it in ``comparison``
    diagnosis: Diagnosis | None = None

    @property
    def id(self) -> BenchId:
        return self.run.id

    def with_run(self, **changes: Any) -> Result:
        """This result, its run changed (``dataclasses.replace``) in place."""
        self.run = replace(self.run, **changes)
        return self

    def to_dict(self, words: Words | None = None) -> dict[str, Any]:
        """JSON builtins (results JSON, xdist's channel): the run's fields, the session's, the
        verdict (reasons as ``words`` writes them; the diagnosis in it), the run's figures."""
        run, d, c = self.run, self.run.to_dict(), None
        if self.comparison is not None or self.diagnosis is not None:
            c = self.comparison.to_dict(words) if self.comparison is not None else {}
            c["diagnosis"] = self.diagnosis.to_dict() if self.diagnosis is not None else None
        d.update(comparison=c, artifacts=self.artifacts, notes=self.notes)
        d.update(gate=self.gate, location=self.location, summary=run.summary.to_dict())
        d.update(tflops=run.tflops, gbps=run.gbps, of_peak=run.of_peak)
        return json_safe(d)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Result:
        """Back from :meth:`to_dict` (a ``comparison`` without ``kind`` is a diagnosis alone)."""
        c = d.get("comparison") or {}
        diagnosis = c.get("diagnosis")
        return cls(
            Run.from_dict(d),
            comparison=Comparison.from_dict(c) if "kind" in c else None,
            artifacts=list(d.get("artifacts") or []),
            notes=list(d.get("notes") or []),
            gate=dict(d.get("gate") or {}),
            location=d.get("location"),
            diagnosis=Diagnosis.from_dict(diagnosis) if diagnosis else None,
        )

"""Value objects: what one benchmark measured, in one process.

Pure Python (no torch, no pytest). A :class:`Result` travels from a worker to
the controller as ``Result.to_dict()`` and is written to JSON files, so every
field is a JSON-safe builtin (the measurement's lists and dicts read-only subclasses of
``list`` and ``dict``), but for the verdict and the diagnosis: typed values, dicts only in
``to_dict`` and ``from_dict``. Statistics are derived from the raw
rounds by :mod:`pytest_gpuperf.measure.summary`; nothing derived is stored as truth.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from dataclasses import MISSING, FrozenInstanceError, asdict, dataclass, field, fields, replace
from typing import Any, Generic, NoReturn, TypeVar, overload

from pytest_gpuperf.jsonsafe import json_safe
from pytest_gpuperf.measure import names
from pytest_gpuperf.measure.peaks import of_peak
from pytest_gpuperf.measure.summary import Summary, summarize
from pytest_gpuperf.outcome import Comparison, Diagnosis

#: The measurement's labels (timing modes, stability classes), defined by
#: :mod:`pytest_gpuperf.measure.names`, importable from here too.
MODE_EVENTS = names.MODE_EVENTS
MODE_GRAPH = names.MODE_GRAPH
MODE_CPU = names.MODE_CPU
MODE_CUDA_DIST = names.MODE_CUDA_DIST
MODE_CPU_DIST = names.MODE_CPU_DIST
MODES = names.MODES
STEADY = names.STEADY
WARMUP_CAPPED = names.WARMUP_CAPPED
SHIFT = names.SHIFT
NO_STEADY_STATE = names.NO_STEADY_STATE
UNSTABLE_CLASSES = names.UNSTABLE_CLASSES


#: What must not reach a report raw: C0 and C1 controls (ESC, newline), DEL, the Unicode line
#: and paragraph separators and the bidirectional controls.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with its control characters written as escapes (``\\x1b``, ``\\n``), as pytest
    writes them in test ids: a name cannot colour the terminal, start a line of its own
    (GitHub's ``::error::``) or make the JUnit XML not well-formed."""
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
    """Identity of one benchmark: which test, which named measurement, which timing mode.

    ``key`` is what baselines are keyed by; ``params`` are the test's
    parameters, rendered readably (``{"shape": "4096x4096", "dtype": "bfloat16"}``).
    """

    nodeid: str
    name: str | None = None
    mode: str = MODE_CPU
    params: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        # Names and parameters come from users' code and files: escaped once, here, for
        # every report (pytest escapes its test ids itself; a run file may not).
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
        """The test id as a user reads it: the nodeid's last part plus the measurement name."""
        short = short_test_id(self.nodeid)
        return short if self.name is None else f"{short}::{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "name": self.name,
            "mode": self.mode,
            "params": dict(self.params),
            "key": self.key,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BenchId:
        return cls(
            nodeid=d["nodeid"],
            name=d.get("name"),
            mode=d.get("mode", MODE_CPU),
            params=tuple((str(k), str(v)) for k, v in d.get("params", {}).items()),
        )


class FrozenValueError(FrozenInstanceError, TypeError):
    """A measured list or dict was changed in place. A :class:`FrozenInstanceError`, as
    assigning a measured field is, and a :class:`TypeError`, as changing a tuple is."""


def _refuse(self: FrozenList[Any] | FrozenDict[Any, Any], *args: Any, **kwargs: Any) -> NoReturn:
    name = getattr(self, "_field", "") or "field"  # "" when not made through __init__
    raise FrozenValueError(
        f"cannot change the measured {name} in place: a measurement does not change once "
        f"made; change a copy (list(...), dict(...)) or give the result a new measurement: "
        f"dataclasses.replace(result.measurement, {name}=...)"
    )


def _freeze(value: Any, name: str) -> Any:
    """``value`` with every list and dict in it, at any depth, made a :class:`FrozenList` or
    :class:`FrozenDict` (one already frozen is kept as it is); anything else as it is."""
    if isinstance(value, _FROZEN):
        return value
    if isinstance(value, list):
        return FrozenList(value, name)
    if isinstance(value, dict):
        return FrozenDict(value, name)
    return value


#: the types of the values a frozen list or dict keeps as they are, checked in one go
_SCALARS = frozenset({float, int, str, bool, type(None)})

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")


class FrozenList(list[T]):
    """A list of a measurement (``rounds``, ``numerics``, a list inside ``environment``): a
    ``list`` to read (equal to the same plain list, written the same by ``json.dumps``),
    whose in-place changes (``append``, ``sort``, ``x[0] = ...``, ``+=``) raise
    :class:`FrozenValueError`. Copies (``list(x)``, ``x[:]``, ``x + [...]``) are plain lists;
    the lists and dicts in it are frozen too."""

    __slots__ = ("_field",)
    _field: str

    def __init__(self, items: Iterable[T] = (), field: str = "") -> None:
        list.__init__(self, items)
        if not _SCALARS.issuperset(map(type, self)):  # the rounds: floats, a fast check
            for i, v in enumerate(self):
                if isinstance(v, (list, dict)):
                    list.__setitem__(self, i, _freeze(v, field))
        self._field = field

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (list(self), self._field))

    def __copy__(self) -> FrozenList[T]:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenList[T]:
        return type(self)(copy.deepcopy(list(self), memo), self._field)


class FrozenDict(dict[K, V]):
    """A dict of a measurement (``policy``, ``environment``, ``memory``, ``contention``, an
    item of ``numerics``): a ``dict`` to read, whose in-place changes (``d[k] = ...``,
    ``update``, ``setdefault``, ``pop``, ``|=``) raise :class:`FrozenValueError`. Copies
    (``dict(d)``, ``d.copy()``, ``d | {...}``, ``{**d}``) are plain dicts; the lists and dicts
    in it are frozen too."""

    __slots__ = ("_field",)
    _field: str

    def __init__(self, items: Any = (), field: str = "") -> None:
        dict.__init__(self, items)
        if not _SCALARS.issuperset(map(type, self.values())):
            for k, v in self.items():
                if isinstance(v, (list, dict)):
                    dict.__setitem__(self, k, _freeze(v, field))
        self._field = field

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self), self._field))

    def __copy__(self) -> FrozenDict[K, V]:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict[K, V]:
        return type(self)(copy.deepcopy(dict(self), memo), self._field)


_FROZEN = (FrozenList, FrozenDict)

for _name in (
    "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
    "__setitem__", "__delitem__", "__iadd__", "__imul__",
):  # fmt: skip
    setattr(FrozenList, _name, _refuse)
for _name in (
    "__setitem__", "__delitem__", "update", "setdefault", "pop", "popitem", "clear", "__ior__",
):  # fmt: skip
    setattr(FrozenDict, _name, _refuse)
del _name


#: the fields of :class:`Result` that hold typed objects, not free-form JSON values
_TYPED_FIELDS = frozenset({"id", "comparison", "diagnosis"})


@dataclass(frozen=True)
class Measurement:
    """What one measurement of one benchmark measured, in one process: made once by the
    measurement engine, then never changed (a changed copy is ``dataclasses.replace``).
    The freeze is deep: its lists and dicts, and those nested in them, are made a
    :class:`FrozenList` or :class:`FrozenDict` when it is made, which read as plain ones and
    raise :class:`FrozenValueError` on a change in place.

    Times are seconds per call. ``rounds`` are the retained steady-state
    rounds: each is the time of one call, as the median (events with L2
    flush) or mean (back-to-back calls, graph replay, CPU) of the calls in
    that round. ``warmup`` holds the warm-up rounds, ``trimmed`` how many
    leading measured rounds were dropped as leftover transient.
    """

    id: BenchId
    device: str  # "cuda" or "cpu"
    rounds: list[float]
    calls_per_round: int
    first_call_s: float
    warmup: list[float] = field(default_factory=list)
    trimmed: int = 0
    stability: str = STEADY
    warmup_s: float = 0.0
    wall_s: float = 0.0
    l2_flush: bool = False
    peak_memory_bytes: int | None = None
    flops: float | None = None
    bytes: float | None = None
    device_name: str | None = None
    #: the measurement settings that make two results comparable
    policy: dict[str, Any] = field(default_factory=dict)
    #: where it ran (environment.collect_environment); shared by a session's results
    environment: dict[str, Any] | None = None
    #: the second figure of the CUDA events backend, one value per kept round: the
    #: end-to-end time per call of back-to-back calls, host included (``rounds`` then
    #: hold device time with the host hidden). Empty for other backends.
    e2e_rounds: list[float] = field(default_factory=list)
    #: whether ``rounds`` are device time alone (the host was hidden behind a spin
    #: kernel); False when the function waits for the GPU itself; None where the
    #: backend does not hide the host (CUDA graphs have no host work, the CPU is the host)
    host_hidden: bool | None = None
    #: the host's time to issue one call (seconds; the end-to-end rounds' enqueue time per
    #: call, CUDA events backend): how close the host is to being the bottleneck
    host_s: float | None = None
    #: the numeric fingerprint of one call's output (:mod:`pytest_gpuperf.verdict.numerics`); None
    #: when the function returned no tensor or ``numerics="off"``
    numerics: list[dict[str, Any]] | None = None
    #: memory behaviour per call, from the caching allocator's counters
    #: (:mod:`pytest_gpuperf.measure.allocation`); ``{"available": False, "reason"}`` on the
    #: CPU; None when not measured
    memory: dict[str, Any] | None = None
    #: whether the measured rounds had the CPUs they needed
    #: (:mod:`pytest_gpuperf.measure.contention`): ``waited``, ``threads``, ``clock``. None
    #: where nothing was measured
    contention: dict[str, Any] | None = None
    #: the tracer or profiler active while it was measured (coverage.py, a debugger, ...),
    #: None without one (:mod:`pytest_gpuperf.measure.tracing`)
    tracer: str | None = None

    def __post_init__(self) -> None:
        # Deep, not only the fields: the lists and dicts (rounds, policy, environment, the
        # numerics' items, ...) become read-only lists and dicts, at every depth.
        for name in MEASURED:
            value = getattr(self, name)
            frozen = _freeze(value, name)
            if frozen is not value:
                object.__setattr__(self, name, frozen)


#: the fields of :class:`Measurement`, which :class:`Result` reads through and never writes
MEASURED = tuple(f.name for f in fields(Measurement))

#: the order of the keys of ``Result.to_dict()``: the one :class:`Result` had as a single
#: dataclass, kept so that reports, baselines and xdist's dicts stay byte for byte the same
_DICT_ORDER = (
    "id", "device", "rounds", "calls_per_round", "first_call_s", "warmup", "trimmed",
    "stability", "warmup_s", "wall_s", "l2_flush", "peak_memory_bytes", "flops", "bytes",
    "device_name", "telemetry", "comparison", "artifacts", "notes", "policy", "gate",
    "environment", "run_id", "location", "extra", "e2e_rounds", "host_hidden", "host_s",
    "numerics", "diagnosis", "memory", "contention", "tracer",
)  # fmt: skip


class _Measured(Generic[T]):
    """A field of :class:`Result` read from its measurement; assigning it raises."""

    name: str

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _Measured[T]: ...
    @overload
    def __get__(self, obj: Result, owner: type) -> T: ...
    def __get__(self, obj: Result | None, owner: type) -> T | _Measured[T]:
        if obj is None:
            return self
        value: T = getattr(obj.measurement, self.name)
        return value

    def __set__(self, obj: Result, value: T) -> NoReturn:
        raise FrozenInstanceError(
            f"cannot assign Result.{self.name}: it is part of the measurement, which does not "
            f"change once made; build the Result with {self.name}=..., or give it a new "
            f"measurement: dataclasses.replace(result.measurement, {self.name}=...)"
        )


@dataclass(init=False)
class Result:
    """One benchmark's :class:`Measurement` and what later stages add to it in the session:
    the telemetry, the verdict, the captured artifacts and their diagnosis, notes, where the
    test is and which run it belongs to.

    The measured fields read through (``result.rounds`` is ``result.measurement.rounds``)
    and cannot be assigned, nor changed in place. ``Result(id=..., rounds=..., ...,
    notes=...)`` takes the measured fields and the outcome's, as the single dataclass it once
    was did, or a made ``measurement=``; an outcome field not given, or given None, gets
    its declared default.
    """

    measurement: Measurement
    #: NVML telemetry summary and captured artifacts: filled by later stages, JSON-safe dicts
    telemetry: dict[str, Any] | None = None
    #: the verdict against the baseline (the gate's, or ``pytest-gpuperf compare``'s, with
    #: the secondary metrics and numerics); None when not compared
    comparison: Comparison | None = None
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: the verdict settings in force for this benchmark (threshold, secondary gates),
    #: resolved like every option: gpu_bench(...) > marker > command line > ini > default
    gate: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    #: where the test is defined: ``[path relative to the rootdir, 1-based line]`` (from
    #: pytest's ``item.location``); CI annotations point there. None when unknown.
    location: list[Any] | None = None
    #: opaque per-run data stored with a baseline run (``"kernels"``: the kernel
    #: inventory of artifacts/analysis/inventory.py); empty for most results
    extra: dict[str, Any] = field(default_factory=dict)
    #: where the time went, from the evidence capture (``--gpuperf-capture``); the JSON keeps
    #: it as ``comparison["diagnosis"]``. None when not captured
    diagnosis: Diagnosis | None = None

    def __init__(self, *args: Any, measurement: Measurement | None = None, **given: Any) -> None:
        # The outcome's fields are this dataclass's own (their defaults included), the
        # other keywords the measured ones: one list of fields, in the field declarations.
        measured = {k: v for k, v in given.items() if k not in _OUTCOME_NAMES}
        if measurement is None:
            measurement = Measurement(*args, **measured)
        elif args or measured:
            named = [*MEASURED[: len(args)], *measured]
            raise TypeError(f"Result: measurement= given with measured fields {named}")
        self.measurement = measurement
        for f in _OUTCOME:
            value = given.get(f.name)
            if value is None:  # not given, or None: the field's default
                value = f.default if f.default_factory is MISSING else f.default_factory()
            setattr(self, f.name, value)

    id = _Measured[BenchId]()
    device = _Measured[str]()
    rounds = _Measured[list[float]]()
    calls_per_round = _Measured[int]()
    first_call_s = _Measured[float]()
    warmup = _Measured[list[float]]()
    trimmed = _Measured[int]()
    stability = _Measured[str]()
    warmup_s = _Measured[float]()
    wall_s = _Measured[float]()
    l2_flush = _Measured[bool]()
    peak_memory_bytes = _Measured[int | None]()
    flops = _Measured[float | None]()
    bytes = _Measured[float | None]()
    device_name = _Measured[str | None]()
    policy = _Measured[dict[str, Any]]()
    environment = _Measured[dict[str, Any] | None]()
    e2e_rounds = _Measured[list[float]]()
    host_hidden = _Measured[bool | None]()
    host_s = _Measured[float | None]()
    numerics = _Measured[list[dict[str, Any]] | None]()
    memory = _Measured[dict[str, Any] | None]()
    contention = _Measured[dict[str, Any] | None]()
    tracer = _Measured[str | None]()

    @property
    def summary(self) -> Summary:
        return summarize(self.rounds)

    @property
    def median(self) -> float:
        return self.summary.median

    @property
    def e2e_median(self) -> float | None:
        """Median end-to-end time per call (CUDA events backend), else None."""
        return summarize(self.e2e_rounds).median if self.e2e_rounds else None

    @property
    def unstable(self) -> bool:
        return self.stability in UNSTABLE_CLASSES

    @property
    def tflops(self) -> float | None:
        if self.flops is None or not self.rounds:
            return None
        return self.flops / self.median / 1e12

    @property
    def gbps(self) -> float | None:
        if self.bytes is None or not self.rounds:
            return None
        return self.bytes / self.median / 1e9

    @property
    def of_peak(self) -> dict[str, Any] | None:
        """Achieved FLOP/s and bandwidth as fractions of the GPU's datasheet peaks
        (:func:`pytest_gpuperf.measure.peaks.of_peak`); None without declared work or a
        known GPU."""
        if self.device != "cuda" or not self.rounds:
            return None
        return of_peak(
            device_name=self.device_name,
            seconds=self.median,
            flops=self.flops,
            nbytes=self.bytes,
            params=self.id.params,
        )

    def make_plain(self) -> None:
        """Turn the free-form fields (telemetry, policy, environment, extra, numerics, ...)
        into the plain JSON values :meth:`to_dict` writes: NumPy scalars into numbers,
        tuples into lists, NaN and infinity into None; the measured ones in a new
        :class:`Measurement`, the outcome's in place. The session does this once a test is
        reported, so that a result kept in the process that measured it holds the same
        values as one sent as a dict from an xdist worker. The identity, the verdict and
        the diagnosis are typed and stay as they are."""
        m = self.measurement
        plain = {n: json_safe(getattr(m, n)) for n in MEASURED if n not in _TYPED_FIELDS}
        self.measurement = replace(m, **plain)
        for f in fields(self):
            if f.name != "measurement" and f.name not in _TYPED_FIELDS:
                setattr(self, f.name, json_safe(getattr(self, f.name)))

    def to_dict(self) -> dict[str, Any]:
        """JSON builtins (the results JSON, xdist's channel): the measured and the outcome's
        fields side by side, the verdict as ``Comparison.to_dict()`` with the diagnosis
        under its ``"diagnosis"`` key."""
        flat = asdict(self)
        flat.update(flat.pop("measurement"))
        d = {name: flat[name] for name in _DICT_ORDER}
        d["id"] = self.id.to_dict()
        d["comparison"] = self._comparison_dict()
        del d["diagnosis"]
        s = self.summary
        d["summary"] = s.to_dict()
        d["tflops"] = self.tflops
        d["gbps"] = self.gbps
        d["of_peak"] = self.of_peak
        return json_safe(d)

    def _comparison_dict(self) -> dict[str, Any] | None:
        if self.comparison is None and self.diagnosis is None:
            return None
        out = self.comparison.to_dict() if self.comparison is not None else {}
        out["diagnosis"] = self.diagnosis.to_dict() if self.diagnosis is not None else None
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Result:
        """Back from :meth:`to_dict` (a JSON ``comparison`` without a ``kind`` holds only a
        diagnosis: no verdict)."""
        known = set(_DICT_ORDER) - {"id", "comparison", "diagnosis"}
        kwargs = {k: v for k, v in d.items() if k in known}
        c = d.get("comparison") or {}
        diagnosis = c.get("diagnosis")
        return cls(
            id=BenchId.from_dict(d["id"]),
            comparison=Comparison.from_dict(c) if "kind" in c else None,
            diagnosis=Diagnosis.from_dict(diagnosis) if diagnosis else None,
            **kwargs,
        )


#: the fields of :class:`Result` that are not its measurement: the outcome's
_OUTCOME = tuple(f for f in fields(Result) if f.name != "measurement")
_OUTCOME_NAMES = frozenset(f.name for f in _OUTCOME)

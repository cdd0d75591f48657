"""What was concluded about one result: its verdict and its diagnosis, as values.

:class:`Comparison` (with :class:`FigureVerdict`, :class:`SecondaryComparison`,
:class:`NumericsComparison`) and :class:`Diagnosis` sit beside
:class:`~pytest_gpuperf.model.Result`, which carries both, below the verdict and the
analysis that make them. Frozen and typed from the verdict to the reports; a dict only
at the edges (``to_dict`` / ``from_dict``). Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pytest_gpuperf.jsonsafe import json_safe
from pytest_gpuperf.measure.numerics_format import decode, encode

# --- the verdict's kinds ------------------------------------------------------------------

REGRESSION = "regression"
IMPROVEMENT = "improvement"
NO_CHANGE = "no-change"
INCONCLUSIVE = "inconclusive"
NO_BASELINE = "no-baseline"
DIFFERENT_ENVIRONMENT = "different-environment"
KINDS = (REGRESSION, IMPROVEMENT, NO_CHANGE, INCONCLUSIVE, NO_BASELINE, DIFFERENT_ENVIRONMENT)
#: Which kind of inconclusive (``why``): a slowdown the interval cannot rule out though none
#: beyond the threshold in force was seen (too small to tell, never "no change"); a suspect no
#: run could confirm; no good evidence on a side (runs without a steady level, or that waited
#: for a CPU); a tracer or profiler on one side only.
BELOW_RESOLUTION, UNCONFIRMED = "below-resolution", "unconfirmed"
UNMEASURABLE, NOT_COMPARABLE = "unmeasurable", "not-comparable"
#: Kinds that were gated (compared with comparable baseline runs).
GATED_KINDS = (REGRESSION, IMPROVEMENT, NO_CHANGE, INCONCLUSIVE)


# --- beside time: the secondary metrics and the output's numerics -----------------------


@dataclass(frozen=True)
class SecondaryComparison:
    metric: str
    kind: str  # higher / lower / same / no-baseline
    current: float | None
    baseline: float | None  # median of the baseline values
    baseline_min: float | None
    baseline_max: float | None
    n: int
    tolerance: float
    slack: float
    ratio: float | None  # current / baseline median
    upper: float | None  # above this: "higher"
    lower: float | None  # below this: "lower"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SecondaryComparison:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


#: :attr:`NumericsComparison.kind` values (also :mod:`pytest_gpuperf.verdict.numerics`'s
#: ``SAME``, ``CHANGED``, ``UNSEEDED``; no baseline is :data:`NO_BASELINE`).
NUMERICS_SAME = "same"
NUMERICS_CHANGED = "changed"
NUMERICS_UNSEEDED = "unseeded"


@dataclass(frozen=True)
class NumericsComparison:
    """The current output's fingerprint against the baseline's (JSON-safe via ``to_dict``).

    ``kind``: :data:`NUMERICS_SAME`, :data:`NUMERICS_CHANGED` (beyond ``tolerance``, or a change
    of dtype, shape, structure or NaN/Inf count), :data:`NUMERICS_UNSEEDED` (runs of the
    same code differ among themselves: nothing is concluded) or
    :data:`NO_BASELINE` (no baseline run has a fingerprint).
    """

    kind: str
    tolerance: float
    max_rel: float | None = None
    where: str = ""
    current: float | None = None
    baseline: float | None = None
    changes: tuple[str, ...] = ()
    #: the largest difference among the baseline's runs of the same code, and the current runs
    baseline_spread: float | None = None
    current_spread: float | None = None
    baseline_runs: int = 0
    current_runs: int = 0
    gated: bool = False

    @property
    def fails(self) -> bool:
        return self.gated and self.kind == NUMERICS_CHANGED

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["changes"] = list(self.changes)
        for k in ("max_rel", "baseline_spread", "current_spread", "current", "baseline"):
            v = d[k]
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = encode(v)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NumericsComparison:
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        kw["changes"] = tuple(kw.get("changes") or ())
        for k in ("max_rel", "baseline_spread", "current_spread", "current", "baseline"):
            if isinstance(kw.get(k), str):
                kw[k] = decode(kw[k])
        return cls(**kw)


# --- the verdict ---------------------------------------------------------------------------


def _known_fields(cls: type, d: Mapping[str, Any], *, tuples: Sequence[str]) -> dict[str, Any]:
    """The entries of ``d`` that name a field of the dataclass ``cls`` (others are dropped),
    those in ``tuples`` made tuples again (JSON has lists; a ``None`` becomes empty)."""
    kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
    for key in tuples:
        if key in kw:
            kw[key] = tuple(kw[key] or ())
    return kw


@dataclass(frozen=True)
class FigureVerdict:
    """The verdict on one figure of a benchmark, with every number that explains it.

    Times are seconds per call, fractions plain (0.03 = 3 %), noise on the
    log scale. ``baseline_s`` / ``current_s`` are the fastest run of each
    side; ``ratio`` is the ratio of the two fast modes (those fastest runs,
    corrected for how many runs each side has), with its ``ci_level``
    interval. ``slower`` is the slowdown the rule tested, from the runs'
    conservative bounds; it had to exceed ``cutoff`` (the ``threshold``, or
    ``z`` standard errors ``se`` when the noise is wider: ``cutoff_reason``),
    and either exceed ``decisive`` (two runs) or ``one_run``, or be seen in
    ``runs_needed`` runs. ``resolution`` is the slowdown caught with 95 %
    probability once ``runs_needed`` runs are in.
    """

    figure: str
    klass: str
    kind: str
    final: bool
    k: int
    r: int
    baseline_s: float
    current_s: float
    ratio: float
    ratio_low: float
    ratio_high: float
    slower: float
    cutoff: float
    cutoff_reason: str
    decisive: float
    one_run: float
    noise: float
    noise_prior: float
    noise_own: float | None
    se: float
    z: float
    resolution: float
    runs_needed: int
    reasons: tuple[str, ...] = ()
    baseline_runs: tuple[float, ...] = ()
    current_runs: tuple[float, ...] = ()
    #: for kind inconclusive: which kind of inconclusive it is (see :class:`Comparison`)
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = json_safe(asdict(self))
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FigureVerdict:
        kw = _known_fields(cls, d, tuples=("reasons", "baseline_runs", "current_runs"))
        for key in ("decisive", "one_run", "resolution", "ratio_high", "ratio"):
            if key in kw and kw[key] is None:
                kw[key] = math.inf
        return cls(**kw)


@dataclass(frozen=True)
class Comparison:
    """The verdict on one benchmark at one look, with the figure that decided it.

    The top-level numbers are those of the deciding figure (``figure``):
    the one that failed, or the main figure when none did. ``figures`` holds
    every figure's verdict. ``look`` counts the runs so far (the session's,
    then each fresh process); ``final`` is False while a suspect waits for
    another run. ``environment`` lists hard differences of the environment
    (then nothing is gated); ``notes`` say what else the reader should know.
    """

    kind: str
    final: bool
    look: int
    looks: int
    name: str | None = None
    figure: str | None = None
    klass: str | None = None
    k: int = 0
    r: int = 0
    baseline_s: float | None = None
    current_s: float | None = None
    ratio: float | None = None
    ratio_low: float | None = None
    ratio_high: float | None = None
    ci_level: float = 0.90
    slower: float | None = None
    threshold: float = 0.03
    threshold_in_force: float | None = None
    threshold_reason: str | None = None
    decisive: float | None = None
    alpha: float = 0.0002
    noise: float | None = None
    noise_prior: float | None = None
    noise_own: float | None = None
    se: float | None = None
    z: float | None = None
    resolution: float | None = None
    runs_needed: int | None = None
    reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    environment: tuple[str, ...] = ()
    current_runs: tuple[float, ...] = ()
    baseline_runs: tuple[float, ...] = ()
    figures: tuple[FigureVerdict, ...] = field(default=())
    #: peak memory and first-call time against the same baseline runs (the gate adds them)
    secondary: tuple[SecondaryComparison, ...] = ()
    #: the output's numerics against the baseline's (the gate adds it; None when not compared)
    numerics: NumericsComparison | None = None
    #: for kind inconclusive, which kind: "below-resolution", "unconfirmed", "unmeasurable"
    #: (no good evidence on a side), "environment" or "not-comparable" (a tracer or profiler
    #: on one side only)
    why: str = ""

    @property
    def gated(self) -> bool:
        return self.kind in GATED_KINDS

    @property
    def slowdown(self) -> float | None:
        return None if self.ratio is None else self.ratio - 1.0

    def figure_verdict(self, figure: str) -> FigureVerdict | None:
        return next((f for f in self.figures if f.figure == figure), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON builtins: non-finite numbers become null, except the numerics' (their own
        ``to_dict`` writes them as ``"inf"`` / ``"nan"``)."""
        d = asdict(self)
        d["numerics"] = None if self.numerics is None else self.numerics.to_dict()
        out: dict[str, Any] = json_safe(d)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Comparison:
        """Back from :meth:`to_dict` (keys it does not know, such as the ``diagnosis`` that a
        result's JSON keeps here, are ignored)."""
        tuples = ("reasons", "notes", "environment", "current_runs", "baseline_runs")
        kw = _known_fields(cls, d, tuples=tuples)
        if "figures" in kw:
            kw["figures"] = tuple(FigureVerdict.from_dict(f) for f in kw["figures"] or ())
        if "secondary" in kw:
            kw["secondary"] = tuple(SecondaryComparison.from_dict(x) for x in kw["secondary"] or ())
        if "numerics" in kw:
            n = kw["numerics"]
            kw["numerics"] = NumericsComparison.from_dict(n) if n else None
        return cls(**kw)


# --- the diagnosis -------------------------------------------------------------------------


@dataclass
class Diagnosis:
    """What the evidence capture found for one benchmark (``key``): the paragraph that
    opens the failure message, the causes (most likely first), the details under it."""

    key: str
    paragraph: str
    causes: list[str]
    details: list[str] = field(default_factory=list)

    @property
    def cause(self) -> str | None:
        """The most likely cause (first of :attr:`causes`)."""
        return self.causes[0] if self.causes else None

    def text(self) -> str:
        out = [self.paragraph]
        if self.details:
            out.append("")
            out.extend(f"  {d}" for d in self.details)
        return "\n".join(out)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "cause": self.cause,
            "causes": list(self.causes),
            "paragraph": self.paragraph,
            "details": list(self.details),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Diagnosis:
        """Back from :meth:`to_dict` (``cause`` is the first of ``causes``)."""
        causes = d.get("causes") or ([d["cause"]] if d.get("cause") else [])
        return cls(
            key=str(d.get("key") or ""),
            paragraph=str(d.get("paragraph") or ""),
            causes=[str(c) for c in causes],
            details=[str(x) for x in d.get("details") or ()],
        )

"""What was concluded about one result (its verdict and its diagnosis), as values that
:class:`~pytest_gpuperf.model.Result` carries: frozen and typed from the verdict to the
reports, a dict only at the edges (``to_dict`` / ``from_dict``). Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
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
#: Which kind of inconclusive (``why``): a slowdown the interval cannot rule out though none
#: beyond the threshold in force was seen (too small to tell, never "no change"); a suspect no
#: run could confirm; no good evidence on a side (runs without a steady level, or that waited
#: for a CPU); a tracer or profiler on one side only.
BELOW_RESOLUTION, UNCONFIRMED = "below-resolution", "unconfirmed"
UNMEASURABLE, NOT_COMPARABLE = "unmeasurable", "not-comparable"
#: Kinds that were gated (compared with comparable baseline runs).
GATED_KINDS = (REGRESSION, IMPROVEMENT, NO_CHANGE, INCONCLUSIVE)


# --- beside time: the secondary metrics and the output's numerics -----------------------


def _known(cls: Any, d: Mapping[str, Any]) -> dict[str, Any]:
    """The items of ``d`` that are fields of the dataclass ``cls``."""
    return {f.name: d[f.name] for f in fields(cls) if f.name in d}


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

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SecondaryComparison:
        return cls(**_known(cls, d))


#: :attr:`NumericsComparison.kind` values (also :mod:`pytest_gpuperf.verdict.numerics`'s
#: ``SAME``, ``CHANGED``, ``UNSEEDED``; no baseline is :data:`NO_BASELINE`).
NUMERICS_SAME = "same"
NUMERICS_CHANGED = "changed"
NUMERICS_UNSEEDED = "unseeded"
#: The numbers of a :class:`NumericsComparison` that may be infinite or NaN.
_MAYBE_INF = ("max_rel", "baseline_spread", "current_spread", "current", "baseline")


@dataclass(frozen=True)
class NumericsComparison:
    """The current output's fingerprint against the baseline's (JSON-safe via ``to_dict``).

    ``kind``: :data:`NUMERICS_SAME`, :data:`NUMERICS_CHANGED` (beyond ``tolerance``, or a change
    of dtype, shape, structure or NaN/Inf count), :data:`NUMERICS_UNSEEDED` (runs of the same
    code differ among themselves: nothing is concluded) or :data:`NO_BASELINE` (no baseline
    run has a fingerprint).
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
        for k in _MAYBE_INF:
            if isinstance(d[k], float) and not math.isfinite(d[k]):
                d[k] = encode(d[k])
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NumericsComparison:
        kw = _known(cls, d)
        kw["changes"] = tuple(kw.get("changes") or ())
        for k in _MAYBE_INF:
            if isinstance(kw.get(k), str):
                kw[k] = decode(kw[k])
        return cls(**kw)


# --- the verdict ---------------------------------------------------------------------------

#: A :class:`Reason` that is a finished sentence, made outside the rule (a difference of the
#: environment, a note of the session) or read back from a report.
TEXT = "text"
#: The codes of the rule's notes (its reasons' codes are the kinds and the ``why`` codes):
#: the conditions changed (telemetry); the end-to-end figure is missing from some runs; bad
#: evidence was left out; the current code waits for the GPU inside the call, or no longer.
ENVIRONMENT, E2E_MISSING, LEFT_OUT = "environment", "e2e-missing", "left-out"
WAITS_NOW, WAITS_NO_LONGER = "waits-now", "waits-no-longer"


@dataclass(frozen=True)
class Reason:
    """A reason or a note of a verdict as the rule gives it: a code and its numbers. The
    reports write the words (:func:`pytest_gpuperf.reporting.explain.words`)."""

    code: str
    numbers: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, **self.numbers}

    @classmethod
    def from_dict(cls, d: str | Mapping[str, Any]) -> Reason:
        """Back from :meth:`to_dict`, or a sentence (a report's JSON writes the words)."""
        if isinstance(d, str):
            return said(d)
        return cls(str(d["code"]), {k: v for k, v in d.items() if k != "code"})


def said(text: str) -> Reason:
    """A finished sentence as a reason or a note."""
    return Reason(TEXT, {"text": text})


Words = Callable[[Reason], str]


def _reasons(reasons: Sequence[Reason], words: Words | None) -> list[Any]:
    return [r.to_dict() if words is None else words(r) for r in reasons]


@dataclass(frozen=True)
class FigureVerdict:
    """The verdict on one figure of a benchmark, with every number that explains it.

    Times are seconds per call, fractions plain (0.03 = 3 %), noise on the log scale.
    ``baseline_s`` / ``current_s`` are the fastest run of each side; ``ratio`` is the ratio of
    the two fast modes (those fastest runs, corrected for how many runs each side has), with
    its ``ci_level`` interval. ``slower`` is the slowdown the rule tested, from the runs'
    conservative bounds; it had to exceed ``cutoff`` (the ``threshold``, or ``z`` standard
    errors ``se`` when the noise is wider: ``cutoff_reason``), and either exceed ``decisive``
    (two runs) or ``one_run``, or be seen in ``runs_needed`` runs. ``resolution`` is the
    slowdown caught with 95 % probability once ``runs_needed`` runs are in.
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
    reasons: tuple[Reason, ...] = ()
    baseline_runs: tuple[float, ...] = ()
    current_runs: tuple[float, ...] = ()
    #: for kind inconclusive: which kind of inconclusive it is (see :class:`Comparison`)
    why: str = ""

    def to_dict(self, words: Words | None = None) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["reasons"] = _reasons(self.reasons, words)
        return json_safe(d)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FigureVerdict:
        kw = _known(cls, d)
        for key in ("baseline_runs", "current_runs"):
            kw[key] = tuple(kw.get(key) or ())
        kw["reasons"] = tuple(Reason.from_dict(x) for x in kw.get("reasons") or ())
        for key in ("decisive", "one_run", "resolution", "ratio_high", "ratio"):
            if key in kw and kw[key] is None:
                kw[key] = math.inf
        return cls(**kw)


@dataclass(frozen=True)
class Terms:
    """The terms of the rule a verdict was reached under (its ``DecisionPolicy``'s)."""

    looks: int = 3
    threshold: float = 0.03
    alpha: float = 0.0002
    ci_level: float = 0.90


#: The JSON's keys of a comparison, in order; those of the lead figure under its field's name.
JSON_KEYS = (
    *("kind", "final", "look", "looks", "name", "figure", "klass", "k", "r", "baseline_s"),
    *("current_s", "ratio", "ratio_low", "ratio_high", "ci_level", "slower", "threshold"),
    *("threshold_in_force", "threshold_reason", "decisive", "alpha", "noise", "noise_prior"),
    *("noise_own", "se", "z", "resolution", "runs_needed", "reasons", "notes", "environment"),
    *("current_runs", "baseline_runs", "figures", "secondary", "numerics", "why"),
)
_OF_LEAD = {"threshold_in_force": "cutoff", "threshold_reason": "cutoff_reason"}
_LEAD_KEYS = tuple(
    k
    for k in JSON_KEYS[JSON_KEYS.index("figure") : JSON_KEYS.index("reasons")]
    if k not in Terms.__dataclass_fields__
)


@dataclass(frozen=True)
class Comparison:
    """The verdict on one benchmark at one look: ``lead`` is the figure that decided it (the
    one that failed, or the main figure when none did; None without a baseline), ``figures``
    every figure's verdict. ``look`` counts the runs so far; ``final`` is False while a
    suspect waits for another run. ``reasons`` say why (for a different environment: the hard
    differences, and nothing is gated); ``notes`` what else the reader should know."""

    kind: str
    final: bool
    look: int
    terms: Terms = Terms()
    name: str | None = None
    lead: FigureVerdict | None = None
    figures: tuple[FigureVerdict, ...] = ()
    reasons: tuple[Reason, ...] = ()
    notes: tuple[Reason, ...] = ()
    #: the current runs' levels when there is no lead figure (no baseline)
    runs: tuple[float, ...] = ()
    #: peak memory and first-call time against the same baseline runs (the gate adds them)
    secondary: tuple[SecondaryComparison, ...] = ()
    #: the output's numerics against the baseline's (the gate adds it; None when not compared)
    numerics: NumericsComparison | None = None

    @property
    def gated(self) -> bool:
        return self.kind in GATED_KINDS

    @property
    def why(self) -> str:
        """For kind inconclusive, which kind (:data:`BELOW_RESOLUTION`, ...: see there)."""
        return self.lead.why if self.lead is not None and self.kind == INCONCLUSIVE else ""

    @property
    def environment(self) -> tuple[Reason, ...]:
        """Hard differences of the environment (then nothing is gated)."""
        return self.reasons if self.kind == DIFFERENT_ENVIRONMENT else ()

    @property
    def shown(self) -> FigureVerdict | None:
        """The lead figure when its change is shown: not for runs that are no evidence."""
        return None if self.why == UNMEASURABLE else self.lead

    @property
    def ratio(self) -> float | None:
        return None if self.shown is None else self.shown.ratio

    @property
    def current_runs(self) -> tuple[float, ...]:
        return self.runs if self.lead is None else self.lead.current_runs

    @property
    def current_s(self) -> float | None:
        if self.lead is not None:
            return self.lead.current_s
        return min(self.runs) if self.runs else None

    @property
    def baseline_s(self) -> float | None:
        return None if self.lead is None else self.lead.baseline_s

    @property
    def r(self) -> int:
        return len(self.runs) if self.lead is None else self.lead.r

    def to_dict(self, words: Words | None = None) -> dict[str, Any]:
        """JSON builtins: non-finite numbers become null, except the numerics' (their own
        ``to_dict`` writes them as ``"inf"`` / ``"nan"``); reasons and notes as codes and
        numbers, or as ``words`` writes them."""
        lead = self.lead
        d: dict[str, Any] = {k: None for k in _LEAD_KEYS}
        if lead is not None:
            d.update({k: getattr(lead, _OF_LEAD.get(k, k)) for k in _LEAD_KEYS})
            d["baseline_runs"], d["current_runs"] = lead.baseline_runs, lead.current_runs
            if self.shown is None:
                d.update(ratio=None, ratio_low=None, ratio_high=None)
        else:
            d.update(k=0, r=self.r, current_s=self.current_s, baseline_runs=())
            d["current_runs"] = self.runs
        d.update(asdict(self.terms), kind=self.kind, final=self.final, look=self.look)
        d.update(name=self.name, notes=_reasons(self.notes, words), why=self.why)
        d["reasons"] = [] if self.kind == DIFFERENT_ENVIRONMENT else _reasons(self.reasons, words)
        d["environment"] = _reasons(self.environment, words)
        d["figures"] = [f.to_dict(words) for f in self.figures]
        d["secondary"] = [asdict(x) for x in self.secondary]
        d["numerics"] = None if self.numerics is None else self.numerics.to_dict()
        return json_safe({k: d[k] for k in JSON_KEYS})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Comparison:
        """Back from :meth:`to_dict` (keys it does not know, such as the ``diagnosis`` that a
        result's JSON keeps here, are ignored)."""
        figures = tuple(FigureVerdict.from_dict(f) for f in d.get("figures") or ())
        n = d.get("numerics")
        env = d.get("kind") == DIFFERENT_ENVIRONMENT
        lead = next((f for f in figures if f.figure == d.get("figure")), None)
        return cls(
            kind=d["kind"],
            final=d["final"],
            look=d["look"],
            terms=Terms(**_known(Terms, d)),
            name=d.get("name"),
            lead=lead,
            figures=figures,
            reasons=tuple(map(Reason.from_dict, d.get("environment" if env else "reasons") or ())),
            notes=tuple(map(Reason.from_dict, d.get("notes") or ())),
            runs=tuple(d.get("current_runs") or ()) if lead is None else (),
            secondary=tuple(SecondaryComparison.from_dict(x) for x in d.get("secondary") or ()),
            numerics=NumericsComparison.from_dict(n) if n else None,
        )


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

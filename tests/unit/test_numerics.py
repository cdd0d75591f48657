"""The output fingerprint's comparison on synthetic fingerprints, and its torch adapter."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from pytest_gpuperf.baseline import codec
from pytest_gpuperf.measure import numerics_format as nf
from pytest_gpuperf.model import BenchId, Run
from pytest_gpuperf.outcome import (
    NUMERICS_CHANGED,
    NUMERICS_SAME,
    NUMERICS_UNSEEDED,
    NumericsComparison,
)
from pytest_gpuperf.reporting.explain import numerics_words
from pytest_gpuperf.verdict import numerics as nm


def entry(
    values: list[float], *, path: str = "out", dtype: str = "torch.float32", shape: Any = None
) -> dict[str, Any]:
    """A fingerprint entry of ``values`` computed the plain way (the truth to compare with)."""
    finite = [v for v in values if math.isfinite(v)]
    n = len(finite)
    mean = sum(finite) / n if n else None
    stats = {
        "mean": mean,
        "abs_mean": sum(abs(v) for v in finite) / n if n else None,
        "min": min(finite) if n else None,
        "max": max(finite) if n else None,
        "std": math.sqrt(sum((v - mean) ** 2 for v in finite) / n) if mean is not None else None,
    }
    return {
        "path": path,
        "shape": list(shape) if shape is not None else [len(values)],
        "dtype": dtype,
        "numel": len(values),
        "nan": sum(math.isnan(v) for v in values),
        "inf": sum(math.isinf(v) for v in values),
        "stats": stats,
        "samples": [nf.encode(values[i]) for i in nf.sample_indices(len(values))],
    }


def values(seed: int, n: int = 1000) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(0.0, 1.0) for _ in range(n)]


def stored(*fps: Any, commit: str | None = None) -> list[nm.StoredFingerprint]:
    return [nm.StoredFingerprint(fp, commit) for fp in fps]


# --- sample positions --------------------------------------------------------------


# the edges (empty, fewer elements than samples, exactly as many) and a seeded spread of sizes
_SIZES = [0, 1, 2, nf.SAMPLES - 1, nf.SAMPLES, nf.SAMPLES + 1, 10**9] + [
    random.Random(3).randint(0, 10**9) for _ in range(40)
]


@pytest.mark.parametrize("numel", _SIZES)
def test_sample_positions_are_spread_in_range_and_fixed(numel: int) -> None:
    idx = nf.sample_indices(numel)
    assert idx == nf.sample_indices(numel)
    assert len(idx) == min(numel, nf.SAMPLES)
    assert idx == sorted(set(idx))
    if numel:
        assert idx[0] == 0 and idx[-1] == numel - 1


# --- comparison ---------------------------------------------------------------------


def test_the_same_output_is_the_same() -> None:
    fp = [entry(values(1))]
    c = nm.compare(stored(fp), [fp], 1e-3)
    assert c.kind == NUMERICS_SAME and c.max_rel == 0.0 and not c.changes


@pytest.mark.parametrize(("shift", "kind"), [(1e-5, NUMERICS_SAME), (1e-2, NUMERICS_CHANGED)])
def test_a_shift_is_a_change_only_beyond_the_tolerance(shift: float, kind: str) -> None:
    base = values(2)
    c = nm.compare(stored([entry(base)]), [[entry([v + shift for v in base])]], 1e-3)
    assert c.kind == kind
    # the truth: a shift s moves every value by s; relative to the values' scale (their
    # mean absolute value, ~0.8 here, or a larger value) it is at most s / scale
    scale = sum(abs(v) for v in base) / len(base)
    assert 0 < c.max_rel is not None and c.max_rel <= shift / scale * 1.0001


def test_a_relative_difference_is_taken_against_the_scale_not_a_value_near_zero() -> None:
    base = values(3)
    base[0] = 1e-12  # the first sample: almost zero
    cur = list(base)
    cur[0] = 2e-12
    c = nm.compare(stored([entry(base)]), [[entry(cur)]], 1e-3)
    assert c.kind == NUMERICS_SAME, c


def test_dtype_shape_and_structure_changes_are_reported() -> None:
    v = values(4, 64)
    base = [entry(v), entry(v, path="out[1]")]
    cur = [
        entry(v, dtype="torch.bfloat16"),
        entry(v, path="out[2]"),
    ]
    c = nm.compare(stored(base), [cur], 1e-3)
    assert c.kind == NUMERICS_CHANGED and c.max_rel == 0.0
    assert "out dtype float32 -> bfloat16" in c.changes
    assert "no longer returned: out[1]" in c.changes and "newly returned: out[2]" in c.changes
    reshaped = nm.compare(stored(base[:1]), [[entry(v, shape=[8, 8])]], 1e-3)
    assert reshaped.changes == ("out shape (64) -> (8, 8)",)
    text = numerics_words(reshaped)
    assert "output changed" in text and "out shape (64) -> (8, 8)" in text


def test_a_value_that_became_nan_is_a_change() -> None:
    v = values(5, 16)
    bad = list(v)
    bad[3] = math.nan
    c = nm.compare(stored([entry(v)]), [[entry(bad)]], 0.5)
    assert c.kind == NUMERICS_CHANGED
    assert c.max_rel == math.inf and "out NaN count 0 -> 1" in c.changes
    d = c.to_dict()  # JSON has neither inf nor NaN: encoded, and decoded again
    assert d["max_rel"] == "inf" and d["current"] == "nan"
    assert NumericsComparison.from_dict(d).to_dict() == d


def test_unseeded_baseline_runs_are_detected_and_never_fail() -> None:
    runs = stored(*[[entry(values(seed))] for seed in (10, 11, 12)])
    c = nm.compare(runs, [[entry(values(13))]], 1e-3, gated=True)
    assert c.kind == NUMERICS_UNSEEDED and not c.fails
    assert c.baseline_spread is not None and c.baseline_spread > 0.1
    assert "seed the inputs (torch.manual_seed)" in numerics_words(c)


def test_a_dtype_change_among_baseline_runs_hides_not_their_spread() -> None:
    """Runs of one commit whose values differ are unseeded, whichever run also changed its
    dtype: the spread is the largest difference, not the last structural one's (0 here)."""
    fp0, fp1 = [entry(values(10))], [entry(values(11))]
    half = [entry(values(10), dtype="torch.float16")]
    c = nm.compare(stored(fp0, fp1, half), [fp0], 1e-3, gated=True)
    assert c.kind == NUMERICS_UNSEEDED and not c.fails
    assert c.baseline_spread is not None and c.baseline_spread > 0.1


def test_unseeded_current_runs_are_detected() -> None:
    fp = [entry(values(20))]
    c = nm.compare(stored(fp, fp), [fp, [entry(values(21))]], 1e-3, gated=True)
    assert c.kind == NUMERICS_UNSEEDED and not c.fails and c.current_spread is not None


def test_baseline_runs_of_different_commits_may_differ() -> None:
    old, new = [entry(values(30))], [entry(values(31))]
    runs = [nm.StoredFingerprint(old, "aaa"), nm.StoredFingerprint(new, "bbb")]
    c = nm.compare(runs, [new], 1e-3, gated=True)
    assert c.kind == NUMERICS_SAME  # against the newest; the history changed with the code
    runs.append(nm.StoredFingerprint([entry(values(32))], "bbb"))
    assert nm.compare(runs, [new], 1e-3).kind == NUMERICS_UNSEEDED


def test_gating_fails_only_a_change() -> None:
    base = [entry(values(40))]
    cur = [entry([v * 1.01 for v in values(40)])]
    assert nm.compare(stored(base), [cur], 1e-3, gated=True).fails
    assert not nm.compare(stored(base), [cur], 1e-3, gated=False).fails
    assert not nm.compare(stored(base), [base], 1e-3, gated=True).fails
    assert nm.compare([], [cur], 1e-3).kind == nm.NO_BASELINE


# --- validation and storage ------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda e: e.update(path=""), "[0].path"),
        (lambda e: e.update(shape=[-1]), "[0].shape"),
        (lambda e: e["stats"].update(mean=math.nan), "[0].stats"),
        (lambda e: e.update(samples=["x"]), "[0].samples"),
        (lambda e: e.update(samples=[0.0] * (nf.SAMPLES + 1)), "[0].samples"),
        (lambda e: e.update(colour="red"), "unknown field 'colour'"),
    ],
)
def test_a_bad_fingerprint_is_refused(edit: Any, problem: str) -> None:
    e = entry(values(50, 32))
    assert nf.problem([e]) is None
    edit(e)
    assert problem in (nf.problem([e]) or "")


def _run(numerics: Any) -> Run:
    return Run(id=BenchId("t.py::test_a"), device="cpu", rounds=(1e-3,) * 5, calls_per_round=1,
               first_call_s=0.01, numerics=numerics, run_id="r",
               timestamp="2025-01-01T00:00:00+00:00")  # fmt: skip


def test_a_stored_run_keeps_the_fingerprint_and_its_check_is_the_formats() -> None:
    fp = [entry(values(60, 64))]
    line = codec.run_line(_run(fp))
    assert line["numerics"] == fp
    codec.check_line(line, "run")
    line["numerics"] = [{"path": "out"}]
    with pytest.raises(codec.SchemaProblem, match=r"run\.numerics: expected a numerics"):
        codec.check_line(line, "run")
    assert "numerics" not in codec.run_line(_run(None))


# --- the torch adapter -------------------------------------------------------------------


def test_the_adapter_matches_the_plain_computation() -> None:
    torch = pytest.importorskip("torch")
    from pytest_gpuperf.measure import numerics as adapter

    v = values(70, 3000)
    v[5], v[7] = math.nan, -math.inf
    t = torch.tensor(v, dtype=torch.float64)
    fp = adapter.fingerprint_output({"a": (t, 3, "text"), "b": [t.reshape(30, 100).float()]})
    assert fp is not None and [e["path"] for e in fp] == ["out['a'][0]", "out['b'][0]"]
    want = entry(v, dtype="torch.float64")
    got = fp[0]
    assert {k: got[k] for k in ("shape", "dtype", "numel", "nan", "inf", "samples")} == {
        k: want[k] for k in ("shape", "dtype", "numel", "nan", "inf", "samples")
    }
    for s in nm.STATS:
        assert got["stats"][s] == pytest.approx(want["stats"][s], rel=1e-9, abs=1e-12)
    assert fp[1]["shape"] == [30, 100] and fp[1]["dtype"] == "torch.float32"
    assert nf.problem(fp) is None
    assert adapter.fingerprint_output((1, "x", None)) is None


def test_the_adapter_combines_chunks_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from pytest_gpuperf.measure import numerics as adapter

    t = torch.tensor(values(80, 1001), dtype=torch.float64) + 1e3  # cancellation-prone
    whole = adapter.fingerprint_output(t)
    monkeypatch.setattr(adapter, "CHUNK", 97)
    chunked = adapter.fingerprint_output(t)
    assert whole is not None and chunked is not None
    for s in nm.STATS:
        assert chunked[0]["stats"][s] == pytest.approx(whole[0]["stats"][s], rel=1e-12)


class _BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr boom")


def test_a_key_whose_repr_raises_is_named_by_its_type() -> None:
    """T9: a dict key whose ``repr`` raised failed the benchmark."""
    torch = pytest.importorskip("torch")
    from pytest_gpuperf.measure import numerics as adapter

    fp = adapter.fingerprint_output({_BadRepr(): torch.ones(3)})
    assert fp is not None and [e["path"] for e in fp] == ["out[<_BadRepr key>]"]


class _CountingDict(dict):  # type: ignore[type-arg]
    calls = 0

    def items(self) -> Any:
        type(self).calls += 1
        return super().items()


def test_a_structure_that_holds_itself_is_walked_once() -> None:
    """T9: self-references were walked to depth 8 each time (16 of them: minutes)."""
    torch = pytest.importorskip("torch")
    from pytest_gpuperf.measure import numerics as adapter

    _CountingDict.calls = 0
    d = _CountingDict()
    for i in range(4):
        d[i] = d  # 4**8 paths to walk without a record of what was entered
    lst: list[Any] = []
    lst.extend([lst] * 4)
    d["t"] = (lst, torch.ones(2))
    fp = adapter.fingerprint_output(d)
    assert _CountingDict.calls == 1
    assert fp is not None and [e["path"] for e in fp] == ["out['t'][1]"]


def test_the_walk_stops_at_its_node_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from pytest_gpuperf.measure import numerics as adapter

    monkeypatch.setattr(adapter, "MAX_NODES", 50)
    out = [[] for _ in range(100)] + [torch.ones(2)]
    assert adapter.fingerprint_output(out) is None
    assert adapter.fingerprint_output([torch.ones(2), *out]) is not None


def test_a_huge_tensor_is_read_through_a_strided_view(monkeypatch: pytest.MonkeyPatch) -> None:
    """T9: a 200M-element output cost 7.8 s and 1.1 GB; now at most MAX_READ elements are
    read, through a view on the tensor's own device (no copy of the whole)."""
    torch = pytest.importorskip("torch")
    from pytest_gpuperf.measure import numerics as adapter

    monkeypatch.setattr(adapter, "MAX_READ", 1000)
    read: list[int] = []
    stats = adapter._stats
    monkeypatch.setattr(adapter, "_stats", lambda flat: read.append(flat.numel()) or stats(flat))
    t = torch.arange(100 * 97, dtype=torch.float32).reshape(100, 97) / (100 * 97)
    view = adapter._read_view(t)
    assert view.numel() <= 1000 and view.data_ptr() == t.data_ptr()
    assert view.device == t.device
    fp = adapter.fingerprint_output(t.t())  # non-contiguous too
    assert fp is not None and read and max(read) <= 1000
    [e] = fp
    assert e["numel"] == 9700 and e["shape"] == [97, 100] and nf.problem(fp) is None
    assert e["stats"]["mean"] == pytest.approx(0.5, abs=0.05)


def test_the_walk_stops_at_its_time_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """T9: bounded time as well as nodes (a container whose iteration is slow): the walk
    reads the clock as it goes and stops once MAX_WALK_S has passed."""
    torch = pytest.importorskip("torch")
    from pytest_gpuperf.measure import numerics as adapter

    now = [0.0]

    def clock() -> float:  # each look at the clock: a tenth of a second later
        now[0] += 0.1
        return now[0]

    monkeypatch.setattr(adapter.time, "monotonic", clock)
    out = [[] for _ in range(100)] + [torch.ones(2)]
    assert adapter.fingerprint_output(out) is None
    assert now[0] < 0.1 * 30  # stopped within a few looks past the budget

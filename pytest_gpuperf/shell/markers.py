"""The ``gpuperf`` marker: validation (a collection error naming the test and the word) and
shape/dtype parametrisation."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.shell.config import ConfigError, GpuPerfConfig
from pytest_gpuperf.shell.options import MARKER_ONLY, PER_TEST_OPTIONS

if TYPE_CHECKING:
    import pytest

MARKER = "gpuperf"
FIXTURE = "gpu_bench"
MARKER_HELP = (
    "gpuperf(shapes=None, dtypes=None, world_size=None, **options): a GPU performance "
    "benchmark. shapes= parametrizes the test's `shape` argument, dtypes= its `dtype` "
    "argument; world_size=N runs the test on N ranks (one process per GPU, torch.distributed "
    "initialised: NCCL on CUDA, gloo on the CPU); other keywords override measurement options "
    "for this test (cuda_graph, l2_flush, warmup_ms, round_ms, rounds, flops, bytes, "
    "collective, ...)."
)

VALID_KEYWORDS = frozenset(PER_TEST_OPTIONS | MARKER_ONLY)


class MarkerError(ValueError):
    """A bad ``gpuperf`` marker; raised during collection."""


def format_param(value: Any) -> str:
    """Readable id of a parameter value: ``(4096, 4096)`` -> ``4096x4096``, ``torch.bfloat16`` ->
    ``bfloat16``."""
    if isinstance(value, (tuple, list)):
        return "x".join(format_param(v) for v in value) or "empty"
    return str(value).removeprefix("torch.")


def world_size(item: Any) -> int | None:
    """The ``world_size=`` of a test's ``gpuperf`` marker (None: it runs in one process)."""
    n = marker_kwargs(item).get("world_size")
    return int(n) if isinstance(n, int) and not isinstance(n, bool) else None


def marker_kwargs(item_or_def: Any) -> dict[str, Any]:
    """The keywords of the closest ``gpuperf`` marker (class and module markers are merged)."""
    merged: dict[str, Any] = {}
    for m in item_or_def.iter_markers(MARKER):  # closest first: farther ones fill gaps
        for k, v in m.kwargs.items():
            merged.setdefault(k, v)
    return merged


def validate(test: str, marks: Sequence[Any], config: GpuPerfConfig | None) -> dict[str, Any]:
    """Check every ``gpuperf`` marker on a test; return the merged keywords."""
    merged = _merged(test, marks)
    for key in ("shapes", "dtypes"):
        vals = merged.get(key)
        if key in merged and (
            isinstance(vals, (str, bytes)) or not isinstance(vals, Sequence) or not vals
        ):
            raise MarkerError(
                f"{test}: {key}= of @pytest.mark.gpuperf must be a non-empty list, got {vals!r}"
            )
    for value in merged.get("dtypes", ()):
        _check_dtype(test, value)
    n = merged.get("world_size", 1)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise MarkerError(
            f"{test}: world_size= of @pytest.mark.gpuperf must be a whole number of ranks, "
            f"1 or more, got {n!r}; e.g. @pytest.mark.gpuperf(world_size=2)"
        )
    if config is not None:
        options = {k: v for k, v in merged.items() if k in PER_TEST_OPTIONS}
        try:
            config.resolve(options, marker_where=f"{test}: @pytest.mark.gpuperf")
        except ConfigError as e:
            raise MarkerError(str(e)) from None
    return merged


def _merged(test: str, marks: Sequence[Any]) -> dict[str, Any]:
    """The keywords of ``marks`` (closest first), each one known."""
    merged: dict[str, Any] = {}
    for m in marks:
        if m.args:
            raise MarkerError(
                f"{test}: @pytest.mark.gpuperf takes keywords only, got positional "
                f"argument(s) {', '.join(repr(a) for a in m.args)}; write e.g. "
                "@pytest.mark.gpuperf(shapes=[(1024, 1024)])"
            )
        for k, v in m.kwargs.items():
            if k not in VALID_KEYWORDS:
                close = difflib.get_close_matches(k, sorted(VALID_KEYWORDS), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise MarkerError(
                    f"{test}: unknown keyword {k!r} in @pytest.mark.gpuperf{hint} "
                    f"Valid keywords: {', '.join(sorted(VALID_KEYWORDS))}."
                )
            merged.setdefault(k, v)
    return merged


def _check_dtype(test: str, value: Any) -> None:
    """A ``dtypes=`` entry is a torch dtype, or the name of one (``"bfloat16"``)."""
    import torch  # a marker with dtypes= is on a torch test: torch is imported already

    name = value.removeprefix("torch.") if isinstance(value, str) else value
    if isinstance(value, torch.dtype):
        return
    if isinstance(name, str) and isinstance(getattr(torch, name, None), torch.dtype):
        return
    known = sorted(n for n in dir(torch) if isinstance(getattr(torch, n, None), torch.dtype))
    close = difflib.get_close_matches(str(name), known, n=1) if isinstance(name, str) else []
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise MarkerError(
        f"{test}: dtypes= of @pytest.mark.gpuperf: {value!r} is not a torch dtype{hint} "
        "Give torch dtypes, such as dtypes=[torch.bfloat16, torch.float32], or their names."
    )


def parametrize(metafunc: pytest.Metafunc, kwargs: Mapping[str, Any], test: str) -> None:
    """Apply ``shapes=`` and ``dtypes=`` to the test's ``shape`` / ``dtype`` arguments."""
    for key, arg in (("shapes", "shape"), ("dtypes", "dtype")):
        if key not in kwargs:
            continue
        if arg not in metafunc.fixturenames:
            raise MarkerError(
                f"{test}: @pytest.mark.gpuperf({key}=...) parametrizes an argument named "
                f"{arg!r}, but {test} has no {arg!r} argument; add it to the test's signature "
                f"(def {metafunc.function.__name__}(gpu_bench, {arg}, ...))"
            )
        for m in metafunc.definition.iter_markers("parametrize"):
            names = m.args[0] if m.args else m.kwargs.get("argnames", "")
            names = [n.strip() for n in names.split(",")] if isinstance(names, str) else names
            if arg in names:
                raise MarkerError(
                    f"{test}: {arg!r} is parametrized twice, by @pytest.mark.parametrize and "
                    f"by @pytest.mark.gpuperf({key}=...); keep one of them"
                )
        values = list(kwargs[key])
        metafunc.parametrize(arg, values, ids=[format_param(v) for v in values])

"""The parsers of option values, one per kind, each raising :class:`OptionValueError` with
what it expects: the pytest options and the command line parse with the same functions."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


class OptionValueError(ValueError):
    """A value that an option's parser refused; the message says what is expected."""


def parse_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in {"1", "true", "yes", "on"}:
        return True
    if isinstance(v, str) and v.strip().lower() in {"0", "false", "no", "off"}:
        return False
    raise OptionValueError(f"expected true or false, got {v!r}")


def _number(v: Any) -> float:
    if isinstance(v, bool):
        raise OptionValueError(f"expected a number, got {v!r}")
    if isinstance(v, (int, float)):
        x = float(v)
    elif isinstance(v, str):
        try:
            x = float(v)
        except ValueError:
            raise OptionValueError(f"expected a number, got {v!r}") from None
    else:
        raise OptionValueError(f"expected a number, got {type(v).__name__} {v!r}")
    if not math.isfinite(x):
        raise OptionValueError(f"expected a finite number, got {v!r}")
    return x


def _bounded(ok: Callable[[float], bool], expected: str) -> Callable[[Any], float]:
    """A parser of numbers for which ``ok`` holds; ``expected`` says which."""

    def parse(v: Any) -> float:
        x = _number(v)
        if not ok(x):
            raise OptionValueError(f"expected {expected}, got {v!r}")
        return x

    return parse


positive_float = _bounded(lambda x: x > 0, "a number > 0")
non_negative_float = _bounded(lambda x: x >= 0, "a number >= 0")
fraction = _bounded(lambda x: 0 <= x < 1, "a fraction in [0, 1) such as 0.03 for 3 %")
probability = _bounded(lambda x: 0 < x < 0.5, "a probability in (0, 0.5) such as 0.01")
telemetry_interval = _bounded(lambda x: 1 <= x <= 1000, "a sampling interval from 1 to 1000 ms")


def int_at_least(lo: int) -> Callable[[Any], int]:
    def parse(v: Any) -> int:
        x = _number(v)
        if x != int(x) or x < lo:
            raise OptionValueError(f"expected a whole number >= {lo}, got {v!r}")
        return int(x)

    return parse


def choice(*choices: str) -> Callable[[Any], str]:
    def parse(v: Any) -> str:
        if isinstance(v, str) and v.strip().lower() in choices:
            return v.strip().lower()
        raise OptionValueError(f"expected one of {', '.join(choices)}; got {v!r}")

    parse.choices = choices  # type: ignore[attr-defined]  # the help's metavar
    return parse


def cuda_graph_mode(v: Any) -> bool | str:
    """``False``, ``True`` or ``"both"`` (also ``"off"``/``"on"`` from the command line)."""
    if isinstance(v, str) and v.strip().lower() == "both":
        return "both"
    try:
        return parse_bool(v)
    except OptionValueError:
        raise OptionValueError(f"expected False, True or 'both', got {v!r}") from None


def number_or_callable(v: Any) -> Any:
    """``flops=`` / ``bytes=``: a number, a callable of the test's parameters, or None."""
    if v is None or callable(v):
        return v
    return non_negative_float(v)


def text(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise OptionValueError(f"expected a non-empty string, got {v!r}")
    return v.strip()


def baseline_name(v: Any) -> str:
    """A baseline name: it becomes a file name, so letters, digits, '.', '_' and '-'."""
    from pytest_gpuperf.baseline import check_name
    from pytest_gpuperf.errors import InvalidBaselineName

    name = text(v)
    try:
        return check_name(name)
    except InvalidBaselineName as e:
        raise OptionValueError(str(e)) from None


def name_list(v: Any) -> tuple[str, ...]:
    """Names separated by commas or spaces (``"nsys,ncu"``); empty for none."""
    if v is None:
        return ()
    out = []
    for x in v if isinstance(v, (list, tuple)) else _words(v, "names"):
        name = str(x).strip().lower()
        if not name.replace("_", "").replace("-", "").isalnum():
            raise OptionValueError(f"expected names such as nsys,ncu; {x!r} is not a name")
        out.append(name)
    return tuple(out)


def _words(v: Any, what: str) -> list[str]:
    if isinstance(v, (list, tuple)):
        return [str(x).strip() for x in v if str(x).strip()]
    if not isinstance(v, str):
        raise OptionValueError(f"expected {what} separated by commas, got {v!r}")
    return [x for x in v.replace(",", " ").split() if x]


def _unknown(what: str, word: Any, key: str, known: Any, listing: str = "keys") -> OptionValueError:
    """``word`` (``key`` once normalised) is none of ``known``: the closest, then all."""
    import difflib

    close = difflib.get_close_matches(key, sorted(known), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return OptionValueError(f"unknown {what} {word!r}{hint}; {listing}: " + ", ".join(known))


def table_columns(v: Any) -> tuple[str, ...] | None:
    """``--gpuperf-columns``: the terminal table's columns, e.g. ``median,ci,verdict``."""
    from pytest_gpuperf.reporting.columns import COLUMNS  # only when the option is given

    if v is None:
        return None
    out = []
    for word in _words(v, "column names"):
        key = word.lower().replace("-", "_")
        if key not in COLUMNS:
            raise _unknown("column", word, key, COLUMNS, "columns")
        out.append(key)
    if not out:
        raise OptionValueError("expected at least one column, e.g. median,ci,verdict")
    return tuple(dict.fromkeys(out))


def sort_key(v: Any) -> str:
    """``--gpuperf-sort``: the order of the terminal table's rows."""
    from pytest_gpuperf.reporting.terminal import SORT_KEYS

    key = text(v).lower().replace("-", "_")
    if key not in SORT_KEYS:
        raise _unknown("sort key", v, key, SORT_KEYS)
    return key


def group_keys(v: Any) -> tuple[str, ...]:
    """``--gpuperf-group-by``: ``func``, ``param:dtype``, ... (several separated by commas)."""
    from pytest_gpuperf.reporting.terminal import GROUP_KEYS

    if v is None:
        return ()
    out = []
    for word in _words(v, "group keys"):
        key = word.lower()
        if key.startswith("param:") and len(key) > len("param:"):
            out.append("param:" + word.split(":", 1)[1])
        elif key in GROUP_KEYS and key != "param:name":
            out.append(key)
        else:
            raise _unknown("group key", word, key, GROUP_KEYS)
    return tuple(dict.fromkeys(out))


def collective_name(v: Any) -> str | None:
    """``collective=``: one of the collectives whose bus bandwidth nccl-tests defines."""
    from pytest_gpuperf.measure.collectives import check

    if v is None:
        return None
    if not isinstance(v, str):
        raise OptionValueError(f"expected the name of a collective, got {type(v).__name__} {v!r}")
    try:
        return check(v)
    except ValueError as e:
        raise OptionValueError(str(e)) from None

"""Named baselines: the store (:mod:`.store`), what it holds (:mod:`.records`), the format
(:mod:`.codec`, on disk :mod:`.files`), the environment's fingerprint (:mod:`.fingerprint`),
and the file helpers (:mod:`.fileio`, :mod:`.filelock`).

This module is light on purpose: the option parser and the CLI's ``--help``
import it for the defaults and the name rule, defined here once. It imports
none of its submodules (they import it): take the store's classes from
:mod:`.store` and :mod:`.records`.

Pure Python: no torch, no pytest.
"""

from __future__ import annotations

import re

from pytest_gpuperf.errors import InvalidBaselineName

__all__ = [
    "DEFAULT_DIR",
    "DEFAULT_KEEP_RUNS",
    "NAME_PATTERN",
    "NAME_RULE",
    "check_name",
    "is_name",
]

#: Where baselines live unless ``--gpuperf-baseline-dir`` (or the CLI's ``--dir``) says otherwise.
DEFAULT_DIR = ".gpuperf/baselines"
#: Runs kept per benchmark and fingerprint. 20: the verdict's power (the smallest
#: slowdown it catches) is planned for a 20-run history; more runs barely narrow the t
#: quantile (29 vs 39 degrees of freedom with the prior's 10), while they keep staler
#: runs and grow the file by half.
DEFAULT_KEEP_RUNS = 20
#: A baseline name is a plain file name: no separators, not hidden, not "." or "..", and
#: not starting with "-" (a command line would read ``-n`` as an option).
NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
#: What :data:`NAME_PATTERN` accepts, said to a user.
NAME_RULE = (
    "use letters, digits, '.', '_' and '-' (at most 100, not starting with '.' or '-'), "
    "e.g. main or nightly-h200"
)


def check_name(name: str) -> str:
    """``name`` if it is a valid baseline name, else :class:`InvalidBaselineName`.

    A name ending in ``.json`` is refused: the file would be ``main.json.json``.
    """
    if isinstance(name, str) and name.startswith("-") and NAME_PATTERN.fullmatch(name.lstrip("-")):
        raise InvalidBaselineName(
            f"invalid baseline name {name!r}: a name cannot start with '-' (a command line "
            f"reads it as an option); use {name.lstrip('-')!r}"
        )
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidBaselineName(f"invalid baseline name {name!r}: {NAME_RULE}")
    if name.lower().endswith(".json"):
        raise InvalidBaselineName(
            f"invalid baseline name {name!r}: give the name without .json: use "
            f"{name[:-5]!r} (its file is {name[:-5]}.json)"
        )
    return name


def is_name(text: str) -> bool:
    """Whether ``text`` is a valid baseline name (:func:`check_name` would accept it)."""
    try:
        check_name(text)
    except InvalidBaselineName:
        return False
    return True

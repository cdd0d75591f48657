"""Named baselines: the store (:mod:`.store`), what it holds (:mod:`.records`), the format
(:mod:`.codec`, on disk :mod:`.files`), the environment's fingerprint (:mod:`.fingerprint`),
and the file helpers (:mod:`.fileio`, :mod:`.filelock`).

Light on purpose: the option parser and ``--help`` import it for the defaults and the
name rule; it imports none of its submodules.
"""

from __future__ import annotations

import re

from pytest_gpuperf.errors import InvalidBaselineName

#: Where baselines live unless ``--gpuperf-baseline-dir`` (or the CLI's ``--dir``) says otherwise.
DEFAULT_DIR = ".gpuperf/baselines"
#: Runs kept per benchmark and fingerprint: the verdict's power is planned for 20; more
#: barely narrow the t quantile, keep staler runs and grow the file.
DEFAULT_KEEP_RUNS = 20
#: A plain file name: no separators, not hidden, not starting with "-" (an option).
NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
NAME_RULE = (
    "use letters, digits, '.', '_' and '-' (at most 100, not starting with '.' or '-'), "
    "e.g. main or nightly-h200"
)


def check_name(name: str) -> str:
    """``name`` if it is a valid baseline name, else :class:`InvalidBaselineName`."""
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
    try:
        check_name(text)
    except InvalidBaselineName:
        return False
    return True

"""Settings fields tied to their options, in the core so that each settings class lives in
the lowest ring that reads it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

OPTION = "option"
_S = TypeVar("_S")


def option(name: str, default: Any) -> Any:
    """A field of a frozen settings dataclass whose value is the option ``name``
    (``--gpuperf-<name>``, declared in :mod:`pytest_gpuperf.shell.options`)."""
    return dataclasses.field(default=default, metadata={OPTION: name})


def option_fields(cls: type[Any]) -> dict[str, str]:
    """``{field name: option name}`` of a settings dataclass."""
    return {f.name: f.metadata[OPTION] for f in dataclasses.fields(cls) if OPTION in f.metadata}


def settings_from(cls: type[_S], values: Mapping[str, Any], base: _S | None = None) -> _S:
    """A settings dataclass from ``{option name: value}``: the fields whose option is in
    ``values`` take its value, the others ``base``'s (or their default)."""
    kw = {f: values[o] for f, o in option_fields(cls).items() if o in values}
    if base is not None:
        return dataclasses.replace(base, **kw)  # type: ignore[type-var]
    return cls(**kw)

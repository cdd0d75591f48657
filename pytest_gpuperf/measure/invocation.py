"""One call of the benchmarked function, with fresh arguments from ``setup=`` when it has one.

``gpu_bench(fn, *args, setup=make)`` runs ``make()`` before every call of
``fn``, untimed, as pytest-benchmark's ``pedantic(setup=...)`` does:

* with arguments given to ``gpu_bench``: ``make()`` resets them in place
  (e.g. ``x.copy_(x0)``), and ``fn`` gets them; what ``make()`` returns is
  ignored (``x.copy_(x0)`` returns ``x``), unless it is an ``(args, kwargs)``
  pair, which is an error (arguments given twice);
* without: ``make()`` returns ``(args, kwargs)``, a tuple (or list) of
  ``fn``'s positional arguments and a dict of its keyword arguments, made
  fresh for this call, or ``None`` (``fn`` takes no arguments).

The timers call :meth:`Invocation.prepare` outside their timed region and
then the invocation itself inside it. Pure Python.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pytest_gpuperf.errors import GpuPerfError


class SetupError(GpuPerfError, TypeError):
    """``setup=`` returned something that is not fn's arguments, or clashes with them."""


class Invocation:
    """``fn(*args, **kwargs)``; with ``setup``, the arguments of the next call are made first."""

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        setup: Callable[[], Any] | None = None,
    ):
        self.fn = fn
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.setup = setup
        self._next: tuple[tuple[Any, ...], dict[str, Any]] | None = None

    @property
    def has_setup(self) -> bool:
        return self.setup is not None

    def prepare(self) -> None:
        """Run ``setup`` (untimed) and keep what the next call gets; nothing without setup."""
        if self.setup is None:
            return
        made = self.setup()
        pair = (
            isinstance(made, tuple)
            and len(made) == 2
            and isinstance(made[0], (tuple, list))
            and isinstance(made[1], Mapping)
        )
        given = bool(self.args or self.kwargs)
        if given and pair:
            raise SetupError(
                "setup= of gpu_bench returned fn's arguments, but gpu_bench was given arguments "
                "for fn as well; pass them one way: from setup (return (args, kwargs)) or to "
                "gpu_bench (and let setup reset them in place)"
            )
        if made is None or given:
            # It reset the given arguments in place; what it returned (x.zero_() returns x)
            # is not an argument list.
            self._next = (self.args, self.kwargs)
            return
        if not pair:
            raise SetupError(
                f"setup= of gpu_bench returned {type(made).__name__} {made!r:.80}; it must return "
                "None (when it prepared the arguments in place) or (args, kwargs), a tuple of "
                "fn's positional arguments and a dict of its keyword arguments, e.g. "
                "return (x0.clone(),), {}"
            )
        self._next = (tuple(made[0]), dict(made[1]))

    def __call__(self) -> Any:
        """One call of ``fn``, with the prepared arguments (prepared now if they were not)."""
        if self.setup is None:
            return self.fn(*self.args, **self.kwargs)
        if self._next is None:
            self.prepare()
        assert self._next is not None
        args, kwargs = self._next
        self._next = None
        return self.fn(*args, **kwargs)

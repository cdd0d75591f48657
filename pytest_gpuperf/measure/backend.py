"""Timing backends: what a timer does (:class:`Timer`), what it times (:class:`Invocation`),
and the modes that make one (:class:`Modes`).

Everything that differs between modes is declared on its :class:`Mode`. A session's
:class:`Modes` is built once from the ``pytest_gpuperf_timing_modes()`` hooks. A built-in
mode's factory is a dotted path imported only when a timer is made, so importing this
module never imports torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.errors import GpuPerfError
from pytest_gpuperf.measure.engine import Timer as Timer
from pytest_gpuperf.measure.names import (
    MODE_CPU,
    MODE_CPU_DIST,
    MODE_CUDA_DIST,
    MODE_EVENTS,
    MODE_GRAPH,
)
from pytest_gpuperf.measure.policy import MeasurePolicy

if TYPE_CHECKING:
    from pytest_gpuperf.measure.noise import NoiseClass


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
        group: Any = None,
    ):
        self.fn = fn
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.setup = setup
        #: the process group the call runs in step with (measure.distributed.Group), for a
        #: test marked ``world_size=``; None otherwise
        self.group = group
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


#: Makes a mode's timer for the benchmark's call, or raises when it cannot time it. The timer
#: calls ``call.prepare()`` outside its timed region before each call.
TimerFactory = Callable[[Invocation, MeasurePolicy], Timer]


#: Settings that make any two results comparable, whatever their mode (stored with each).
COMPARABLE: tuple[str, ...] = ("round_ms", "rounds", "warmup_ms")


@dataclass(frozen=True)
class Mode:
    """One timing mode: everything the fixture, the verdict and the reports need of it."""

    name: str
    #: the device its benchmarks run on ("cuda" or "cpu")
    device: str
    #: whether a benchmark with this policy is measured in this mode
    selected: Callable[[MeasurePolicy], bool]
    #: makes its timer: a callable, or "module:function", imported when a timer is made
    factory: str | TimerFactory
    #: MeasurePolicy fields that make two results comparable, beyond :data:`COMPARABLE`
    comparable: tuple[str, ...] = ()
    #: fixed entries of the stored policy record (a change of what the timer measures)
    record: tuple[tuple[str, Any], ...] = ()
    #: the noise class of its time (a name in ``verdict.policy.CLASSES``, or its own); None:
    #: two figures, device and end-to-end, whose classes come from the baseline runs
    noise_class: str | NoiseClass | None = None
    #: its device figure is timed with the host running ahead (the verdict notes host waits)
    hides_host: bool = False
    #: it flushes the L2 cache before timed calls when the l2_flush setting says so
    flushes_l2: bool = False
    #: what to try first when its rounds are noisy (the start of a sentence, or "")
    noisy_remedy: str = ""
    #: the mode that times the same work without launch overhead (the launch-overhead line)
    launch_free: str | None = None
    #: the pytest-benchmark export names its results without "@mode"
    plain_name: bool = False
    #: what its one time is called in the outputs ("" for plain "time")
    figure_name: str = ""
    #: it times every rank of a process group in step (``world_size=`` tests, and only they)
    group: bool = False
    #: the name of a mode declared before it whose place it takes; None: a mode beside them
    replaces: str | None = None

    def policy_record(self, policy: MeasurePolicy) -> dict[str, Any]:
        """The parts of the policy that make two results comparable (stored with each)."""
        rec: dict[str, Any] = {k: getattr(policy, k) for k in COMPARABLE}
        rec.update((k, getattr(policy, k)) for k in self.comparable)
        rec.update(self.record)
        return rec

    def make_timer(self, call: Invocation, policy: MeasurePolicy) -> Timer:
        """A timer of this mode for ``call`` (its factory imported first if a path)."""
        factory = self.factory
        if isinstance(factory, str):
            module, _, attr = factory.partition(":")
            factory = getattr(importlib.import_module(module), attr)
        return factory(call, policy)


class Modes:
    """The timing modes of one run, in order, from every ``pytest_gpuperf_timing_modes`` hook
    (the built-in ones first); a mode takes a name only with ``replaces=`` that name."""

    def __init__(self, modes: Iterable[Mode] = ()):
        by_name: dict[str, Mode] = {}
        for mode in modes:
            if mode.replaces is not None:
                if mode.replaces not in by_name:
                    raise ValueError(
                        f"timing mode {mode.name!r} replaces {mode.replaces!r}, which is not "
                        f"declared (known: {', '.join(by_name) or 'none'}); a mode replaces only "
                        "one returned before it (the built-in ones come first)"
                    )
                if mode.name != mode.replaces and mode.name in by_name:
                    raise ValueError(f"two timing modes are named {mode.name!r}")
                swap = (mode if m.name == mode.replaces else m for m in by_name.values())
                by_name = {m.name: m for m in swap}
                continue
            if mode.name in by_name:
                raise ValueError(
                    f"two timing modes are named {mode.name!r}; pick another name, or declare "
                    f"Mode(..., replaces={mode.name!r}) to take the other's place"
                )
            by_name[mode.name] = mode
        self._by_name = by_name

    def __iter__(self) -> Iterator[Mode]:
        return iter(self._by_name.values())

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def get(self, name: str | None) -> Mode:
        """The mode of this name; for an unknown name, a description that selects nothing."""
        if name is not None and name in self._by_name:
            return self._by_name[name]
        return _unknown(str(name), self.names)

    def for_benchmark(
        self, device: str, policy: MeasurePolicy, *, group: bool = False
    ) -> list[Mode]:
        """The modes a benchmark on ``device`` is measured in (``group``: distributed)."""
        return [
            m
            for m in self._by_name.values()
            if m.device == device and m.group == group and m.selected(policy)
        ]


def _unknown(name: str, known: Sequence[str]) -> Mode:
    def refuse(*args: Any, **kwargs: Any) -> Timer:
        raise ValueError(f"no timing mode named {name!r} is registered (known: {', '.join(known)})")

    # A mode this process does not know (a plugin's, read by the CLI) is judged as CUDA events
    return Mode(name, device="", selected=lambda policy: False, factory=refuse, hides_host=True)


def get(name: str | None, modes: Modes | None = None) -> Mode:
    """The mode of this name in ``modes`` (default: the built-in ones)."""
    return (BUILTIN if modes is None else modes).get(name)


#: The built-in modes, in the order they run (the package's own timing-modes hook).
BUILTIN_MODES: tuple[Mode, ...] = (
    Mode(
        MODE_EVENTS,
        device="cuda",
        selected=lambda p: p.cuda_graph == "both" or not p.cuda_graph,
        factory="pytest_gpuperf.measure.cuda:make_events_timer",
        comparable=("l2_flush",),
        # device time with the host hidden, plus end-to-end time per call
        record=(("figures", "device+e2e"),),
        hides_host=True,
        flushes_l2=True,
        noisy_remedy="use cuda_graph=True for launch-bound work, ",
        launch_free=MODE_GRAPH,
    ),
    Mode(
        MODE_GRAPH,
        device="cuda",
        selected=lambda p: bool(p.cuda_graph),
        factory="pytest_gpuperf.measure.cuda:make_graph_timer",
        noise_class="graph",
        figure_name="graph replay",
    ),
    Mode(
        MODE_CPU,
        device="cpu",
        selected=lambda p: True,
        factory="pytest_gpuperf.measure.cpu:make_cpu_timer",
        noise_class="cpu",
        plain_name=True,
    ),
    Mode(
        MODE_CUDA_DIST,
        device="cuda",
        selected=lambda p: True,
        factory="pytest_gpuperf.measure.distributed:make_group_timer",
        # the slowest rank's time of back-to-back calls, as nccl-tests times a collective
        record=(("figures", "slowest-rank"),),
        noise_class="launches",  # not measured apart yet: the wider host-bound class
        group=True,
    ),
    Mode(
        MODE_CPU_DIST,
        device="cpu",
        selected=lambda p: True,
        factory="pytest_gpuperf.measure.distributed:make_group_timer",
        record=(("figures", "slowest-rank"),),
        noise_class="cpu",
        group=True,
    ),
)
#: The built-in modes alone (what a pure function judges by without a registry).
BUILTIN: Modes = Modes(BUILTIN_MODES)

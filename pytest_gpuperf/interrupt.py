"""SIGTERM as Ctrl-C: a CI cancellation, ``timeout`` or ``docker stop`` ends a run as Ctrl-C does.

SIGTERM's default action ends the process on the spot (a save says nothing, an A/B
session leaves its worktree); raised as :class:`Terminated`, a ``KeyboardInterrupt``, it
takes Ctrl-C's way out, with its cleanup.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises ``KeyboardInterrupt``."""


def how(e: BaseException) -> str:
    """What interrupted the run: ``SIGTERM`` or ``Ctrl-C``."""
    return "SIGTERM" if isinstance(e, Terminated) else "Ctrl-C"


def sigterm_as_ctrl_c() -> Callable[[], None]:
    """From now on, SIGTERM raises :class:`Terminated` in the main thread (where it has its
    default action: a user's handler is theirs); returns what puts the default back."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        return lambda: None

    def terminated(signum: int, frame: FrameType | None) -> None:
        raise Terminated("SIGTERM")

    signal.signal(signal.SIGTERM, terminated)

    def restore() -> None:
        if signal.getsignal(signal.SIGTERM) is terminated:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    return restore

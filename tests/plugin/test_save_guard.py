"""A session's save guarded end to end: a GPUPERF_CHILD marker that leaked into a user's
environment does not turn saving off, and Ctrl-C during the save says what became of it."""

from __future__ import annotations

import pytest

from tests.conftest import FAST, run_with_env
from tests.plugin.test_baselines import BENCH, NO_RERUNS, QUIET


def test_a_leaked_child_marker_does_not_silently_turn_saving_off(
    pytester: pytest.Pytester,
) -> None:
    """T14: GPUPERF_CHILD=1 in a user's environment turned off the save, the table and the
    HTML report, with rc 0 and no word. Only the plugin's own command line makes a child."""
    pytester.makepyfile(test_spin=BENCH)
    env = {"GPUPERF_CHILD": "1", "SLOWDOWN": "1"}
    args = ["-p", "no:cacheprovider", *FAST, *QUIET, NO_RERUNS]
    result = run_with_env(pytester, env, *args, "--gpuperf-save=childsave", "--gpuperf-html=x.html")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*GPUPERF_CHILD='1' is set in the environment, but this pytest was not started by "
            "pytest-gpuperf*",
            "*saved 2 run(s) of 2 benchmark(s) into baseline 'childsave'*",
        ]
    )
    assert (pytester.path / ".gpuperf" / "baselines" / "childsave.json").is_file()
    assert (pytester.path / "x.html").is_file()


#: Ctrl-C while the save writes its segment: the first write raises KeyboardInterrupt.
CTRL_C_WRITING = """
import pytest
from pytest_gpuperf.baseline import files

def interrupt(*args, **kwargs):
    raise KeyboardInterrupt

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    files.atomic_write_bytes = interrupt
"""
#: Ctrl-C (or SIG) while the save waits for the baseline's lock, which this process holds
#: on a descriptor of its own: a real signal, sent from within the wait's first pause.
CTRL_C_WAITING = """
import os, signal, time, types
from pathlib import Path
import pytest
from pytest_gpuperf.baseline import filelock

# Ctrl-C as at a terminal: a shell's background job (a CI runner's) starts with SIGINT ignored
signal.signal(signal.SIGINT, signal.default_int_handler)

def pause(seconds):
    os.kill(os.getpid(), getattr(signal, os.environ.get("SIG", "SIGINT")))
    time.sleep(seconds)

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    held = filelock.locked(Path(".gpuperf/baselines/.main.json.lock"))
    held.__enter__()
    session.config._held_lock = held
    filelock.time = types.SimpleNamespace(monotonic=time.monotonic, sleep=pause)
"""


@pytest.mark.parametrize(
    ("conftest", "sig"),
    [(CTRL_C_WRITING, "SIGINT"), (CTRL_C_WAITING, "SIGINT"), (CTRL_C_WAITING, "SIGTERM")],
    ids=["writing", "lock", "lock-sigterm"],
)
def test_ctrl_c_during_the_save_says_not_saved_and_exits_2(
    pytester: pytest.Pytester, conftest: str, sig: str
) -> None:
    """T8: Ctrl-C during the save, or while waiting for the baseline's lock, printed a raw
    traceback from pytest_sessionfinish, rc 1, and no "NOT saved" line. R10: SIGTERM (a CI
    cancellation, `timeout`, `docker stop`) ended it with rc 143 and no word at all."""
    pytester.makepyfile(test_spin=BENCH)
    pytester.makeconftest(conftest)
    result = run_with_env(
        pytester, {"SIG": sig}, "-p", "no:cacheprovider", *FAST, *QUIET, "--gpuperf-save=main",
        NO_RERUNS, "--gpuperf-lock-timeout=600",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    by = "Ctrl-C" if sig == "SIGINT" else sig
    result.stdout.fnmatch_lines(
        [f"*the baseline was NOT saved: the save was interrupted ({by}); the baseline is as it*"]
    )
    assert not (pytester.path / ".gpuperf" / "baselines" / "main.json").exists()

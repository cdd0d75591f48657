"""A Python started ahead (torch and pytest imported) that runs one capture child warm."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from pytest_gpuperf.artifacts.collectors.process import SparePython
from pytest_gpuperf.shell.capture import SparePool

COMPILED = """
import os
import torch


def f(x):
    y = x * 2
    torch._dynamo.graph_break()
    return (y + 1).relu()


def test_compiled():
    assert os.environ["ASKED"] == "yes"  # the environment of the request, not of the start
    torch.compile(f, backend="eager")(torch.ones(8))
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return {**env, **extra}


def test_a_spare_runs_pytest_in_the_folder_and_environment_it_is_given(tmp_path: Path) -> None:
    (tmp_path / "test_c.py").write_text(COMPILED)
    spare = SparePython(_env())
    assert spare.usable
    time.sleep(0.5)  # importing meanwhile, as during a capture
    log_dir = tmp_path / "trace"
    run = spare.run(
        "pytest", ["test_c.py", "-q", "-p", "no:cacheprovider"],
        env=_env(ASKED="yes", TORCH_TRACE=str(log_dir)), cwd=tmp_path, timeout_s=120,
        log_path=tmp_path / "child.log",
    )  # fmt: skip
    assert run.returncode == 0, run.output[-2000:]
    assert "1 passed" in run.output
    assert run.command[:3] == [sys.executable, "-m", "pytest"]
    assert "test_c.py" in (tmp_path / "child.log").read_text()
    # TORCH_TRACE, which torch reads when it is imported, was read again for the request
    (log,) = log_dir.glob("*.log")
    assert "dynamo_graph_break_reason" in log.read_text()
    assert not spare.usable  # used once
    with pytest.raises(RuntimeError):
        spare.run("pytest", [], env=_env(), cwd=tmp_path, timeout_s=5)


def test_a_spare_is_killed_at_its_timeout_and_closed_when_unused(tmp_path: Path) -> None:
    (tmp_path / "test_s.py").write_text("import time\n\ndef test_s():\n    time.sleep(60)\n")
    spare = SparePython(_env(), modules=())
    t0 = time.monotonic()
    run = spare.run("pytest", ["test_s.py", "-q"], env=_env(), cwd=tmp_path, timeout_s=3)
    assert run.timed_out and run.returncode != 0 and time.monotonic() - t0 < 20
    idle = SparePython(_env(), modules=())
    pid = idle.proc.pid if idle.proc else None
    idle.close()
    assert not idle.usable and pid is not None
    with pytest.raises(ProcessLookupError):
        for _ in range(50):
            os.kill(pid, 0)
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                raise ProcessLookupError
            time.sleep(0.1)


def test_the_pool_hands_out_the_spare_started_at_the_start_or_by_the_capture_before() -> None:
    pool = SparePool()
    assert pool.take() is None  # a first capture with none started before it: one starts
    second = pool.take()
    assert second is not None and second.usable
    second.close()
    pool.close()
    assert pool._next is None
    pool.start()  # at the session's start
    first = pool.take()
    assert first is not None and first.usable
    first.close()
    pool.close()


def test_a_spare_runs_its_prelude_before_it_waits_and_survives_a_failing_one(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_p.py").write_text(
        "import builtins\n\ndef test_p():\n    assert builtins.WARMED == 'yes'\n"
    )
    mark = tmp_path / "warmed"
    prelude = (
        f"import builtins, pathlib\nbuiltins.WARMED = 'yes'\npathlib.Path({str(mark)!r}).touch()\n"
    )
    spare = SparePython(_env(), modules=(), prelude=prelude)
    run = spare.run("pytest", ["test_p.py", "-q", "-p", "no:cacheprovider"], env=_env(),
                    cwd=tmp_path, timeout_s=60)  # fmt: skip
    assert run.returncode == 0, run.output[-2000:]
    assert mark.exists()  # the prelude ran in the spare, before the request
    broken = SparePython(_env(), modules=(), prelude="raise SystemExit(3)\n")
    (tmp_path / "test_q.py").write_text("def test_q():\n    pass\n")
    run = broken.run("pytest", ["test_q.py", "-q", "-p", "no:cacheprovider"], env=_env(),
                     cwd=tmp_path, timeout_s=60)  # fmt: skip
    assert run.returncode == 0 and "1 passed" in run.output


def test_what_a_spare_printed_before_it_was_ready_stays_in_the_output_and_the_log(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_e.py").write_text("def test_e():\n    pass\n")
    spare = SparePython(_env(), modules=(), prelude="print('a warning from the imports')\n")
    assert spare.wait_ready(60)  # its early output read while waiting, as the pool does
    run = spare.run("pytest", ["test_e.py", "-q", "-p", "no:cacheprovider"], env=_env(),
                    cwd=tmp_path, timeout_s=60, log_path=tmp_path / "child.log")  # fmt: skip
    assert run.returncode == 0 and "1 passed" in run.output
    log = (tmp_path / "child.log").read_text()
    for text in (run.output, log):
        assert "a warning from the imports" in text
        assert SparePython._READY.decode() not in text


def test_a_spare_whose_prelude_imported_the_plugin_runs_pytest_under_filterwarnings_error(
    tmp_path: Path,
) -> None:
    """A spare imports the plugin's process module (watch_parent); pytest marks an installed plugin for
    assertion rewriting and warns when it is imported already, an error under
    ``filterwarnings = error`` (the child exited 1 before profiling, on an H200 where the
    plugin was installed from its wheel). ``-p`` marks a module the same way here."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    error\n")
    (tmp_path / "test_w.py").write_text("def test_w():\n    pass\n")
    args = ["test_w.py", "-q", "-p", "no:cacheprovider", "-p", "pytest_gpuperf.shell.locks"]
    prelude = "import pytest_gpuperf.shell.locks\n"
    spare = SparePython(_env(), modules=("pytest",), prelude=prelude)
    run = spare.run("pytest", args, env=_env(), cwd=tmp_path, timeout_s=60)
    assert run.returncode == 0 and "1 passed" in run.output, run.output[-2000:]
    assert "PytestAssertRewriteWarning" not in run.output


def test_a_pool_s_spares_start_the_profiler_once_as_its_prelude() -> None:
    from pytest_gpuperf.shell.capture import PRELUDE

    assert SparePool().prelude == PRELUDE
    exec(PRELUDE, {})  # it runs here as it does in a spare (where a failure would be silent)


def test_the_pool_waits_for_its_next_spare_before_the_session_measures_again() -> None:
    pool = SparePool()
    pool.prelude = ""
    assert pool.take() is None  # starts the next one
    waited = pool.settle(timeout_s=60)
    nxt = pool._next
    assert nxt is not None and nxt.ready and nxt.usable  # imported, idle, kept
    assert waited < 60
    pool.close()


def test_a_spare_not_ready_in_time_is_ended_so_it_cannot_run_beside_a_measurement() -> None:
    pool = SparePool()
    pool.prelude = "import time\ntime.sleep(60)\n"
    pool.take()
    slow = pool._next
    assert slow is not None
    t0 = time.monotonic()
    pool.settle(timeout_s=1.0)
    assert time.monotonic() - t0 < 10
    assert pool._next is None and not slow.usable  # ended, not left importing
    pool.close()


def test_a_spare_imports_the_compiler_where_this_process_compiled(tmp_path: Path) -> None:
    """A compiled test's child spent half its start-up importing torch.compile's modules."""
    import torch._dynamo  # noqa: F401  # this process "compiled": the spare imports it too

    (tmp_path / "test_i.py").write_text(
        "import sys\n\nWARM = 'torch._dynamo' in sys.modules\n\ndef test_i():\n    assert WARM\n"
    )
    spare = SparePython(_env())
    assert spare.wait_ready(120)
    run = spare.run("pytest", ["test_i.py", "-q", "-p", "no:cacheprovider"], env=_env(),
                    cwd=tmp_path, timeout_s=60)  # fmt: skip
    assert run.returncode == 0 and "1 passed" in run.output, run.output[-2000:]


def test_a_spare_ends_with_its_run_s_status_and_output_but_no_finalization(
    tmp_path: Path,
) -> None:
    """Once the run is over (its output written) the spare skips the interpreter's teardown,
    seconds with torch loaded, which the session would wait for."""
    mark = tmp_path / "finalized"
    (tmp_path / "test_f.py").write_text(
        f"import atexit, pathlib\n\natexit.register(pathlib.Path({str(mark)!r}).touch)\n\n"
        "def test_f():\n    assert False\n"
    )
    spare = SparePython(_env(), modules=())
    run = spare.run("pytest", ["test_f.py", "-q", "-p", "no:cacheprovider"], env=_env(),
                    cwd=tmp_path, timeout_s=60)  # fmt: skip
    assert run.returncode == 1 and "1 failed" in run.output, run.output[-2000:]
    assert not mark.exists()

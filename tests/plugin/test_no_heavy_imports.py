"""Loading the plugin imports no torch, scipy, numpy or pynvml (STYLE.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "scipy", "numpy", "pynvml", "nvtx", "tabulate")


def test_importing_the_plugin_imports_nothing_heavy() -> None:
    code = (
        "import sys, pytest_gpuperf, pytest_gpuperf.plugin;"
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_session_without_benchmarks_imports_nothing_heavy(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        f"""
        import sys

        def pytest_sessionfinish(session):
            loaded = [m for m in {HEAVY!r} if m in sys.modules]
            (session.config.rootpath / "loaded.txt").write_text(repr(loaded))
        """
    )
    pytester.makepyfile("def test_plain():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_subprocess("--gpuperf-json=o.json")
    result.assert_outcomes(passed=1)
    assert (pytester.path / "loaded.txt").read_text() == "[]"
    assert "gpuperf" in (pytester.path / "o.json").read_text()

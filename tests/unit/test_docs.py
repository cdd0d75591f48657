"""The user docs stay true to the code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pytest_gpuperf.shell.options import OPTIONS

ROOT = Path(__file__).resolve().parents[2]


def test_reference_table_is_generated_from_the_options() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "gen_reference.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout


def test_every_option_is_in_the_reference() -> None:
    text = (ROOT / "docs" / "reference.md").read_text()
    for o in OPTIONS:
        assert (o.flag_name if o.cli else f"`{o.name}=`") in text, o.name


def test_readme_links_resolve() -> None:
    import re

    text = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target

"""The package's shape: no function longer than 80 lines (def line to last line).

A long function holds several jobs; split it into helpers that each do one.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_gpuperf"
MAX_LINES = 80


def long_functions(root: Path, limit: int = MAX_LINES) -> list[tuple[str, int]]:
    """``("path/to/module.py:name", lines)`` of every function under ``root`` over ``limit``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    out.append((f"{path.relative_to(root).as_posix()}:{node.name}", lines))
    return out


def test_no_function_is_longer_than_80_lines() -> None:
    too_long = [f"{where} ({n} lines)" for where, n in long_functions(PACKAGE)]
    assert not too_long, f"functions over {MAX_LINES} lines: split them: " + ", ".join(too_long)


def test_long_functions_finds_a_long_one(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    (tmp_path / "m.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}\n")
    assert long_functions(tmp_path) == [("m.py:long", 81)]

"""Comments and docstrings stand alone: none points to a document that is not in the
repository (a design note, a machine's notes, an issue tracker's number). Each says its
point itself, or names a file that is here (``docs/concepts.md``, ``bench/...``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEARCHED = ("pytest_gpuperf", "tests", "bench")
#: References to what a reader of the repository cannot open.
OUTSIDE = re.compile(r"statistics\.md|GPU-MACHINE|issue [0-9]+|research/|bench table")


def outside_references(root: Path, folders: tuple[str, ...]) -> list[tuple[str, int, str]]:
    """(path, line number, line) of each Python line under ``folders`` that names a document
    not in the repository; this file, which names the patterns, is left out."""
    out = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            if path.resolve() == Path(__file__).resolve():
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if OUTSIDE.search(line):
                    out.append((path.relative_to(root).as_posix(), n, line.strip()))
    return out


def test_no_comment_points_outside_the_repository() -> None:
    hits = [f"{path}:{n}: {line}" for path, n, line in outside_references(ROOT, SEARCHED)]
    assert not hits, "say the point itself, or name a file in the repository:\n" + "\n".join(hits)


def test_outside_references_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        "x = 1  # see docs/concepts.md\ny = 2  # the rule of statistics.md §4.1\n"
    )
    assert outside_references(tmp_path, ("pkg",)) == [
        ("pkg/m.py", 2, "y = 2  # the rule of statistics.md §4.1")
    ]

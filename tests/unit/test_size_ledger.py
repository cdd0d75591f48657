"""The size ledger in docs/architecture.md stays current, so that growth is seen in review.

The ledger is the lines of each ring (rings as ``test_rings.py`` places modules) and the
15 largest modules. The test recomputes it and fails, printing the new table, when a figure
moved by more than :data:`TOLERANCE` or a module count or a listed module's rank changed.
Refresh it with ``python -m tests.unit.test_size_ledger --write``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest_gpuperf
from tests.unit.test_rings import ADAPTER, CLI, CORE, SHELL, _modules, ring_of

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGE = Path(pytest_gpuperf.__file__).parent
BEGIN = "<!-- size ledger: python -m tests.unit.test_size_ledger --write -->"
END = "<!-- end of the size ledger -->"
REFRESH = "python -m tests.unit.test_size_ledger --write"
TOLERANCE = 0.02
LARGEST = 15


def _lines(path: Path) -> int:
    """Lines as ``wc -l`` counts them, so the package total matches the shell's."""
    return path.read_bytes().count(b"\n")


def ledger(root: Path = PACKAGE) -> str:
    """The ledger's two Markdown tables: lines per ring, then the largest modules."""
    rings: dict[str, list[int]] = {ring: [0, 0] for ring in (CORE, ADAPTER, SHELL, CLI)}
    sizes = []
    for module, path in _modules(root).items():
        n = _lines(path)
        ring = ring_of(module)
        assert ring is not None, f"{module} has no ring: add it to RINGS in test_rings.py"
        rings[ring][0] += 1
        rings[ring][1] += n
        sizes.append((n, path.relative_to(root).as_posix()))
    count, total = sum(c for c, _ in rings.values()), sum(n for _, n in rings.values())
    out = ["| ring | modules | lines |", "|---|---:|---:|"]
    out += [f"| {ring} | {c} | {n:,} |" for ring, (c, n) in rings.items()]
    out += [f"| **package** | **{count}** | **{total:,}** |", ""]
    out += ["| rank | module | lines |", "|---:|---|---:|"]
    ranked = sorted(sizes, key=lambda s: (-s[0], s[1]))[:LARGEST]
    out += [f"| {i} | `{name}` | {n:,} |" for i, (n, name) in enumerate(ranked, 1)]
    return "\n".join(out)


def _rows(table: str) -> dict[str, tuple[str, int]]:
    """Each row's key (a ring, or a module) -> (its middle column, its lines)."""
    rows = {}
    for cells in re.findall(r"^\| (.+?) \| (.+?) \| ([\d,]+|\*\*[\d,]+\*\*) \|$", table, re.M):
        first, middle, lines = (c.strip("*`") for c in cells)
        key, value = (middle, first) if first.isdigit() else (first, middle)
        rows[key] = (value, int(lines.replace(",", "")))
    return rows


def differences(documented: str, current: str) -> list[str]:
    """What moved between the documented ledger and the current one, beyond the tolerance."""
    old, new = _rows(documented), _rows(current)
    out = [f"{key}: gone from the ledger" for key in old.keys() - new.keys()]
    out += [f"{key}: new in the ledger" for key in new.keys() - old.keys()]
    for key in old.keys() & new.keys():
        (was, was_n), (now, now_n) = old[key], new[key]
        if was != now:
            out.append(f"{key}: {was} -> {now}")
        if abs(now_n - was_n) > TOLERANCE * was_n:
            out.append(f"{key}: {was_n:,} -> {now_n:,} lines")
    return sorted(out)


def documented(text: str) -> str:
    start, end = text.find(BEGIN), text.find(END)
    assert 0 <= start < end, f"docs/architecture.md lost its ledger markers: {BEGIN} ... {END}"
    return text[start + len(BEGIN) : end].strip()


def test_the_size_ledger_in_the_architecture_page_is_current() -> None:
    current = ledger()
    moved = differences(documented(DOC.read_text()), current)
    assert not moved, (
        "the size ledger in docs/architecture.md is out of date ("
        + "; ".join(moved)
        + f"). Refresh it with `{REFRESH}` and say in the change's note why the package "
        "grew, if it did. The ledger now:\n\n" + current
    )


def test_the_ledger_sees_a_module_grow_or_change_rank() -> None:
    rows = ["| core | 2 | 1,000 |", "| **package** | **2** | **1,000** |"]
    table = "\n".join([*rows, "| 1 | `a.py` | 600 |", "| 2 | `b.py` | 400 |"])
    assert differences(table, table) == []
    within = table.replace("| 600 |", "| 610 |")
    assert differences(table, within) == []
    grown = table.replace("| 600 |", "| 700 |")
    assert differences(table, grown) == ["a.py: 600 -> 700 lines"]
    swapped = (
        table.replace("`a.py`", "`x.py`").replace("`b.py`", "`a.py`").replace("`x.py`", "`b.py`")
    )
    assert differences(table, swapped) == [
        "a.py: 1 -> 2",
        "a.py: 600 -> 400 lines",
        "b.py: 2 -> 1",
        "b.py: 400 -> 600 lines",
    ]
    assert differences(table, table.replace("| core | 2 |", "| core | 3 |")) == ["core: 2 -> 3"]


def main(argv: list[str]) -> int:
    current = ledger()
    if argv != ["--write"]:
        print(current)
        return 0
    text = DOC.read_text()
    documented(text)  # the markers are there
    head, rest = text.split(BEGIN, 1)
    DOC.write_text(f"{head}{BEGIN}\n{current}\n{END}{rest.split(END, 1)[1]}")
    print(f"docs/architecture.md: the size ledger rewritten\n\n{current}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The four rings of the package (DEVELOPERS.md), checked on its imports.

An ``ast`` walk over every module of ``pytest_gpuperf`` collects each import
statement wherever it is: at module level, inside functions (the lazy
imports), under ``if TYPE_CHECKING``. Each module gets its ring from its path
(:data:`RINGS`), and:

- a module imports only from its own ring and those below it: core <- device
  adapters <- pytest shell; the CLI imports the core and itself only;
- no module imports one that (directly or through others) imports it back;
- a core module imports none of torch, pytest, pynvml, nvtx; the CLI and the
  adapters import no pytest.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import pytest_gpuperf

CORE, ADAPTER, SHELL, CLI = "core", "device adapter", "pytest shell", "CLI"

#: Module path (dotted, relative to the package; "" is the package itself) -> ring.
#: The longest matching prefix wins; a module that matches none fails the test.
RINGS: dict[str, str] = {
    "": CORE,  # the package face: the errors, the version
    "model": CORE,
    "errors": CORE,
    "values": CORE,
    "settings_fields": CORE,
    "jsonsafe": CORE,
    "outcome": CORE,
    "registry": CORE,
    "units": CORE,
    "verdict": CORE,
    "baseline": CORE,
    "reporting": CORE,
    "measure": CORE,
    "measure.canary": ADAPTER,
    "measure.cpu": ADAPTER,
    "measure.cuda": ADAPTER,
    "measure.device": ADAPTER,
    "measure.environment": ADAPTER,
    "measure.memory": ADAPTER,
    "measure.nvtx_ranges": ADAPTER,
    "measure.numerics": ADAPTER,  # measure.numerics_format (the format) is core
    "measure.distributed": ADAPTER,
    "telemetry": CORE,
    "telemetry.nvml": ADAPTER,
    "telemetry.probe": ADAPTER,
    "telemetry.header": ADAPTER,
    "telemetry.gpm": ADAPTER,
    "artifacts": ADAPTER,  # the face re-exports the collectors' protocol
    "artifacts.analysis": CORE,
    "artifacts.collectors": ADAPTER,
    "shell": SHELL,
    "plugin": SHELL,
    "demo": CLI,  # `pytest-gpuperf demo`: runs pytest in child processes
    "demo.benchmarks": SHELL,  # a test file shipped as package data
    "cli": CLI,
}

#: What each ring may import from the package.
ALLOWED: dict[str, frozenset[str]] = {
    CORE: frozenset({CORE}),
    ADAPTER: frozenset({CORE, ADAPTER}),
    SHELL: frozenset({CORE, ADAPTER, SHELL}),
    CLI: frozenset({CORE, CLI}),
}

#: Third-party modules a ring must not import, even lazily.
FORBIDDEN: dict[str, frozenset[str]] = {
    CORE: frozenset({"torch", "pytest", "_pytest", "pynvml", "nvtx"}),
    ADAPTER: frozenset({"pytest", "_pytest"}),
    SHELL: frozenset(),
    CLI: frozenset({"pytest", "_pytest"}),
}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, relative to the package
    target: str  # the imported module: relative to the package, or "ext:<top-level name>"
    line: int
    text: str  # the statement, as written

    def where(self, package: str) -> str:
        name = f"{package}.{self.source}" if self.source else package
        return f"{name} (line {self.line}: {self.text})"


def _modules(root: Path) -> dict[str, Path]:
    """Dotted module paths relative to the package at ``root`` -> their files."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(package: str, root: Path) -> Iterator[Import]:
    modules = _modules(root)

    def local(dotted: str) -> str | None:
        if dotted == package:
            return ""
        if dotted.startswith(package + "."):
            return dotted[len(package) + 1 :]
        return None

    for name, path in modules.items():
        source = path.read_text()
        tree = ast.parse(source, str(path))
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                dotted_names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = [package, *name.split(".")] if name else [package]
                    if not is_pkg:
                        base = base[:-1]
                    base = base[: len(base) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                # `from pkg import submodule` imports the submodule
                dotted_names = []
                for a in node.names:
                    rel = local(f"{mod}.{a.name}")
                    dotted_names.append(f"{mod}.{a.name}" if rel in modules else mod)
            else:
                continue
            text = ast.get_source_segment(source, node) or ""
            text = " ".join(text.split())
            for dotted in dict.fromkeys(dotted_names):
                rel = local(dotted)
                if rel is None:
                    target = "ext:" + dotted.split(".")[0]
                else:
                    while rel not in modules and "." in rel:  # `import pkg.mod.attr`
                        rel = rel.rsplit(".", 1)[0]
                    target = rel
                if target != name:
                    yield Import(name, target, node.lineno, text)


def ring_of(module: str) -> str | None:
    """The ring of the longest prefix of ``module`` in :data:`RINGS`, else ``None``."""
    if module in RINGS:
        return RINGS[module]
    for prefix in sorted((p for p in RINGS if p), key=len, reverse=True):
        if module.startswith(prefix + "."):
            return RINGS[prefix]
    return None


def check(package: str, root: Path) -> list[str]:
    """Every broken rule of the package at ``root``, one message each."""
    problems = []
    imports = list(_imports(package, root))
    for module in _modules(root):
        if ring_of(module) is None:
            problems.append(
                f"{package}.{module}: no ring for this module; add its path to RINGS in "
                "tests/unit/test_rings.py (core, device adapter, pytest shell or CLI)"
            )
    for imp in imports:
        ring = ring_of(imp.source)
        if ring is None:
            continue
        if imp.target.startswith("ext:"):
            lib = imp.target[4:]
            if lib in FORBIDDEN[ring]:
                problems.append(
                    f"{imp.where(package)}: a {ring} module imports {lib}; "
                    f"the {ring} ring never imports {', '.join(sorted(FORBIDDEN[ring]))}"
                )
            continue
        target_ring = ring_of(imp.target)
        if target_ring is not None and target_ring not in ALLOWED[ring]:
            problems.append(
                f"{imp.where(package)}: a {ring} module imports {package}.{imp.target}, "
                f"a {target_ring} module; the {ring} ring imports only from: "
                f"{', '.join(sorted(ALLOWED[ring]))}"
            )
    problems += _cycles(package, imports)
    return problems


def _cycles(package: str, imports: list[Import]) -> list[str]:
    """Each group of modules that import each other, with one import of each step."""
    graph: dict[str, dict[str, Import]] = {}
    for imp in imports:
        if not imp.target.startswith("ext:"):
            graph.setdefault(imp.source, {}).setdefault(imp.target, imp)
    # Tarjan's strongly connected components
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for group in groups:
        members = set(group)
        steps = [
            imp.where(package)
            for src in group
            for dst, imp in sorted(graph.get(src, {}).items())
            if dst in members
        ]
        out.append(
            f"import cycle between {', '.join(package + '.' + m for m in group)}: "
            + "; ".join(steps)
            + ". Modules must not import each other (not even lazily): move what both "
            "need into the lower one, or pass it in"
        )
    return out


def test_the_package_keeps_its_rings() -> None:
    root = Path(pytest_gpuperf.__file__).parent
    problems = check("pytest_gpuperf", root)
    assert not problems, "\n".join(problems)


# --- the checker itself --------------------------------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        (d / "__init__.py").touch()
    return root


def test_a_clean_package_passes(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "model.py": "import json\n",
            "verdict/decide.py": "from pkg.model import *\n",
            "measure/cuda.py": "def f():\n    import torch\n    from pkg.verdict import decide\n",
            "shell/session.py": "import pytest\nfrom pkg.measure import cuda\n",
            "cli/main.py": "from ..verdict.decide import x\n",
        },
    )
    assert check("pkg", root) == []


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {
                "verdict/decide.py": "def f():\n    from pkg.shell import session\n",
                "shell/session.py": "",
            },
            r"pkg.verdict.decide \(line 2: from pkg.shell import session\): a core module "
            r"imports pkg.shell.session, a pytest shell module",
        ),
        (
            {"measure/cuda.py": "from pkg.shell.session import X\n", "shell/session.py": ""},
            "a device adapter module imports pkg.shell.session, a pytest shell module",
        ),
        (
            {"cli/main.py": "from pkg.measure import cuda\n", "measure/cuda.py": ""},
            "a CLI module imports pkg.measure.cuda, a device adapter module",
        ),
        (
            {"cli/main.py": "from . import x\nimport _pytest.config\n"},
            r"pkg.cli.main \(line 2: import _pytest.config\): a CLI module imports _pytest",
        ),
        (
            {"baseline/store.py": "def f():\n    import torch\n"},
            "a core module imports torch; the core ring never imports",
        ),
        (
            {
                "telemetry/regime.py": "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    import pytest\n"
            },
            "pkg.telemetry.regime .*a core module imports pytest",
        ),
        (
            {
                "verdict/a.py": "from pkg.verdict import b\n",
                "verdict/b.py": "def f():\n    from pkg.verdict.a import g\n",
            },
            r"import cycle between pkg.verdict.a, pkg.verdict.b: .*line 2: from "
            r"pkg.verdict.a import g",
        ),
        (
            {"extra.py": "import json\n"},
            "pkg.extra: no ring for this module",
        ),
    ],
)
def test_the_checker_catches(tmp_path: Path, files: dict[str, str], expected: str) -> None:
    import re

    problems = check("pkg", _package(tmp_path, {"model.py": "", **files}))
    assert any(re.search(expected, p) for p in problems), problems

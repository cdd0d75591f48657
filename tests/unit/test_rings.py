"""The four rings of the package, and the layers inside the core (docs/architecture.md),
checked on its imports.

An ``ast`` walk over every module of ``pytest_gpuperf`` collects each import
statement wherever it is: at module level, inside functions (the lazy
imports), under ``if TYPE_CHECKING``. It sees through package faces: Python runs
every ``__init__`` above a module before the module, so what a face imports when it
loads, each module under it imports too, and so does each module importing one under
it. Each module gets its ring from its path (:data:`RINGS`), and a core module its
layer (:data:`LAYERS`); then:

- a module imports only from its own ring and those below it: core <- device
  adapters <- pytest shell; the CLI imports the core and itself only;
- a core module imports only from its own layer and those below it;
- no two subpackages of the core import each other (counting every module under them);
- no module imports one that (directly or through others) imports it back;
- a core module imports none of torch, pytest, pynvml, nvtx; the CLI and the
  adapters import no pytest.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
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
    "interrupt": CORE,
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

#: The layers inside the core, bottom first: a core module imports only from its own layer
#: and those below it. Module path -> layer, the longest matching prefix wins; a core
#: module that matches none fails the test.
BASICS, MEASUREMENT, RESULTS, STORE, VERDICT, ANALYSIS, REPORTING, RUN_SETUP = (
    "basics",
    "measurement",
    "results",
    "store",
    "verdict",
    "analysis",
    "reporting",
    "run setup",
)
LAYER_ORDER = (BASICS, MEASUREMENT, RESULTS, STORE, VERDICT, ANALYSIS, REPORTING, RUN_SETUP)
LAYERS: dict[str, str] = {
    "": BASICS,  # the package face: the errors, the version
    "interrupt": BASICS,  # SIGTERM as Ctrl-C
    "errors": BASICS,
    "jsonsafe": BASICS,
    "settings_fields": BASICS,
    "units": BASICS,  # number formats
    "measure": MEASUREMENT,  # its pure part: the loop, steady state, summaries, names, formats
    "telemetry": MEASUREMENT,  # its pure part: sample streams, regimes, throttle reasons
    "model": RESULTS,
    "outcome": RESULTS,
    "baseline": STORE,
    "verdict": VERDICT,
    "artifacts.analysis": ANALYSIS,
    "reporting": REPORTING,
    "values": RUN_SETUP,  # option parsers, which check names the reports define
    "registry": RUN_SETUP,  # the modes and output formats plugins add, gathered per run
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
    #: run when the module loads: at module level, not under ``if TYPE_CHECKING``
    eager: bool = True
    #: the package face this edge goes through (``text`` is the face's line): ``source``
    #: imports a module under ``via``, or is itself under it, and Python runs ``via``'s
    #: ``__init__`` first, which imports ``target`` when it loads
    via: str | None = None
    #: ``source`` is under ``via``: the face's own order of loading its children is no
    #: cycle of theirs, so these edges count for the rings and layers, not for cycles
    own_face: bool = False

    def where(self, package: str) -> str:
        name = f"{package}.{self.source}" if self.source else package
        if self.via is not None:
            face = f"{package}.{self.via}" if self.via else package
            return f"{name} (through the face {face}, line {self.line}: {self.text})"
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

    direct: dict[str, list[Import]] = {}
    for name, path in modules.items():
        source = path.read_text()
        tree = ast.parse(source, str(path))
        is_pkg = path.name == "__init__.py"
        eager = _eager_nodes(tree)
        found = direct.setdefault(name, [])
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
                    found.append(Import(name, target, node.lineno, text, id(node) in eager))
    # Python runs every package face above a module before the module: what a face imports
    # when it loads, a module under it imports too, and so does each module importing one
    # under it.
    faces_above = {m: _faces_above(m, modules[m].name == "__init__.py") for m in modules}

    def through(name: str, face: str, own: bool) -> Iterator[Import]:
        for imp in direct.get(face, []):
            if imp.eager and imp.target != name:
                yield Import(name, imp.target, imp.line, imp.text, True, face, own)

    for name, found in direct.items():
        yield from found
        own = faces_above[name]
        for face in own:
            yield from through(name, face, True)
        seen = set(own)
        for imp in found:
            if imp.target.startswith("ext:"):
                continue
            for face in faces_above.get(imp.target, []):
                if face not in seen and face != name:
                    seen.add(face)
                    yield from through(name, face, False)


def _faces_above(name: str, is_pkg: bool) -> list[str]:
    """The packages whose ``__init__`` runs before module ``name``: "" (the package), then
    each one down to its own (a face's own ``__init__`` is the module itself)."""
    parts = name.split(".") if name else []
    if (is_pkg and parts) or not is_pkg:
        parts = parts[:-1]
    else:
        return []
    return [".".join(parts[:i]) for i in range(len(parts) + 1)]


def _eager_nodes(tree: ast.Module) -> set[int]:
    """The ids of the import statements that run when the module loads: at module level
    (in ``if``/``try``/``with`` blocks too), not in a function, not under
    ``if TYPE_CHECKING``."""
    out: set[int] = set()

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                out.add(id(stmt))
            elif isinstance(stmt, ast.If):
                test = ast.unparse(stmt.test)
                if test not in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                    visit(stmt.body)
                visit(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                for block in (stmt.body, stmt.orelse, stmt.finalbody):
                    visit(block)
                for handler in stmt.handlers:
                    visit(handler.body)
            elif isinstance(stmt, (ast.With, ast.ClassDef)):
                visit(stmt.body)

    visit(tree.body)
    return out


def _longest_prefix(module: str, table: dict[str, str]) -> str | None:
    if module in table:
        return table[module]
    for prefix in sorted((p for p in table if p), key=len, reverse=True):
        if module.startswith(prefix + "."):
            return table[prefix]
    return None


def ring_of(module: str) -> str | None:
    """The ring of the longest prefix of ``module`` in :data:`RINGS`, else ``None``."""
    return _longest_prefix(module, RINGS)


def layer_of(module: str) -> str | None:
    """The layer of a core module: its longest prefix in :data:`LAYERS`, else ``None``."""
    return _longest_prefix(module, LAYERS)


def subpackage_of(module: str) -> str:
    """The top-level subpackage (or module) that ``module`` belongs to."""
    return module.split(".")[0] if module else "(the package face)"


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
    problems += _layers(package, root, imports)
    problems += _two_way(package, root, imports)
    problems += _cycles(package, imports)
    return problems


def _layers(package: str, root: Path, imports: list[Import]) -> list[str]:
    """Each core module without a layer, and each import of a higher layer by a lower one."""
    problems = []
    for module in _modules(root):
        if ring_of(module) == CORE and layer_of(module) is None:
            problems.append(
                f"{package}.{module}: no layer for this core module; add its path to LAYERS in "
                f"tests/unit/test_rings.py ({', '.join(LAYER_ORDER)})"
            )
    for imp in imports:
        if imp.target.startswith("ext:") or ring_of(imp.source) != CORE:
            continue
        if ring_of(imp.target) != CORE:
            continue
        mine, theirs = layer_of(imp.source), layer_of(imp.target)
        if mine is None or theirs is None:
            continue
        if LAYER_ORDER.index(theirs) > LAYER_ORDER.index(mine):
            below = LAYER_ORDER[: LAYER_ORDER.index(mine) + 1]
            problems.append(
                f"{imp.where(package)}: a module of the {mine} layer imports "
                f"{package}.{imp.target}, of the higher {theirs} layer; the {mine} layer "
                f"imports only from: {', '.join(below)}. Move what both need down, or pass it in"
            )
    return problems


def two_way_pairs(root: Path, imports: list[Import]) -> dict[tuple[str, str], list[Import]]:
    """The subpackages of the core that import each other (every module under them counted,
    adapters included): each pair, with its imports both ways."""
    core = {subpackage_of(m) for m in _modules(root) if ring_of(m) == CORE}
    edges: dict[tuple[str, str], list[Import]] = {}
    for imp in imports:
        if imp.target.startswith("ext:"):
            continue
        a, b = subpackage_of(imp.source), subpackage_of(imp.target)
        if a != b and a in core and b in core:
            edges.setdefault((a, b), []).append(imp)
    return {
        (a, b): edges[(a, b)] + edges[(b, a)]
        for (a, b) in sorted(edges)
        if a < b and (b, a) in edges
    }


def _two_way(package: str, root: Path, imports: list[Import]) -> list[str]:
    return [
        f"{package}.{a} and {package}.{b} import each other: "
        + "; ".join(imp.where(package) for imp in both)
        + ". Subpackages of the core import one way: move what both need into the lower one"
        for (a, b), both in two_way_pairs(root, imports).items()
    ]


def _cycles(package: str, imports: list[Import]) -> list[str]:
    """Each group of modules that import each other, with one import of each step."""
    graph: dict[str, dict[str, Import]] = {}
    for imp in imports:
        if not imp.target.startswith("ext:") and not imp.own_face:
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


def test_the_core_has_layers_and_its_subpackages_import_one_way() -> None:
    root = Path(pytest_gpuperf.__file__).parent
    core = [m for m in _modules(root) if ring_of(m) == CORE]
    assert core and all(layer_of(m) in LAYER_ORDER for m in core)
    assert set(LAYERS.values()) == set(LAYER_ORDER)
    assert two_way_pairs(root, list(_imports("pytest_gpuperf", root))) == {}


def test_importing_a_core_module_loads_only_core_modules() -> None:
    """What Python really loads, face and lazy names included: each core module imported
    alone, in a fresh interpreter, loads no adapter, shell or CLI module (the pure
    diagnosis loads no collector)."""
    root = Path(pytest_gpuperf.__file__).parent
    core = sorted(m for m in _modules(root) if ring_of(m) == CORE and m)
    script = textwrap.dedent(
        """
        import importlib, json, sys
        out = {}
        for name in sys.argv[1:]:
            for m in [m for m in sys.modules if m.startswith("pytest_gpuperf")]:
                del sys.modules[m]
            importlib.import_module("pytest_gpuperf." + name)
            out[name] = sorted(m[15:] for m in sys.modules if m.startswith("pytest_gpuperf."))
        print(json.dumps(out))
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script, *core], capture_output=True, text=True, check=True
    )
    loaded = json.loads(run.stdout)
    # the faces above a module load with it whatever they are; what they load is counted
    wrong = {
        name: [m for m in mods if ring_of(m) != CORE and not name.startswith(m + ".")]
        for name, mods in loaded.items()
    }
    assert not {k: v for k, v in wrong.items() if v}


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
        (
            {
                "baseline/store.py": "def f():\n    from pkg.verdict import decide\n",
                "verdict/decide.py": "",
            },
            r"pkg.baseline.store \(line 2: from pkg.verdict import decide\): a module of the "
            r"store layer imports pkg.verdict.decide, of the higher verdict layer",
        ),
        (
            {
                "verdict/__init__.py": "from pkg.verdict.decide import decide\n",
                "verdict/decide.py": "",
                "verdict/policy.py": "",
                "measure/engine.py": "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from pkg.verdict.policy import X\n",
            },
            r"pkg.measure.engine \(through the face pkg.verdict, line 1: from "
            r"pkg.verdict.decide import decide\): a module of the measurement layer imports "
            r"pkg.verdict.decide",
        ),
        (
            {
                "artifacts/__init__.py": "from pkg.artifacts.collectors.base import C\n",
                "artifacts/collectors/base.py": "",
                "artifacts/analysis/diagnose.py": "",
            },
            r"pkg.artifacts.analysis.diagnose \(through the face pkg.artifacts, line 1: .*\): "
            r"a core module imports pkg.artifacts.collectors.base, a device adapter module",
        ),
        (
            {
                "baseline/records.py": "from pkg.verdict.numerics import is_fingerprint\n",
                "verdict/numerics.py": "",
                "verdict/judge.py": "from pkg.baseline import records\n",
            },
            r"pkg.baseline and pkg.verdict import each other: .*pkg.baseline.records .*"
            r"pkg.verdict.judge",
        ),
        (
            {"reporting/extra.py": "", "newpart/thing.py": ""},
            r"pkg.newpart.thing: no ring for this module",
        ),
    ],
)
def test_the_checker_catches(tmp_path: Path, files: dict[str, str], expected: str) -> None:
    import re

    problems = check("pkg", _package(tmp_path, {"model.py": "", **files}))
    assert any(re.search(expected, p) for p in problems), problems


def test_a_core_module_without_a_layer_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(RINGS, "newcore", CORE)
    problems = check("pkg", _package(tmp_path, {"model.py": "", "newcore.py": ""}))
    assert any("pkg.newcore: no layer for this core module" in p for p in problems), problems


def test_a_lazy_face_is_no_edge_of_the_modules_under_it(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "model.py": "",
            "artifacts/__init__.py": "def __getattr__(name):\n"
            "    from pkg.artifacts.collectors.base import C\n    return C\n",
            "artifacts/collectors/base.py": "",
            "artifacts/analysis/diagnose.py": "",
        },
    )
    assert check("pkg", root) == []

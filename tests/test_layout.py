"""The package's layout, checked on its source (an AST walk over ``gradir/``, nothing imported).

* No import cycles.  Every ``import`` counts, the lazy ones inside functions too: a cycle through a
  function-level import still ties the modules together (neither can be understood, tested or moved
  without the other), it only hides the knot from Python's import machinery.  Cycles among the
  imports that run at import time are checked apart.  An import under ``if TYPE_CHECKING:`` is no
  edge: it names a class for an annotation and never runs.
  Importing a module imports the packages above it first, so ``from .kernels import jit`` is an
  edge to ``gradir.backends.cpu.kernels`` as well as to ``gradir.backends.cpu.kernels.jit``.  The one edge not counted is
  a module's own ancestor packages (``from . import kernel`` in a kernel family): Python runs them
  before the module whatever it says, and a package's ``__init__`` importing the modules under it
  (``gradir.backends.cpu.kernels`` registering its families) is how the package is made.
* No module uses a private name (``_x``) of another gradir module, by ``from m import _x`` or
  ``m._x``.
* Every exception class lives in ``errors.py``.
* No module is longer than ``MAX_LINES``, generated ones apart: a module that says "generated" in
  its first five lines (or is listed in ``GENERATED``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "gradir"
MAX_LINES = 500
GENERATED: set[str] = set()  # modules generated in part that cannot say so in their first five lines

# What is left to do (issue "Layout"), each checked by an ``xfail(strict=True)`` test that passes once
# the list is empty, and by a test that nothing outside the list breaks the rule meanwhile.
OVER_BUDGET: set[str] = set()
LAZY_CYCLES: list[list[str]] = []
PRIVATE_USES: dict[str, list[str]] = {}
EXCEPTIONS_ELSEWHERE: dict[str, list[str]] = {}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _resolve(name: str, level: int, module: str | None) -> str:
    """The absolute name of ``from <level dots><module> import ...`` written in module ``name``."""
    if not level:
        return module or ""
    base = name.split(".")
    if not _is_package(name):
        base.pop()
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _targets(name: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The gradir modules (and the packages above them) an import statement loads."""
    found = []
    if isinstance(node, ast.Import):
        found = [alias.name for alias in node.names]
    else:
        base = _resolve(name, node.level, node.module)
        found.append(base)
        found += [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES]
    out = set()
    for target in found:
        parts = target.split(".")
        out |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & MODULES.keys()
    return out


def _import_nodes(node: ast.AST, lazy: bool) -> list[ast.Import | ast.ImportFrom]:
    """The import statements under ``node`` that can run (not under ``if TYPE_CHECKING:``, which
    only names classes for annotations): with ``lazy``, all of them; otherwise those that run when
    the module is imported (not in a function)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [node]
    if not lazy and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return []
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
        return [n for child in node.orelse for n in _import_nodes(child, lazy)]
    return [n for child in ast.iter_child_nodes(node) for n in _import_nodes(child, lazy)]


def _imports(name: str, lazy: bool) -> set[str]:
    out = set()
    for node in _import_nodes(TREES[name], lazy):
        out |= _targets(name, node)
    return {t for t in out if t != name}


def _graph(lazy: bool) -> dict[str, set[str]]:
    """Module -> the modules it imports, without the edges to its own ancestor packages (Python
    runs a package's ``__init__`` before any module in it, whatever the module says)."""
    return {name: {t for t in _imports(name, lazy) if not name.startswith(t + ".")} for name in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(comps)


def test_the_walk_sees_the_package() -> None:
    assert {"gradir", "gradir.backends.cpu.kernels.jit", "gradir.errors"} <= MODULES.keys()
    assert "gradir.errors" in _graph(lazy=False)["gradir.backends.cpu.runtime"]
    assert "gradir.backends.cpu.runtime" not in _graph(lazy=False)["gradir.cli.run"]  # imported in functions only
    assert "gradir.backends.cpu.runtime" in _graph(lazy=True)["gradir.cli.run"]
    assert _resolve("gradir.backends.cpu.kernels.lstm.cell", 2, None) == "gradir.backends.cpu.kernels"
    assert _resolve("gradir.backends.cpu.kernels", 1, "jit") == "gradir.backends.cpu.kernels.jit"
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_among_module_level_imports() -> None:
    assert _cycles(_graph(lazy=False)) == []


def test_no_import_cycles_but_the_known_lazy_ones() -> None:
    assert _cycles(_graph(lazy=True)) == LAZY_CYCLES


@pytest.mark.xfail(LAZY_CYCLES != [], strict=True, reason=f"function-level imports still close cycles: {LAZY_CYCLES}")
def test_no_import_cycles_counting_function_level_imports() -> None:
    assert _cycles(_graph(lazy=True)) == []


def _private_uses(name: str) -> list[str]:
    tree = TREES[name]
    aliases: dict[str, str] = {}  # local name -> gradir module it is bound to
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = _resolve(name, node.level, node.module)
            if base.split(".")[0] != "gradir":
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in MODULES:
                    aliases[alias.asname or alias.name] = full
                elif alias.name.startswith("_") and not alias.name.startswith("__") and base != name:
                    found.append(f"from {base} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "gradir" and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__") and aliases[node.value.id] != name):
            found.append(f"{aliases[node.value.id]}.{node.attr}")
    return sorted(set(found))


def test_no_private_uses_but_the_known_ones() -> None:
    assert {name: uses for name in MODULES if (uses := _private_uses(name))} == PRIVATE_USES


@pytest.mark.xfail(PRIVATE_USES != {}, strict=True, reason=f"private names still used across modules: {PRIVATE_USES}")
def test_no_module_uses_another_modules_private_names() -> None:
    assert {name: uses for name in MODULES if (uses := _private_uses(name))} == {}


def _exception_classes(name: str) -> list[str]:
    """Classes deriving from an exception class (by base name: ``...Error``, ``Exception``, ...)."""
    known = {"Exception", "BaseException", "ValueError", "TypeError", "RuntimeError", "OSError", "KeyError"}
    out = []
    changed = True
    classes = [n for n in ast.walk(TREES[name]) if isinstance(n, ast.ClassDef)]
    while changed:
        changed = False
        for node in classes:
            bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases}
            if node.name not in out and (bases & known or any(b.endswith("Error") for b in bases)):
                out.append(node.name)
                known.add(node.name)
                changed = True
    return sorted(out)


def _exceptions_elsewhere() -> dict[str, list[str]]:
    return {name: classes for name in MODULES if name != "gradir.errors" and (classes := _exception_classes(name))}


def test_no_exception_classes_outside_errors_py_but_the_known_ones() -> None:
    assert _exceptions_elsewhere() == EXCEPTIONS_ELSEWHERE


@pytest.mark.xfail(EXCEPTIONS_ELSEWHERE != {}, strict=True,
                   reason=f"exception classes still outside errors.py: {EXCEPTIONS_ELSEWHERE}")
def test_every_exception_class_is_in_errors_py() -> None:
    assert _exceptions_elsewhere() == {}


def test_the_exception_walk_sees_errors_py() -> None:
    assert {"GradirError", "ParseError", "UsageError"} <= set(_exception_classes("gradir.errors"))


def _lines(name: str) -> int:
    return len(MODULES[name].read_text().splitlines())


def _says_generated(text: str) -> bool:
    return "generated" in "\n".join(text.splitlines()[:5]).lower()


def _over_budget() -> set[str]:
    return {name for name in MODULES if name not in GENERATED and _lines(name) > MAX_LINES
            and not _says_generated(MODULES[name].read_text())}


def test_a_module_that_says_generated_in_its_first_lines_is_exempt() -> None:
    assert _says_generated('"""Kernels: generated by scripts/gen.py; do not edit."""\n')
    assert not _says_generated("\n".join(["x = 1"] * 5 + ["# generated below"]))


def test_no_module_over_the_budget_but_the_known_ones() -> None:
    assert _over_budget() <= OVER_BUDGET


@pytest.mark.xfail(OVER_BUDGET != set(), strict=True, reason=f"modules still over {MAX_LINES} lines: {OVER_BUDGET}")
def test_no_module_over_the_budget() -> None:
    assert _over_budget() == set()


def test_type_checking_imports_are_no_edges() -> None:
    """``Graph`` and ``Op`` are named in annotations below them under ``if TYPE_CHECKING:``."""
    assert "gradir.ir.graph" not in _graph(lazy=True)["gradir.ir.verify"]
    assert "gradir.ir.op" not in _graph(lazy=True)["gradir.ir.infer"]


def test_ruff_is_clean() -> None:
    """``.ci/run`` runs ruff (the test extra installs it); here too, so a finding fails locally first."""
    import subprocess
    import sys
    pytest.importorskip("ruff")
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=ROOT.parent, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_package_is_installed() -> None:
    """``pyproject.toml`` lists the packages setuptools installs: a new subpackage must be there."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    listed = set(tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    assert {name for name in MODULES if _is_package(name)} == listed


def test_the_written_jit_act_kernels_are_current() -> None:
    """``scripts/gen_jit_act.py`` writes ``_jit_act.py``'s element-wise kernels (as ``gradir ops
    --markdown`` writes docs/ops.md): an edit by hand, or to its table, shows here."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("gen_jit_act", ROOT.parent / "scripts" / "gen_jit_act.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    text = gen.TARGET.read_text(encoding="utf-8")
    assert gen.render(text) == text, "run python scripts/gen_jit_act.py"
    assert text.count("@njit(**ELEMENTWISE)\ndef ") >= len(gen.KERNELS)


# ---------------------------------------------------------------------------------------------
# Layers: dependencies point one way (docs/architecture.md).  A module may import its own layer and
# the layers below it; never one above.  A module's layer is that of the longest prefix below.

# A package's own __init__ may sit lower than the modules under it: ``gradir.backends`` is an
# import-free namespace holding the seam (``backends.base``) that the middle asks.
PACKAGE_LAYER = {"gradir.backends": "middle"}

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("gradir.errors", "gradir._blasenv", "gradir.fileio")),
    ("ir", ("gradir.ir", "gradir.arrayfiles")),
    ("text", ("gradir.text",)),
    ("ops", ("gradir.ops",)),
    ("middle", ("gradir.autodiff", "gradir.transforms", "gradir.backends.base")),
    ("backends", ("gradir.backends",)),
    ("interop/distributed", ("gradir.interop", "gradir.distributed")),
    ("tools", ("gradir.tools",)),
    ("cli", ("gradir.cli", "gradir.__main__", "gradir")),
]

# Imports that still point up, at import time: each must go (an xfail(strict=True) test passes once
# the dict is empty).  The middle asks a backend what it can do instead of importing kernels.
KNOWN_UPWARD: dict[str, list[str]] = {}

# Imports inside functions that point up, each justified: a lower layer calling up lazily is still a
# knot, so each is listed here with its reason.
LAZY_UPWARD: dict[str, list[str]] = {}


def _layer_of(name: str) -> int:
    if name in PACKAGE_LAYER:
        return [label for label, _prefixes in LAYERS].index(PACKAGE_LAYER[name])
    best, layer = "", -1
    for k, (_label, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > len(best):
                best, layer = prefix, k
    return layer


def _upward(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Module -> the modules of a higher layer it imports."""
    out = {}
    for name, targets in graph.items():
        up = sorted(t for t in targets if _layer_of(t) > _layer_of(name))
        if up:
            out[name] = up
    return out


def _lazy_only(graph_lazy: dict[str, set[str]], graph_now: dict[str, set[str]]) -> dict[str, set[str]]:
    return {name: graph_lazy[name] - graph_now[name] for name in graph_lazy}


def test_every_module_has_a_layer() -> None:
    assert [name for name in MODULES if _layer_of(name) < 0] == []


def test_the_layers_are_the_packages() -> None:
    """Each subpackage of gradir belongs to exactly one layer, and at most a dozen modules sit on top."""
    top = [name for name in MODULES if name.count(".") == 1 and not _is_package(name)]
    assert len(top) + 1 <= 12, top  # + gradir/__init__.py
    assert _layer_of("gradir.ir.graph") < _layer_of("gradir.text.syntax") < _layer_of("gradir.ops")
    assert _layer_of("gradir.backends.base") < _layer_of("gradir.backends.cpu.runtime")


def test_no_lower_layer_imports_a_higher_one_but_the_known_ones() -> None:
    assert _upward(_graph(lazy=False)) == KNOWN_UPWARD


@pytest.mark.xfail(KNOWN_UPWARD != {}, strict=True, reason=f"imports still pointing up: {KNOWN_UPWARD}")
def test_no_lower_layer_imports_a_higher_one() -> None:
    assert _upward(_graph(lazy=False)) == {}


def test_function_level_imports_point_up_only_where_justified() -> None:
    assert _upward(_lazy_only(_graph(lazy=True), _graph(lazy=False))) == LAZY_UPWARD


def test_the_layer_check_sees_a_planted_violation() -> None:
    """The check itself: an IR module importing the CLI, at import time or in a function, is found."""
    graph = {name: set(targets) for name, targets in _graph(lazy=False).items()}
    graph["gradir.ir.types"] = graph["gradir.ir.types"] | {"gradir.cli.main"}
    assert _upward(graph)["gradir.ir.types"] == ["gradir.cli.main"]
    lazy = {name: set(targets) for name, targets in _graph(lazy=True).items()}
    lazy["gradir.ops"] = lazy["gradir.ops"] | {"gradir.backends.cpu.runtime"}
    assert "gradir.backends.cpu.runtime" in _upward(_lazy_only(lazy, _graph(lazy=False)))["gradir.ops"]


# Cycles through a package's __init__: the package imports its children (to register them) and a
# child imports a name the __init__ defines (``from .. import kernel``).  Python copes (the child
# runs first and finds the name because the __init__ defined it above its imports), but the two
# cannot be read or moved apart.  Each must go.
KNOWN_INIT_CYCLES: list[list[str]] = []


def _graph_with_inits(lazy: bool) -> dict[str, set[str]]:
    """``_graph`` plus an edge from a module to an ancestor package whose __init__ gives it a name
    (not a submodule: ``from .. import jit`` only reaches the sibling module)."""
    graph = {name: set(targets) for name, targets in _graph(lazy).items()}
    for name in MODULES:
        for node in _import_nodes(TREES[name], lazy):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(name, node.level, node.module)
                if (name.startswith(base + ".") and base in MODULES
                        and any(f"{base}.{a.name}" not in MODULES for a in node.names)):
                    graph[name].add(base)
    return graph


def test_no_cycles_through_a_package_init_but_the_known_ones() -> None:
    assert _cycles(_graph_with_inits(lazy=True)) == KNOWN_INIT_CYCLES


@pytest.mark.xfail(KNOWN_INIT_CYCLES != [], strict=True, reason=f"package cycles: {KNOWN_INIT_CYCLES}")
def test_no_cycles_through_a_package_init() -> None:
    assert _cycles(_graph_with_inits(lazy=True)) == []


def test_the_init_edge_is_counted() -> None:
    """A planted ``from . import NAME`` of a package's own name closes a cycle with its __init__."""
    graph = _graph_with_inits(lazy=True)
    child = next(n for n in sorted(graph) if n.startswith("gradir.ops.") and n in graph["gradir.ops"])
    graph[child] = graph[child] | {"gradir.ops"}
    assert any("gradir.ops" in c and child in c for c in _cycles(graph))

"""The shape of the code: what the engine issue promised stays true.

The import graph has no cycle, counting imports written inside functions (a
lazy import that dodges a cycle is still a cycle: the two modules cannot be
understood apart).  No product module is over 800 lines and no class over
400, except the PTX parser and the ALU tables."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gpusafe", "gpusafe_instrument")
SIZE_EXEMPT = {"gpusafe_instrument/parser.py"}
"""The parser is one grammar; the ALU tables are exempt when they are tables."""
ALU_TABLES = "gpusafe/cpu/alu"


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@functools.cache
def _tree(path: Path) -> ast.Module:
    """Each module parsed once for all the tests here (parsing the whole
    tree is most of their time)."""
    return ast.parse(path.read_text(), str(path))


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """module -> the modules of ours it imports, anywhere in its text."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = _tree(path)
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                # the longest module of ours that the name starts with
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    graph[name].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, or None; a module that imports its own package's
    ``__init__`` is not a cycle by itself (Python runs the package first)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if node.startswith(nxt + "."):
                continue  # a package's own __init__: imported before the module
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if state.get(nxt) is None:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_import_graph_has_no_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_lazy_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"p": set(), "p.m": {"p"}}) is None


def test_imports_inside_functions_are_edges(tmp_path: Path) -> None:
    tree = ast.parse("def f():\n    from .x import y\n")
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert _resolve("gpusafe.engine.modules", False, node) == "gpusafe.engine.x"
    assert _resolve("gpusafe.engine", True, node) == "gpusafe.engine.x"


def _exempt(rel: str) -> bool:
    return rel in SIZE_EXEMPT or rel.startswith(ALU_TABLES)


def test_no_product_module_is_over_800_lines() -> None:
    big = {}
    for path in _modules().values():
        rel = path.relative_to(ROOT).as_posix()
        n = len(path.read_text().splitlines())
        if n > 800 and not _exempt(rel):
            big[rel] = n
    assert big == {}


def test_no_class_is_over_400_lines() -> None:
    big = {}
    for path in _modules().values():
        rel = path.relative_to(ROOT).as_posix()
        if _exempt(rel):
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ClassDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > 400:
                    big[f"{rel}:{node.name}"] = n
    assert big == {}


LAYERS = {
    # a package: the packages of ours it may import (besides itself)
    "gpusafe_instrument": set(),
    "gpusafe.cudaapi": {"gpusafe_instrument"},
    "gpusafe.cpu": {"gpusafe_instrument", "gpusafe.cudaapi"},
    "gpusafe.report": {"gpusafe_instrument", "gpusafe"},
    "gpusafe.engine": {"gpusafe_instrument", "gpusafe", "gpusafe.cudaapi", "gpusafe.report"},
    "gpusafe.doors": {"gpusafe_instrument", "gpusafe", "gpusafe.cudaapi", "gpusafe.engine",
                      "gpusafe.backends"},
}
"""The data flow, lowest layer first: a layer never imports one above it.
(``gpusafe`` alone is the package's ``__init__``: its version.)"""


def _package(module: str) -> str:
    for layer in sorted(LAYERS, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    return module if module in ("gpusafe", "gpusafe_instrument") else module.rsplit(".", 1)[0]


def test_each_layer_imports_only_the_layers_below_it() -> None:
    wrong = []
    for module, targets in import_graph().items():
        layer = _package(module)
        if layer not in LAYERS:
            continue
        for target in targets:
            other = _package(target)
            if other != layer and other not in LAYERS[layer]:
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_every_package_we_ship_has_a_name_of_ours() -> None:
    """A program checked by gpusafe imports gpusafe's packages into its own
    namespace: a generic name (``instrument``, ``tests``) would shadow the
    program's module of that name, or be shadowed by it."""
    root = Path(__file__).resolve().parent.parent
    shipped = {p.parent.name for p in root.glob("*/__init__.py")} - {"tests"}
    assert shipped and all(name.startswith("gpusafe") for name in shipped), shipped

"""The CPU device's module layout keeps the house rules: no import cycle among
its modules (imports inside functions and under ``TYPE_CHECKING`` count), no
module over 800 lines, no class over 400, and nothing of gpusafe imported from
outside ``gpusafe.cpu`` and ``gpusafe.cudaapi``."""

from __future__ import annotations

import ast
from pathlib import Path

import gpusafe.cpu

CPU = Path(gpusafe.cpu.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(CPU.rglob("*.py")):
        parts = ("gpusafe", *path.relative_to(CPU.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[str]:
    """Every module ``name`` imports, anywhere in its body (``from p import x``
    imports the submodule ``p.x`` when there is one, else the module ``p``)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                target = ".".join(parts[: len(parts) - (node.level - 1)]
                                  + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.append(sub if sub in modules else target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {t for t in _imports(name, path, modules) if t in modules and t != name}
            for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_cpu_modules_import_each_other_without_a_cycle() -> None:
    assert _cycle(_graph()) is None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_cpu_module_over_800_lines_and_no_class_over_400() -> None:
    big = []
    for name, path in _modules().items():
        text = path.read_text()
        if len(text.splitlines()) > 800:
            big.append(name)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 400:
                big.append(f"{name}.{node.name}")
    assert big == []


def test_the_cpu_device_imports_no_tool_code() -> None:
    modules = _modules()
    outside = sorted(
        f"{name} -> {target}" for name, path in modules.items()
        for target in _imports(name, path, modules)
        if target.startswith("gpusafe.")
        and not target.startswith(("gpusafe.cpu", "gpusafe.cudaapi"))
    )
    assert outside == []

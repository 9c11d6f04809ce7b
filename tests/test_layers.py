"""The structure holds by itself: no import cycle among lowerer's modules, no function over 60 lines.

Every import counts, function-level and ``TYPE_CHECKING`` ones included: a deferred import hides a
cycle from Python, not from the design. The graph is read from the source with ``ast`` (nothing is
imported), so this fails on a new cycle even where import-linter (``lint-imports``, the layer
contracts in pyproject.toml) is not installed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "lowerer"
#: The longest function body allowed (lines after the signature and the docstring).
MAX_BODY_LINES = 60


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Each module's dotted name -> (its file, whether it is a package's ``__init__``)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, package)
    return found


def _known(name: str, modules: dict[str, tuple[Path, bool]]) -> str | None:
    """The longest prefix of ``name`` that is one of ``modules`` (``a.b.func`` -> ``a.b``), or None."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path) -> dict[str, set[str]]:
    """Every module under ``root`` (a package) -> the modules of that package it imports, anywhere in it."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, package) in modules.items():
        here = name if package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")
                    parts = parts[:len(parts) - (node.level - 1)]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                # ``from pkg import sub`` imports the submodule; ``from mod import name`` the module
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in targets:
                found = _known(target, modules)
                if found is not None and found != name:
                    graph[name].add(found)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each one or more cycles), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:  # Tarjan's, iterative (no recursion limit on long chains)
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(found)


def long_functions(root: Path, limit: int = MAX_BODY_LINES) -> list[str]:
    """``path:line name (N lines)`` for each function whose body (after its docstring) is over ``limit`` lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = node.body
            documented = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str)
            if documented and len(body) == 1:
                continue
            first = body[1] if documented else body[0]
            lines = (node.end_lineno or node.lineno) - first.lineno + 1
            if lines > limit:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_import_cycle_among_lowerers_modules() -> None:
    graph = import_graph(ROOT)
    assert len(graph) > 100 and "lowerer.steps.registry" in graph["lowerer.rules.scan"]
    found = cycles(graph)
    assert not found, "import cycles (every import counted, function-level ones too): " + "; ".join(
        " <-> ".join(c) for c in found)


def test_function_level_and_type_checking_imports_count(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from pkg.sub import high\n    return high\n")
    (pkg / "sub" / "high.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                         "    from ..low import f\n")
    (pkg / "alone.py").write_text("import os\nfrom pkg import low\n")
    graph = import_graph(pkg)
    assert graph["pkg.low"] == {"pkg.sub.high"} and graph["pkg.sub.high"] == {"pkg.low"}
    assert graph["pkg.alone"] == {"pkg.low"}
    assert cycles(graph) == [["pkg.low", "pkg.sub.high"]]
    (pkg / "sub" / "high.py").write_text("X = 1\n")
    assert cycles(import_graph(pkg)) == []


def test_no_function_over_60_lines() -> None:
    found = long_functions(ROOT)
    assert not found, f"functions over {MAX_BODY_LINES} lines (split them into named helpers): " + "; ".join(found)


@pytest.mark.parametrize(("lines", "flagged"), [(60, False), (61, True)])
def test_the_line_measure(tmp_path: Path, lines: int, flagged: bool) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(lines - 1))
    (pkg / "m.py").write_text(f'def f():\n    """Doc.\n\n    More.\n    """\n{body}    return 0\n')
    assert bool(long_functions(pkg)) is flagged

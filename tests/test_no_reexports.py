"""Each name is imported from the module that defines it: no module re-exports another's names.

A module's ``__all__`` lists only what it defines; an import of ``lowerer`` code (``from lowerer.a.b import
name``, or ``b.name`` after ``from lowerer.a import b``) names the module that defines ``name``. The one
exception is a package's ``__init__`` for its public API (:data:`PUBLIC_API`, each entry saying where it
is documented). Read from the source with ``ast`` (nothing is imported), over ``lowerer/``, ``tests/``,
``benchmarks/``, ``examples/`` and ``docs/``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCANNED = ("lowerer", "tests", "benchmarks", "examples", "docs")

#: A package's ``__init__`` -> the names it re-exports as its public API (and where that is documented).
PUBLIC_API: dict[str, frozenset[str]] = {
    # the public API: lowerer/__init__.py's docstring, docs/api.md
    "lowerer": frozenset({"ConversionError", "ConvertResult", "InputError", "LowerPass", "LowererError",
                          "ModelCheckOptions", "Progress", "Report", "Rewrite", "Tolerance", "VerificationError",
                          "__version__", "convert"}),
    # the catalogue with every rule registered (importing lowerer.rules is what registers them): docs/rules.md
    "lowerer.rules": frozenset({"REGISTRY"}),
    # writing a model with its data files: docs/files.md
    "lowerer.model_io": frozenset({"save_model"}),
}

#: Imports in lowerer/backends/ and lowerer/cli/ still naming a re-exporting module, and the re-exports they
#: keep alive: (importing file, module imported from, name); (a file, its own module, name) is a re-export in
#: that file's ``__all__``. Each goes when its import names the defining module (then the name leaves the
#: re-exporting module's ``__all__`` and this set).
PENDING: frozenset[tuple[str, str, str]] = frozenset()


@functools.cache
def _module_file(name: str) -> Path | None:
    """The file of the dotted module ``name`` (a package's ``__init__.py``), or None."""
    path = REPO.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


_TREES: dict[Path, ast.Module] = {}
_DEFINED: dict[Path, frozenset[str]] = {}


def _tree(path: Path) -> ast.Module:
    if path not in _TREES:
        _TREES[path] = ast.parse(path.read_text(), str(path))
    return _TREES[path]


def _defined(path: Path) -> frozenset[str]:
    """The names a module defines at its top level (a def, a class, an assignment), not those it imports."""
    if path in _DEFINED:
        return _DEFINED[path]
    names: set[str] = set()

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, ast.If | ast.Try):
                walk(node.body)
                walk(node.orelse)
                if isinstance(node, ast.Try):
                    for handler in node.handlers:
                        walk(handler.body)
                    walk(node.finalbody)

    walk(_tree(path).body)
    _DEFINED[path] = frozenset(names)
    return _DEFINED[path]


def _all(path: Path) -> list[str]:
    for node in _tree(path).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            assert isinstance(node.value, ast.List | ast.Tuple), f"{path}: __all__ is not a literal"
            return [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _lowerer_files() -> list[Path]:
    return sorted((REPO / "lowerer").rglob("*.py"))


def _scanned_files() -> list[Path]:
    return sorted(p for d in SCANNED for p in (REPO / d).rglob("*.py") if ".venv" not in p.parts)


def _allowed(importer: Path, module: str, name: str) -> bool:
    if name in PUBLIC_API.get(module, ()):
        return True
    return (str(importer.relative_to(REPO)), module, name) in PENDING


def test_all_lists_only_own_names() -> None:
    """A module's ``__all__`` names what it defines (a package's public API excepted)."""
    found = []
    for path in _lowerer_files():
        module = _module_name(path)
        for name in _all(path):
            if name not in _defined(path) and not _allowed(path, module, name) \
                    and not any(m == module and n == name for _, m, n in PENDING):
                found.append(f"{path.relative_to(REPO)}: __all__ names {name!r}, defined elsewhere")
    assert not found, "\n".join(found)


def _uses(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) for each name ``path`` takes from a lowerer module: imported, or read as ``module.name``.

    ``module.name`` counts in lowerer/ only.
    """
    uses = []
    aliases: dict[str, str] = {}  # a local name bound to a lowerer module -> that module
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "lowerer":
            for alias in node.names:
                if _module_file(f"{node.module}.{alias.name}"):
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                else:
                    uses.append((node.lineno, node.module, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name.split(".")[0] == "lowerer":
                    aliases[alias.asname] = alias.name
    if path.relative_to(REPO).parts[0] != "lowerer":
        return uses  # a test reads ``module.name`` to patch a name where it is looked up
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            module = aliases[node.value.id]
            if not _module_file(f"{module}.{node.attr}"):
                uses.append((node.lineno, module, node.attr))
    return uses


@pytest.mark.parametrize("folder", SCANNED)
def test_names_come_from_their_defining_module(folder: str) -> None:
    """Every name taken from a lowerer module is defined there (a package's public API excepted)."""
    found = []
    for path in (p for p in _scanned_files() if p.relative_to(REPO).parts[0] == folder):
        for line, module, name in _uses(path):
            source = _module_file(module)
            if source is None:
                found.append(f"{path.relative_to(REPO)}:{line}: no module {module}")
            elif name not in _defined(source) and not name.startswith("__") and not _allowed(path, module, name):
                found.append(f"{path.relative_to(REPO)}:{line}: {name} from {module}, which does not define it")
    assert not found, "\n".join(found)


def test_public_api_and_pending_are_current() -> None:
    """Each exception is still used: a public name is re-exported, a pending import still there."""
    for module, names in PUBLIC_API.items():
        path = _module_file(module)
        assert path is not None, module
        assert names <= set(_all(path)), f"{module}: {sorted(names - set(_all(path)))} not in __all__"
    for importer, module, name in PENDING:
        if _module_name(REPO / importer) == module:
            assert name in _all(REPO / importer), (importer, name)
        else:
            assert (module, name) in {(m, n) for _, m, n in _uses(REPO / importer)}, (importer, module, name)

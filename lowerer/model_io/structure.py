"""Structural checks of a model before any conversion, the same for a file and a model in memory.

Every model lowerer converts goes through :func:`check_structure`:

1. opset imports: each domain that onnx knows is imported at a version the installed onnx knows
   (a model importing opset 10000 is refused, not treated as the newest), and no domain twice at
   different versions (twice at one version is one import: :mod:`lowerer.model_io.imports`);
2. definitions: every value a node reads is defined before it (in its graph or an enclosing
   one), no name is written twice in a graph, every node has its schema's required inputs,
   every graph and function output is computed. For a model file onnx's checker does this (on
   the file when the model has external data, so that it finds the data files beside the
   model), and more; for a model in memory (an ``onnx.ModelProto`` or ``onnx_ir.Model``) lowerer
   walks every graph, subgraph and function itself, unless onnx's checker passes it (the checker
   also refuses things lowerer converts on purpose, such as graph inputs without a shape or
   functions importing another opset than the model, and it would look for external data
   relative to the working directory, so it is not run on such a model);
3. what the checker does not check: every output of a model-local function is computed, and
   every tensor's data agrees with its type and dims (``raw_data`` length, typed-field counts:
   see :func:`lowerer.model_io.tensor_data.tensor_problem`), in every graph and function.
"""

from __future__ import annotations

import functools
from pathlib import Path

import onnx
import onnx.defs

from lowerer.core.errors import InputError
from lowerer.model_io.tensor_data import iter_owned_tensors, tensor_problem

__all__ = ["check_file", "check_structure"]

_DEFAULT = ("", "ai.onnx")
#: Default-domain ops with graph attributes (other domains' nodes are always looked into).
_GRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def check_structure(model: onnx.ModelProto, *, source: str, serialized: bytes | None = None,
                    path: Path | None = None, file: bool = False, deferred: bool = False) -> None:
    """Refuse a structurally invalid model with one line (see the module's docstring).

    Args:
        model: the model (not modified).
        source: how to name the model in messages (its path, or ``the model``).
        serialized: the model's bytes, when at hand (for onnx's checker; without them a model in
            memory is walked).
        path: the model's file, when it has external data (the checker then reads the file and
            finds the data files beside it).
        file: the model was read from a file: onnx's checker judges it (else lowerer's walk).
        deferred: with ``file``, onnx's checker and the tensors' check are left to :func:`check_file`
            (run beside the conversion by :class:`lowerer.model_io.input_check.InputCheck`).

    Raises:
        InputError: the first problem found.
    """
    _check_opset_imports(model.opset_import, source, "the model")
    seen: set[tuple[str, str, str]] = set()
    for function in model.functions:
        _check_opset_imports(function.opset_import, source, f"function {function.domain}.{function.name}")
        key = (function.domain, function.name, function.overload)
        if key in seen:
            raise InputError(f"{source}: function {function.domain}.{function.name} is defined twice; give each "
                             "function once")
        seen.add(key)
    checked = True  # onnx's checker passed: each attribute holds the one field its type names
    if file and (path is not None or serialized is not None):
        if not deferred:
            _run_checker(str(path) if path is not None else serialized, source)  # type: ignore[arg-type]
    elif not _passes_checker(serialized):
        _Walk(model, source).run()
        checked = False
        deferred = False
    for function in model.functions:
        _check_function_outputs(function, source)
    if not (file and deferred):
        _check_tensors(model, source, typed=checked)


def check_file(model: onnx.ModelProto, serialized: bytes, source: str, path: Path | None) -> None:
    """What ``check_structure(file=True, deferred=True)`` leaves: onnx's checker, then the tensors' data.

    Raises:
        InputError: the first problem found.
    """
    _run_checker(str(path) if path is not None else serialized, source)
    _check_tensors(model, source, typed=True)


def _check_tensors(model: onnx.ModelProto, source: str, typed: bool) -> None:
    for tensor, owner in iter_owned_tensors(model, typed=typed):
        problem = tensor_problem(tensor)
        if problem is not None:
            raise InputError(f"{source}: {owner}: the tensor {problem}")


def _passes_checker(serialized: bytes | None) -> bool:
    """Whether onnx's checker passes the bytes of a model in memory (then the walk finds nothing either).

    The checker is C++ and twice as fast as the walk; it checks all the walk does, and more. It is
    not run on a model with external data (it would look for the files relative to the working
    directory). When it fails, the walk decides: it may have failed on what lowerer accepts.
    """
    if serialized is None or b"location" in serialized:
        return False
    try:
        onnx.checker.check_model(serialized)
    except Exception:
        return False
    return True


def _run_checker(model: str | bytes, source: str) -> None:
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # ValidationError, or the checker's other C++ errors
        text = " ".join(str(e).split())
        raise InputError(f"{source}: not a valid ONNX model: onnx's checker says: {text}") from None


@functools.cache
def _known_versions() -> dict[str, tuple[int, int]]:
    versions = dict(onnx.defs.C.schema_version_map())
    if "" in versions:
        versions["ai.onnx"] = versions[""]
    return versions


def _check_opset_imports(imports: object, source: str, owner: str) -> None:
    seen: dict[str, int] = {}
    for entry in imports:  # type: ignore[attr-defined]
        domain = "" if entry.domain in _DEFAULT else entry.domain
        label = "the default domain (ai.onnx)" if domain == "" else f"domain {entry.domain!r}"
        if domain in seen and seen[domain] == entry.version:
            continue  # the same import twice: one import (see lowerer.model_io.imports.merge_duplicates)
        if domain in seen:
            raise InputError(f"{source}: {owner} imports {label} twice (versions {seen[domain]} and {entry.version}); "
                             "give each domain once, at the version its nodes were written for")
        seen[domain] = entry.version
        known = _known_versions().get(domain)
        if known is None:
            continue  # a domain onnx does not know (custom ops, local functions): not onnx's to judge
        low, high = known
        if not low <= entry.version <= high:
            raise InputError(f"{source}: {owner} imports opset {entry.version} of {label}, but the installed onnx "
                             f"{onnx.__version__} knows versions {low} to {high} only; convert models whose opsets "
                             "onnx knows (or upgrade onnx)")


def _check_function_outputs(function: onnx.FunctionProto, source: str) -> None:
    defined = set(function.input)
    for node in function.node:
        defined.update(node.output)
    for name in function.output:
        if name not in defined:
            raise InputError(f"{source}: function {function.domain}.{function.name} has output {name!r}, which no node "
                             "of it computes")


@functools.lru_cache(maxsize=1024)
def _arity(op_type: str, version: int, domain: str) -> tuple[int, int, tuple[int, ...]] | None:
    """(min inputs, max inputs, positions of required single inputs) of the schema, or None when unknown."""
    try:
        schema = onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError:
        return None
    single = onnx.defs.OpSchema.FormalParameterOption.Single
    required = tuple(i for i, p in enumerate(schema.inputs) if p.option == single)
    return schema.min_input, schema.max_input, required


@functools.lru_cache(maxsize=1024)
def _attribute_types(op_type: str, version: int, domain: str) -> dict[str, int]:
    """Attribute name -> AttributeProto type in the schema (the schema is known: see :func:`_arity`)."""
    schema = onnx.defs.get_schema(op_type, version, domain)
    return {name: int(a.type.value) for name, a in schema.attributes.items()}  # type: ignore[attr-defined]


def _attribute_type_name(kind: int) -> str:
    try:
        return str(onnx.AttributeProto.AttributeType.Name(kind))
    except ValueError:
        return str(kind)


class _Walk:
    """lowerer's own check of definitions, single assignment and required inputs, where the checker cannot run."""

    def __init__(self, model: onnx.ModelProto, source: str) -> None:
        self.model = model
        self.source = source

    def run(self) -> None:
        opsets = _opsets(self.model.opset_import)
        self.graph(self.model.graph, frozenset(), opsets, "graph")
        for function in self.model.functions:
            f_opsets = {**opsets, **_opsets(function.opset_import)}
            self.nodes(function.node, set(function.input), frozenset(), f_opsets,
                       f"function {function.domain}.{function.name}")

    def graph(self, graph: onnx.GraphProto, outer: frozenset[str], opsets: dict[str, int], where: str) -> None:
        listed = (("input", [v.name for v in graph.input]), ("initializer", [t.name for t in graph.initializer]))
        for what, names in listed:
            if len(set(names)) != len(names):
                twice = next(n for n in names if names.count(n) > 1)
                raise InputError(f"{self.source}: {where} has two {what}s named {twice!r}; names must be unique")
        defined = {v.name for v in graph.input}
        defined.update(t.name for t in graph.initializer)
        defined.update(s.values.name for s in graph.sparse_initializer)
        self.nodes(graph.node, defined, outer, opsets, where)
        for value in graph.output:
            if value.name not in defined and value.name not in outer:
                raise InputError(f"{self.source}: {where} has output {value.name!r}, which nothing computes")

    def nodes(self, nodes: object, defined: set[str], outer: frozenset[str], opsets: dict[str, int],
              where: str) -> None:
        arities: dict[tuple[str, str], tuple[int, int, tuple[int, ...]] | None] = {}
        for node in nodes:  # type: ignore[attr-defined]
            inputs = node.input
            for name in inputs:
                if name and name not in defined and name not in outer:
                    raise InputError(f"{self.source}: {_label(node)} ({node.op_type}, in {where}) reads {name!r}, "
                                     "which nothing defines before it")
            op_type, domain = node.op_type, node.domain
            key = (op_type, domain)
            if key not in arities:
                d = "" if domain in _DEFAULT else domain
                version = opsets.get(d)
                arities[key] = _arity(op_type, version, d) if version is not None else None
            arity = arities[key]
            if arity is not None:
                low, high, required = arity
                n = len(inputs)
                if n < low or n > high or any(i < n and not inputs[i] for i in required):
                    self.refuse_arity(node, arity, opsets, where)
                self.check_attributes(node, opsets, where)
            if op_type in _GRAPH_OPS or domain not in _DEFAULT:
                for attr in node.attribute:
                    graphs = [attr.g] if attr.HasField("g") else []
                    graphs.extend(attr.graphs)
                    for g in graphs:
                        self.graph(g, outer | defined, opsets, f"{where}/{node.name or op_type}.{attr.name}")
            for name in node.output:
                if not name:
                    continue
                if name in defined:
                    raise InputError(f"{self.source}: {_label(node)} ({op_type}, in {where}) writes {name!r}, which "
                                     "is already defined there; a value may be written once only")
                defined.add(name)

    def check_attributes(self, node: onnx.NodeProto, opsets: dict[str, int], where: str) -> None:
        """Refuse an attribute whose type is not the one the node's schema gives it."""
        domain = "" if node.domain in _DEFAULT else node.domain
        types = _attribute_types(node.op_type, opsets[domain], domain)
        for attr in node.attribute:
            expected = types.get(attr.name)
            if expected is not None and not attr.ref_attr_name and attr.type != expected:
                raise InputError(f"{self.source}: {_label(node)} ({node.op_type}, in {where}) has attribute "
                                 f"{attr.name!r} of type {_attribute_type_name(attr.type)}; {node.op_type} takes "
                                 f"{_attribute_type_name(expected)}")

    def refuse_arity(self, node: onnx.NodeProto, arity: tuple[int, int, tuple[int, ...]], opsets: dict[str, int],
                     where: str) -> None:
        low, high, required = arity
        version = opsets.get("" if node.domain in _DEFAULT else node.domain)
        n = len(node.input)
        missing = any(i < n and not node.input[i] for i in required)
        takes = f"at least {low}" if high >= 1 << 30 else f"{low}" if low == high else f"{low} to {high}"
        raise InputError(f"{self.source}: {_label(node)} ({node.op_type}-{version}, in {where}) has {n} input(s)"
                         f"{', a required one empty' if missing else ''}; {node.op_type}-{version} takes {takes}"
                         f"{', the required ones named' if missing else ''}")


def _label(node: onnx.NodeProto) -> str:
    return f"node {node.name!r}" if node.name else f"a {node.op_type} node"


def _opsets(imports: object) -> dict[str, int]:
    return {("" if e.domain in _DEFAULT else e.domain): e.version for e in imports}  # type: ignore[attr-defined]

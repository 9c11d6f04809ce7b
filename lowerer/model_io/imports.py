"""A model's opset imports: the same domain imported twice at one version, and imports no node uses.

Exporters write such lists: skl2onnx 1.20 imports the default domain twice at the same version for
a linear or forest classifier exported without ZipMap (``[ai.onnx.ml 1, '' 22, '' 22]``); a KMeans
imports ``ai.onnx.ml`` without a single ml node. onnx's checker and onnxruntime accept both.

* :func:`merge_duplicates`: a domain imported more than once at one version is one import (the
  later entries are removed); at different versions the model is ambiguous and
  :func:`lowerer.model_io.structure.check_structure` refuses it.
* :func:`used_domains`: the domains some node uses, in the main graph, its subgraphs and every
  model-local function's body. A function's own domain counts only through the nodes that call
  it. An import of another domain (the default domain aside, which lowerer always imports) does
  not hold the IR version up (:func:`lowerer.model_io.ir_version.choose`), and
  :func:`drop_unused` removes it from the output unless the caller keeps it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import onnx

__all__ = ["counted_imports", "drop_unused", "merge_duplicates", "unused_imports", "used_domains"]

_DEFAULT = ("", "ai.onnx")
_GRAPH = onnx.AttributeProto.GRAPH
_GRAPHS = onnx.AttributeProto.GRAPHS
#: Default-domain ops with graph attributes.
_GRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def _key(domain: str) -> str:
    return "" if domain in _DEFAULT else domain


def _label(domain: str) -> str:
    return "the default domain (ai.onnx)" if _key(domain) == "" else f"domain {domain!r}"


def merge_duplicates(imports: Any, owner: str = "the model") -> list[str]:
    """Remove the repeated entries of a domain imported more than once at the same version (in place).

    ``imports``: a model's or a function's ``opset_import`` (a repeated protobuf field). Different
    versions of one domain are left (the structure check refuses them).

    Returns:
        One note per merged domain (empty: nothing was repeated).
    """
    seen: dict[str, int] = {}
    repeated: list[int] = []
    notes: list[str] = []
    for index, entry in enumerate(imports):
        key = _key(entry.domain)
        if key in seen and seen[key] == entry.version:
            repeated.append(index)
            notes.append(f"{owner} imports {_label(entry.domain)} twice at version {entry.version} (as some "
                         "exporters write it): one import kept")
        else:
            seen.setdefault(key, entry.version)
    for index in reversed(repeated):
        del imports[index]
    return notes


def _node_lists(model: onnx.ModelProto) -> Iterator[Iterable[onnx.NodeProto]]:
    """The node lists of every graph (main graph, subgraphs at any depth) and every function body.

    Only the default domain's control-flow ops and other domains' nodes are looked into for subgraphs
    (reading every node's attributes would cost more than the rest of a large model's walk).
    """
    stack: list[Iterable[onnx.NodeProto]] = [model.graph.node, *(f.node for f in model.functions)]
    while stack:
        nodes = stack.pop()
        yield nodes
        for node in nodes:
            if node.op_type not in _GRAPH_OPS and node.domain in _DEFAULT:
                continue
            for a in node.attribute:
                if a.type == _GRAPH:
                    stack.append(a.g.node)
                elif a.type == _GRAPHS:
                    stack.extend(g.node for g in a.graphs)


def used_domains(model: onnx.ModelProto) -> set[str]:
    """The domains some node of ``model`` uses (``''`` for the default domain), every graph and function body."""
    used: set[str] = set()
    for nodes in _node_lists(model):
        used.update({node.domain for node in nodes})
    if "ai.onnx" in used:
        used.add("")
    return used


def unused_imports(model: onnx.ModelProto, used: set[str] | None = None) -> list[onnx.OperatorSetIdProto]:
    """The model's imports of a non-default domain that no node uses (``used``: :func:`used_domains`, if known)."""
    others = [e for e in model.opset_import if _key(e.domain) != ""]
    if not others:
        return []  # the common case: nothing but the default domain, no walk
    if used is None:
        used = used_domains(model)
    return [e for e in others if e.domain not in used]


def drop_unused(model: onnx.ModelProto) -> list[str]:
    """Remove the model's imports of non-default domains no node uses (in place).

    Returns:
        One note per import removed.
    """
    unused = unused_imports(model)
    if not unused:
        return []
    names = {e.domain for e in unused}
    kept = [e for e in model.opset_import if e.domain not in names]
    del model.opset_import[:]
    model.opset_import.extend(kept)
    return [f"the model imports {e.domain} {e.version}, which no node uses: the import is dropped (keep it with "
            "--keep-imports, API: keep_imports=True)" for e in unused]


def counted_imports(model: onnx.ModelProto, used: set[str] | None = None) -> list[onnx.OperatorSetIdProto]:
    """The imports that hold the IR version up: the default domain's, and those of domains some node uses."""
    unused = unused_imports(model, used)
    return [e for e in model.opset_import if e not in unused]

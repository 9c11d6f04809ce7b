"""Types and shapes of values, from what the model states and, only when needed, shape inference.

Facts belong to scopes: a value's type and shape come from the scope that defines it (the
graph where it is an input, an initializer or a node output, else the nearest enclosing one),
so sibling subgraphs that reuse a name each see their own value. Shape inference results are
found the same way, by the scope's locator in the inferred copy of the model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import onnx
import onnx.shape_inference

from lowerer.scopes import Scope, find_graph, function_key, iter_scopes

__all__ = ["ShapeIndex", "ValueType", "type_string", "value_type"]

logger = logging.getLogger(__name__)

#: (element type, dims) where dims is None for unknown rank, and a dim is None when not static.
ValueType = tuple[int, "list[int | None] | None"]


def value_type(tp: onnx.TypeProto) -> ValueType | None:
    """The (element type, dims) a TypeProto states, None when it is not a tensor type."""
    if not tp.HasField("tensor_type"):
        return None
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return (tt.elem_type, None)
    # A non-zero dim_value is set; only a zero needs HasField to tell 0 from a symbolic dim.
    dims: list[int | None] = [v if (v := d.dim_value) or d.HasField("dim_value") else None for d in tt.shape.dim]
    return (tt.elem_type, dims)


def type_string(tp: onnx.TypeProto) -> str | None:
    """The schema spelling of a type (``tensor(float)``, ``seq(tensor(int64))`` ...), None if unknown."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        elem = tp.tensor_type.elem_type
        return None if elem == 0 else f"tensor({onnx.TensorProto.DataType.Name(elem).lower()})"
    if kind == "sparse_tensor_type":
        elem = tp.sparse_tensor_type.elem_type
        return None if elem == 0 else f"sparse_tensor({onnx.TensorProto.DataType.Name(elem).lower()})"
    if kind == "sequence_type":
        inner = type_string(tp.sequence_type.elem_type)
        return None if inner is None else f"seq({inner})"
    if kind == "optional_type":
        inner = type_string(tp.optional_type.elem_type)
        return None if inner is None else f"optional({inner})"
    if kind == "map_type":
        value = type_string(tp.map_type.value_type)
        key = onnx.TensorProto.DataType.Name(tp.map_type.key_type).lower()
        return None if value is None else f"map({key}, {value})"
    return None


def _better_stated(old: ValueType | None, vt: ValueType) -> bool:
    """Whether a later statement ``vt`` replaces ``old`` while collecting what a graph states."""
    return old is None or (old[1] is None and vt[1] is not None) or (old[0] == 0 and vt[0] != 0)


def _better_inferred(old: ValueType | None, vt: ValueType) -> bool:
    """Whether an inferred ``vt`` replaces what the model states (``old``)."""
    if old is None or old[0] == 0 or old[1] is None:
        return vt[0] != 0 or old is None
    return vt[1] is not None and sum(d is None for d in vt[1]) < sum(d is None for d in old[1])


class _Level:
    """What one graph (or function body) itself states about its values, read on demand.

    :meth:`stated` gives what collecting the statements in order would (an initializer sets the
    type; then the first statement with a rank wins, else the first one), without converting
    every value_info of a large graph up front.
    """

    def __init__(self, holder: onnx.GraphProto | onnx.FunctionProto) -> None:
        self._holder = holder
        self._io: dict[str, ValueType] = {}
        self._defined: frozenset[str] | None = None
        if isinstance(holder, onnx.GraphProto):
            self._inits = holder.initializer
            names = [t.name for t in self._inits]
            self._init_index = dict(zip(names, range(len(names)), strict=True))  # the last one wins, as in order
            for vi in (*holder.input, *holder.output):
                vt = value_type(vi.type)
                if vt is not None and _better_stated(self._io.get(vi.name), vt):
                    self._io[vi.name] = vt
        else:
            self._init_index = {}
        self._infos = holder.value_info
        names = [vi.name for vi in self._infos]
        self._info_index = dict(zip(names, range(len(names)), strict=True))
        self._info_folded: dict[str, ValueType] | None = None
        if len(self._info_index) != len(names):  # a name stated twice: fold them all now
            self._info_folded = {}
            for vi in self._infos:
                vt = value_type(vi.type)
                if vt is not None and _better_stated(self._info_folded.get(vi.name), vt):
                    self._info_folded[vi.name] = vt

    def defines(self, name: str) -> bool:
        """Whether ``name`` is an input, initializer or node output of this graph (or function)."""
        if self._defined is None:
            holder = self._holder
            names: set[str] = {o for n in holder.node for o in n.output}
            if isinstance(holder, onnx.GraphProto):
                names.update(v.name for v in holder.input)
                names.update(t.name for t in holder.initializer)
                names.update(s.values.name for s in holder.sparse_initializer)
            else:
                names.update(holder.input)
            self._defined = frozenset(names)
        return name in self._defined

    def stated_proto(self, name: str) -> onnx.TypeProto | None:
        """The TypeProto this graph states for ``name`` (inputs, outputs, value_info), or None."""
        if isinstance(self._holder, onnx.GraphProto):
            for vi in (*self._holder.input, *self._holder.output):
                if vi.name == name and vi.type.WhichOneof("value"):
                    found: onnx.TypeProto = vi.type
                    return found
        j = self._info_index.get(name)
        if j is not None and self._infos[j].type.WhichOneof("value"):
            stated: onnx.TypeProto = self._infos[j].type
            return stated
        return None

    def stated(self, name: str) -> ValueType | None:
        """What this graph states about ``name`` (None when nothing)."""
        vt: ValueType | None = None
        i = self._init_index.get(name)
        if i is not None:
            t = self._inits[i]
            vt = (t.data_type, list(t.dims))
        stated = self._io.get(name)
        if stated is not None and _better_stated(vt, stated):
            vt = stated
        if self._info_folded is not None:
            stated = self._info_folded.get(name)
        else:
            j = self._info_index.get(name)
            stated = None if j is None else value_type(self._infos[j].type)
        if stated is not None and _better_stated(vt, stated):
            vt = stated
        return vt


class _Tree:
    """The levels of one scope tree (the main graph's, or one function's), and its inferred twin."""

    def __init__(self, root: onnx.GraphProto | onnx.FunctionProto) -> None:
        self.root = root
        self.levels: dict[tuple[object, ...], _Level] = {}
        self.inferred_root: onnx.GraphProto | None = None
        self.inferred_levels: dict[tuple[object, ...], _Level | None] = {}
        self.inferred = False

    def level(self, scope: Scope) -> _Level:
        level = self.levels.get(scope.locator)
        if level is None:
            level = self.levels[scope.locator] = _Level(scope.holder)
        return level

    def inferred_level(self, scope: Scope) -> _Level | None:
        if self.inferred_root is None:
            return None
        if scope.locator not in self.inferred_levels:
            graph = self.inferred_root if not scope.locator else find_graph(self.inferred_root, scope.locator)
            self.inferred_levels[scope.locator] = None if graph is None else _Level(graph)
        return self.inferred_levels[scope.locator]


class ShapeIndex:
    """Looks up the element type and dims of a value by name, as seen from a scope.

    A name is resolved in the innermost scope (from ``scope`` outwards) that defines it; what
    that scope's graph states is used, improved by shape inference when that is not ``enough``.
    Shape inference runs at most once per model (and once per model-local function, from the
    types its call sites pass in), only when a rule asks for a value the model does not
    describe, and on the model as it was given (``serialized``: its bytes).
    """

    def __init__(self, model: onnx.ModelProto, serialized: bytes | None = None) -> None:
        self._model = model
        # Inference must see the model as given, not as partly rewritten: keep its bytes.
        self._serialized: bytes | None = serialized
        self._snapshot_needed = serialized is None
        self._main = _Tree(model.graph)
        self._functions: dict[str, _Tree] = {}
        self._cache: dict[str, ValueType | None] = {}
        #: Whether the model as given passed onnx's strict shape and type inference (None: not run).
        #: When it ran here anyway, it ran strictly: the validation gate then need not run it again.
        self.input_strict: bool | None = None
        #: Where the inferred model comes from when it was inferred already (the input's checks, run
        #: beside the conversion: :meth:`lowerer.input_check.InputCheck.inferred`); None: inferred here.
        self.inference: Callable[[], tuple[onnx.ModelProto | None, bool]] | None = None

    def snapshot(self) -> None:
        """Keep the model's bytes for shape inference; call before the model is changed (when no bytes were given)."""
        if self._snapshot_needed and self._serialized is None:
            try:
                self._serialized = self._model.SerializeToString()
            except ValueError:  # over protobuf's 2 GiB limit: inference cannot run anyway
                self._serialized = None
        self._snapshot_needed = False

    # -- inference ---------------------------------------------------------------------------
    def _infer_main(self) -> None:
        self._main.inferred = True
        if self.inference is not None:
            found, self.input_strict = self.inference()
            if found is not None:
                self._main.inferred_root = found.graph
                self._cache.clear()
            return
        if self._serialized is None:
            return
        logger.debug("running shape inference: a rule needs a type or shape the model does not state")
        try:
            inferred = onnx.shape_inference.infer_shapes(self._serialized, check_type=True, strict_mode=True,
                                                         data_prop=True)
            self.input_strict = True
        except Exception as strict_error:
            self.input_strict = False
            logger.debug("strict shape inference failed: %s", strict_error)
            try:
                inferred = onnx.shape_inference.infer_shapes(self._serialized, strict_mode=False, data_prop=True)
            except Exception as e:  # inference is best effort: rules refuse when still unknown
                logger.debug("shape inference failed: %s", e)
                return
        self._main.inferred_root = inferred.graph
        self._cache.clear()

    def _function_tree(self, function: onnx.FunctionProto) -> _Tree:
        key = function_key(function)
        tree = self._functions.get(key)
        if tree is None:
            tree = self._functions[key] = _Tree(function)
        return tree

    # -- lookups -----------------------------------------------------------------------------
    def _resolve(self, tree: _Tree, scope: Scope, name: str) -> Scope:
        """The innermost scope from ``scope`` outwards that defines ``name`` (the root when none does)."""
        s = scope
        while s.parent is not None and not tree.level(s).defines(name):
            s = s.parent
        return s

    def _from(self, tree: _Tree, scope: Scope, name: str, with_inferred: bool) -> ValueType | None:
        vt = tree.level(scope).stated(name)
        if with_inferred:
            inferred = tree.inferred_level(scope)
            if inferred is not None:
                new = inferred.stated(name)
                if new is not None and _better_inferred(vt, new):
                    vt = new
        return vt

    def known(self, scope: Scope, name: str) -> ValueType | None:
        """What :meth:`lookup` would give without running shape inference (stated, or already inferred)."""
        if scope.function is not None:
            return self.lookup(scope, name)
        return self._graph_lookup(scope, name)

    def _graph_lookup(self, scope: Scope, name: str) -> ValueType | None:
        if scope.parent is None:  # the main graph: the common case, cached
            try:
                return self._cache[name]
            except KeyError:
                vt = self._cache[name] = self._from(self._main, scope, name, True)
                return vt
        return self._from(self._main, self._resolve(self._main, scope, name), name, True)

    def lookup(
        self, scope: Scope, name: str, enough: Callable[[ValueType], bool] = lambda vt: True
    ) -> ValueType | None:
        """The (elem_type, dims) of ``name`` as seen from ``scope``, or None when unknown.

        Shape inference runs (once per model or function) when what the model states is not ``enough``.
        """
        if scope.function is not None:
            tree = self._function_tree(scope.function)
            home = self._resolve(tree, scope, name)
            vt = self._from(tree, home, name, True)
            if (vt is None or not enough(vt)) and not tree.inferred:
                tree.inferred = True
                tree.inferred_root = self._infer_function(scope.function)
                vt = self._from(tree, home, name, True)
            return vt
        vt = self._graph_lookup(scope, name)
        if (vt is None or not enough(vt)) and not self._main.inferred:
            self._infer_main()
            vt = self._graph_lookup(scope, name)
        return vt

    def type_str(self, scope: Scope, name: str) -> str | None:
        """The schema spelling of ``name``'s type (``tensor(float)``, ``seq(...)``), None when unknown."""
        vt = self.lookup(scope, name, lambda vt: vt[0] != 0)
        if vt is not None and vt[0] != 0:
            return f"tensor({onnx.TensorProto.DataType.Name(vt[0]).lower()})"
        tree = self._main if scope.function is None else self._function_tree(scope.function)
        home = self._resolve(tree, scope, name)
        for level in (tree.inferred_level(home), tree.level(home)):
            tp = level.stated_proto(name) if level is not None else None
            if tp is not None and (spelled := type_string(tp)) is not None:
                return spelled
        return None

    def symbols(self, scope: Scope, name: str) -> list[int | str | None] | None:
        """The dims of ``name`` with symbolic ones by name (``"batch"``), None where not even named.

        Two dims with the same symbol in one model are equal at run time (what onnx's shape
        inference and exporters mean by naming them); used to prove a shape entry equals a dim.
        """
        self.lookup(scope, name, lambda vt: vt[1] is not None and None not in vt[1])
        tree = self._main if scope.function is None else self._function_tree(scope.function)
        home = self._resolve(tree, scope, name)
        best: list[int | str | None] | None = None
        for level in (tree.level(home), tree.inferred_level(home)):
            tp = level.stated_proto(name) if level is not None else None
            if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
                continue
            dims: list[int | str | None] = [
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tp.tensor_type.shape.dim]
            if best is None or sum(d is None for d in dims) < sum(d is None for d in best):
                best = dims
        return best

    # -- functions ---------------------------------------------------------------------------
    def _call_site_types(self, function: onnx.FunctionProto) -> list[ValueType | None] | None:
        """The input types of ``function`` merged over all its call sites (None if never called)."""
        merged: list[ValueType | None] | None = None
        callers: list[tuple[Scope, onnx.NodeProto]] = []

        for root in iter_scopes(self._model):
            if root.function is function:
                continue
            for scope, _, node in root.walk():
                if node.op_type == function.name and node.domain == function.domain \
                        and node.overload == function.overload:
                    callers.append((scope, node))
        for scope, node in callers:
            types = [self.lookup(scope, i, lambda vt: vt[1] is not None) if i else None for i in node.input]
            merged = types if merged is None else [_merge(a, b) for a, b in zip(merged, types, strict=False)]
        return merged

    def _infer_function(self, function: onnx.FunctionProto) -> onnx.GraphProto | None:
        """The function's body as a graph with inferred value_info, from the types its call sites pass in."""
        inputs = self._call_site_types(function)
        if not inputs or any(t is None for t in inputs[: len(function.input)]):
            return None
        graph_inputs = []
        for k, (name, vt) in enumerate(zip(function.input, inputs, strict=False)):
            assert vt is not None
            elem, dims = vt
            shape = None if dims is None else [d if d is not None else f"__in{k}_d{i}" for i, d in enumerate(dims)]
            graph_inputs.append(onnx.helper.make_tensor_value_info(name, elem, shape))
        graph = onnx.helper.make_graph(list(function.node), "f", graph_inputs,
                                       [onnx.ValueInfoProto(name=o) for o in function.output])
        opsets = {e.domain: e for e in self._model.opset_import}
        opsets.update({e.domain: e for e in function.opset_import})
        model = onnx.helper.make_model(graph, opset_imports=list(opsets.values()),
                                       ir_version=self._model.ir_version or 8)
        model.functions.extend(f for f in self._model.functions if f is not function)
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        except Exception as e:  # attribute references and the like: best effort only
            logger.debug("shape inference of function %s failed: %s", function.name, e)
            return None
        result = inferred.graph
        # The call sites' input types count as stated for the body's inputs (first: they win).
        found = list(result.value_info)
        del result.value_info[:]
        result.value_info.extend([*graph_inputs, *found])
        return result


def _merge(a: ValueType | None, b: ValueType | None) -> ValueType | None:
    if a is None or b is None or a[0] != b[0]:
        return None
    if a[1] is None or b[1] is None or len(a[1]) != len(b[1]):
        return (a[0], None)
    return (a[0], [x if x == y else None for x, y in zip(a[1], b[1], strict=True)])

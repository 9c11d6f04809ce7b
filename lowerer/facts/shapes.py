"""Types and shapes of values, from what the model states and, only when needed, shape inference.

Facts belong to scopes: a value's type and shape come from the scope that defines it (the
graph where it is an input, an initializer or a node output, else the nearest enclosing one),
so sibling subgraphs that reuse a name each see their own value. Shape inference results are
found the same way, by the scope's locator in the inferred copy of the model.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import numpy as np
import onnx
import onnx.defs
import onnx.numpy_helper
import onnx.shape_inference

from lowerer.facts.body_shapes import body_input_types, infer_graph
from lowerer.facts.value_types import ValueType, type_string, value_type
from lowerer.model_io.scopes import Scope, find_graph, function_key, has_subgraphs, iter_scopes

__all__ = ["ShapeIndex"]

logger = logging.getLogger(__name__)

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
        #: The model as given, parsed from its bytes when a subgraph is first inferred on its own.
        self._given: onnx.GraphProto | None = None
        #: Subgraphs inferred on their own (:meth:`refined`), by locator; None where that found nothing.
        self._alone: dict[tuple[object, ...], _Level | None] = {}
        #: What :meth:`refined` found beyond the model's inference, by (locator, name); producers by locator.
        self._refined: dict[tuple[tuple[object, ...], str], ValueType | None] = {}
        self._producers: dict[tuple[object, ...], dict[str, onnx.NodeProto]] = {}
        self._depth = 0
        #: Whether the model as given passed onnx's strict shape and type inference (None: not run).
        #: When it ran here anyway, it ran strictly: the validation gate then need not run it again.
        self.input_strict: bool | None = None
        #: Where the inferred model comes from when it was inferred already (the input's checks, run
        #: beside the conversion: :meth:`lowerer.model_io.input_check.InputCheck.inferred`); None: inferred here.
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

    def refined(self, scope: Scope, name: str, value_of: Callable[[Scope, str], np.ndarray | None],
                enough: Callable[[ValueType], bool] = lambda vt: True) -> ValueType | None:
        """:meth:`lookup`, improved where that is not ``enough`` by what lowerer's own facts prove.

        onnx's inference of the whole model sees no outer constant's value inside a body (a body's
        ``Unsqueeze(x, axes)`` with ``axes`` an outer Constant gets no rank), gives a Scan's state
        inputs the initial states' types unchecked, and its data propagation folds fewer shapes than
        lowerer's constants do (a ``Split`` by ``Concat(Identity(Shape(x)[3:4]), ...)``). Then:

        * in a subgraph of the main graph, the subgraph that defines ``name`` is inferred on its own,
          as the model gave it (:func:`lowerer.facts.body_shapes.infer_graph`): its outer values typed as
          seen from around it (refined the same way), small constant ones valued by ``value_of``, a
          Scan's or Loop's body inputs typed as the call provably passes them
          (:func:`lowerer.facts.body_shapes.body_input_types`);
        * the node that makes ``name`` (as the model gave it; not one with subgraphs) is inferred on its
          own by onnx's per-node inference, its inputs typed the same way (refined in turn) and small
          constant ones valued by ``value_of``.

        Static dims only: dim names an inference makes up say nothing.
        """
        vt = self.lookup(scope, name, enough)
        if (vt is not None and enough(vt)) or scope.function is not None:
            return vt
        home = self._resolve(self._main, scope, name)
        key = (home.locator, name)
        if key in self._refined:
            found = self._refined[key]
        elif self._depth > _MAX_REFINE_DEPTH:
            return vt
        else:
            self._refined[key] = None  # while it is worked out: a cycle finds nothing
            self._depth += 1
            try:
                found = self._refine(home, name, value_of)
            finally:
                self._depth -= 1
            self._refined[key] = found
        return _merged(vt, found)

    def _refine(self, home: Scope, name: str, value_of: Callable[[Scope, str], np.ndarray | None]
                ) -> ValueType | None:
        found: ValueType | None = None
        if home.parent is not None:
            level = self._alone_level(home, value_of)
            found = None if level is None else level.stated(name)
        if found is not None and found[0] != 0 and found[1] is not None and None not in found[1]:
            return found
        return _merged(found, self._node_inferred(home, name, value_of))

    def given_graph(self, locator: tuple[object, ...]) -> onnx.GraphProto | None:
        """The graph at ``locator`` in the model as given (parsed from its bytes on first use)."""
        if self._given is None and self._serialized is not None:
            given = onnx.ModelProto()
            given.ParseFromString(self._serialized)
            self._given = given.graph
        return None if self._given is None else find_graph(self._given, locator)  # type: ignore[arg-type]

    def _node_inferred(self, home: Scope, name: str, value_of: Callable[[Scope, str], np.ndarray | None]
                       ) -> ValueType | None:
        """The type of ``name`` from its producer in ``home`` alone (onnx's per-node inference), or None."""
        graph = self.given_graph(home.locator)
        if graph is None or home.opset is None:
            return None
        producers = self._producers.get(home.locator)
        if producers is None:
            producers = self._producers[home.locator] = {o: n for n in graph.node for o in n.output if o}
        node = producers.get(name)
        if node is None or node.domain not in ("", "ai.onnx") or has_subgraphs(node):
            return None
        types: dict[str, onnx.TypeProto] = {}
        data: dict[str, onnx.TensorProto] = {}
        for i in node.input:
            if not i or i in types:
                continue
            vt = self.refined(home, i, value_of, lambda vt: vt[1] is not None and None not in vt[1])
            if vt is None or vt[0] == 0:
                return None
            types[i] = onnx.helper.make_tensor_type_proto(vt[0], None if vt[1] is None else list(vt[1]))
            value = value_of(home, i)
            if value is not None and value.dtype != object and value.size <= _VALUED_MAX:
                with contextlib.suppress(TypeError, ValueError):
                    data[i] = onnx.numpy_helper.from_array(value, i)
        try:
            schema = onnx.defs.get_schema(node.op_type, home.opset, "")
            out = onnx.shape_inference.infer_node_outputs(
                schema, node, types, data, opset_imports=[onnx.helper.make_opsetid("", home.opset)])
        except Exception as e:  # best effort
            logger.debug("per-node inference of %s failed: %s", node.op_type, e)
            return None
        tp = out.get(name)
        return None if tp is None else value_type(tp)

    def _alone_level(self, home: Scope, value_of: Callable[[Scope, str], np.ndarray | None]) -> _Level | None:
        if home.locator in self._alone:
            return self._alone[home.locator]
        self._alone[home.locator] = None  # while it is inferred: a lookup from inside finds nothing here
        graph = self.given_graph(home.locator)
        parent = self.given_graph(home.locator[:-1])
        if graph is None or parent is None or home.parent is None or home.opset is None:
            return None
        outside = home.parent
        opsets = {e.domain: e.version for e in self._model.opset_import}
        opsets[""] = home.opset

        def type_of(name: str) -> ValueType | None:
            return self.refined(outside, name, value_of)

        def symbols_of(name: str) -> list[int | str | None] | None:
            return self.symbols(outside, name)

        def constant(name: str) -> np.ndarray | None:
            return value_of(outside, name)

        holder = parent.node[home.locator[-1][0]]
        inputs = body_input_types(holder, home.opset, type_of, symbols_of, constant, opsets) \
            if home.locator[-1][1] == "body" else {}
        inferred, _ = infer_graph(graph, opsets, type_of, symbols_of, constant, inputs)
        level = None if inferred is None else _Level(inferred)
        self._alone[home.locator] = level
        return level

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


#: How deep :meth:`ShapeIndex.refined` follows producers and enclosing scopes.
_MAX_REFINE_DEPTH = 48
#: Constants up to this many elements are given to per-node inference as values.
_VALUED_MAX = 1 << 12


def _merged(vt: ValueType | None, found: ValueType | None) -> ValueType | None:
    """Two sound statements about one value combined: the known element type, the rank, each static dim."""
    if found is None:
        return vt
    if vt is None:
        return found
    elem = vt[0] or found[0]
    if vt[1] is None or found[1] is None:
        return (elem, vt[1] if vt[1] is not None else found[1])
    if len(vt[1]) != len(found[1]):  # they disagree: neither rank is taken as more than the model's
        return vt
    return (elem, [a if a is not None else b for a, b in zip(vt[1], found[1], strict=True)])


def _merge(a: ValueType | None, b: ValueType | None) -> ValueType | None:
    if a is None or b is None or a[0] != b[0]:
        return None
    if a[1] is None or b[1] is None or len(a[1]) != len(b[1]):
        return (a[0], None)
    return (a[0], [x if x == y else None for x, y in zip(a[1], b[1], strict=True)])

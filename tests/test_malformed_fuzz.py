"""Malformed models end in a result or one LowererError line: the API, a path, and the CLI.

Valid small models (Split with constant sizes, ArgMax, Hardmax, Reshape with a constant shape, If
with subgraphs, a model-local function, and examples/example_opset11.onnx) are mutated (inputs
dropped or renamed, raw_data lengths, dims and data types corrupted, attribute types swapped,
subgraph outputs deleted, duplicate and dangling names, bad opset imports). Every surface must
return a result or fail with a :class:`lowerer.core.errors.LowererError` (the CLI: exit 1 or 2, one
``lowerer: error:`` line, not an internal error), write nothing on failure, and finish within a
deadline.

CI runs a fixed set (derandomized); ``LOWERER_MALFORMED_EXAMPLES=N`` runs N random examples.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import numpy as np
import onnx
import pytest
from _convert_helpers import make_model, value_info
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.cli import main
from lowerer.core.errors import LowererError

_LONG = int(os.environ.get("LOWERER_MALFORMED_EXAMPLES", "0") or 0)
_SETTINGS = settings(
    max_examples=_LONG or 100, deadline=None, derandomize=not _LONG, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
#: Seconds one example may take over all its surfaces (a hang fails the test).
DEADLINE_S = 60
F, I64 = TensorProto.FLOAT, TensorProto.INT64
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "example_opset11.onnx"


# -- valid models -------------------------------------------------------------------------------------
def _split() -> onnx.ModelProto:
    sizes = helper.make_node("Constant", [], ["s"], name="sizes",
                             value=numpy_helper.from_array(np.array([2, 2], np.int64), "sv"))
    split = helper.make_node("Split", ["x", "s"], ["a", "b"], axis=1, name="split")
    return make_model([sizes, split], [value_info("x", F, [3, 4])], [value_info("a", F, [3, 2]),
                                                                      value_info("b", F, [3, 2])], 13)


def _argmax() -> onnx.ModelProto:
    node = helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=1, name="am")
    return make_model([node], [value_info("x", F, [2, 3])], [value_info("y", I64, [2, 1])], 11)


def _hardmax() -> onnx.ModelProto:
    node = helper.make_node("Hardmax", ["x"], ["y"], axis=1, name="hm")
    return make_model([node], [value_info("x", F, [2, 3])], [value_info("y", F, [2, 3])], 11)


def _reshape() -> onnx.ModelProto:
    shape = numpy_helper.from_array(np.array([3, 2], np.int64), "shape")
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="rs")
    return make_model([node], [value_info("x", F, [2, 3])], [value_info("y", F, [3, 2])], 13, initializers=[shape])


def _if() -> onnx.ModelProto:
    def branch(op: str, name: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["x"], [f"{name}_y"], axis=1, name=f"{name}_n")], name, [],
                                 [value_info(f"{name}_y", F, [2, 3])])

    node = helper.make_node("If", ["c"], ["y"], then_branch=branch("Hardmax", "then"),
                            else_branch=branch("Softmax", "else"), name="if")
    return make_model([node], [value_info("c", TensorProto.BOOL, []), value_info("x", F, [2, 3])],
                      [value_info("y", F, [2, 3])], 11)


def _function() -> onnx.ModelProto:
    body = [helper.make_node("Hardmax", ["a"], ["b"], axis=1, name="inner")]
    function = helper.make_function("local", "Hm", ["a"], ["b"], body, [helper.make_opsetid("", 11)])
    node = helper.make_node("Hm", ["x"], ["y"], domain="local", name="call")
    return make_model([node], [value_info("x", F, [2, 3])], [value_info("y", F, [2, 3])], 11,
                      functions=[function], extra_opsets=[("local", 1)])


def _example() -> onnx.ModelProto:
    return onnx.load(str(EXAMPLE))


BASES: dict[str, Callable[[], onnx.ModelProto]] = {
    "split": _split, "argmax": _argmax, "hardmax": _hardmax, "reshape": _reshape, "if": _if,
    "function": _function, "example": _example,
}


# -- what can be mutated --------------------------------------------------------------------------------
def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _graphs(attr.g)
            for g in attr.graphs:
                yield from _graphs(g)


def _node_lists(model: onnx.ModelProto) -> list[object]:
    return [g.node for g in _graphs(model.graph)] + [f.node for f in model.functions]


def _nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for nodes in _node_lists(model) for n in nodes]  # type: ignore[attr-defined]


def _tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    found = [t for g in _graphs(model.graph) for t in g.initializer]
    for node in _nodes(model):
        found.extend(a.t for a in node.attribute if a.HasField("t"))
    return found


def _names(model: onnx.ModelProto) -> list[str]:
    names = [n for node in _nodes(model) for n in (*node.input, *node.output) if n]
    names += [v.name for g in _graphs(model.graph) for v in (*g.input, *g.output)]
    return names or ["x"]


def _pick(draw: st.DrawFn, items: list[object]) -> object | None:
    return draw(st.sampled_from(items)) if items else None


Mutation = Callable[[st.DrawFn, onnx.ModelProto], str]


def _drop_input(draw: st.DrawFn, model: onnx.ModelProto) -> str:
    node = _pick(draw, [n for n in _nodes(model) if n.input])
    if node is None:
        return "none"
    i = draw(st.integers(0, len(node.input) - 1))
    if draw(st.booleans()):
        del node.input[i]
        return "drop-input"
    node.input[i] = ""
    return "empty-input"


def _rename(draw: st.DrawFn, model: onnx.ModelProto) -> str:
    node = _pick(draw, _nodes(model))
    if node is None:
        return "none"
    field = node.input if node.input and draw(st.booleans()) else node.output
    if not field:
        return "none"
    i = draw(st.integers(0, len(field) - 1))
    field[i] = draw(st.sampled_from(["dangling", *_names(model)]))
    return "rename"


def _raw_data(draw: st.DrawFn, model: onnx.ModelProto) -> str:
    tensor = _pick(draw, _tensors(model))
    if tensor is None:
        return "none"
    if not tensor.HasField("raw_data"):
        try:
            data = numpy_helper.to_array(tensor).tobytes()
        except Exception:  # an earlier mutation broke it already
            data = b""
        for field in ("int64_data", "float_data", "int32_data", "double_data", "string_data"):
            tensor.ClearField(field)  # type: ignore[arg-type]
        tensor.raw_data = data
    raw = tensor.raw_data
    cut = draw(st.integers(0, len(raw) + 9))
    tensor.raw_data = raw[:cut] if cut <= len(raw) else raw + b"\x01" * (cut - len(raw))
    return "raw-data-length"


def _typed_data(draw: st.DrawFn, model: onnx.ModelProto) -> str:
    tensor = _pick(draw, _tensors(model))
    if tensor is None:
        return "none"
    tensor.ClearField("raw_data")
    values = draw(st.lists(st.integers(-3, 3), max_size=9))
    field = draw(st.sampled_from(["int64_data", "float_data", "int32_data", "double_data", "string_data"]))
    if field == "string_data":
        tensor.string_data.extend(str(v).encode() for v in values)
    else:
        getattr(tensor, field).extend(values)
    return "typed-data-count"


def _dims(draw: st.DrawFn, model: onnx.ModelProto) -> str:
    tensor = _pick(draw, _tensors(model))
    if tensor is None:
        return "none"
    del tensor.dims[:]
    tensor.dims.extend(draw(st.lists(st.integers(-2, 5), max_size=4)))
    return "dims"


def _data_type(draw: st.DrawFn, model: onnx.ModelProto) -> str:
    tensor = _pick(draw, _tensors(model))
    if tensor is None:
        return "none"
    tensor.data_type = draw(st.integers(-1, 30))
    return "data-type"


def _attribute_type(draw: st.DrawFn, model: onnx.ModelProto) -> str:
    attr = _pick(draw, [a for n in _nodes(model) for a in n.attribute])
    if attr is None:
        return "none"
    kind = draw(st.sampled_from(["i", "f", "s", "ints", "type", "empty"]))
    if kind == "type":
        attr.type = draw(st.integers(0, 14))
        return "attribute-type-field"
    for name in ("i", "f", "s", "t", "g"):
        attr.ClearField(name)  # type: ignore[arg-type]
    for name in ("ints", "floats", "strings", "tensors", "graphs"):
        attr.ClearField(name)  # type: ignore[arg-type]
    if kind == "i":
        attr.i, attr.type = 1, onnx.AttributeProto.INT
    elif kind == "f":
        attr.f, attr.type = 0.5, onnx.AttributeProto.FLOAT
    elif kind == "s":
        attr.s, attr.type = b"x", onnx.AttributeProto.STRING
    elif kind == "ints":
        attr.ints.extend([1, 2])
        attr.type = onnx.AttributeProto.INTS
    else:
        attr.type = onnx.AttributeProto.UNDEFINED
    return "attribute-swap"


def _subgraph_output(draw: st.DrawFn, model: onnx.ModelProto) -> str:
    graphs = list(_graphs(model.graph))
    graph = _pick(draw, graphs)
    if graph is None or not graph.output:  # type: ignore[attr-defined]
        return "none"
    del graph.output[draw(st.integers(0, len(graph.output) - 1))]  # type: ignore[attr-defined]
    return "delete-output"


def _duplicate(draw: st.DrawFn, model: onnx.ModelProto) -> str:
    choice = draw(st.sampled_from(["node", "initializer", "input", "output-name", "function"]))
    graph = model.graph
    if choice == "node" and graph.node:
        graph.node.append(graph.node[draw(st.integers(0, len(graph.node) - 1))])
    elif choice == "initializer" and graph.initializer:
        graph.initializer.append(graph.initializer[0])
    elif choice == "input" and graph.input:
        graph.input.append(graph.input[0])
    elif choice == "function" and model.functions:
        model.functions.append(model.functions[0])
    else:
        node = _pick(draw, [n for n in _nodes(model) if n.output])
        if node is None:
            return "none"
        node.output[0] = draw(st.sampled_from(_names(model)))
    return f"duplicate-{choice}"


def _dangling(draw: st.DrawFn, model: onnx.ModelProto) -> str:
    graph = _pick(draw, list(_graphs(model.graph)))
    assert isinstance(graph, onnx.GraphProto)
    if draw(st.booleans()):
        graph.output.add().name = "nowhere"
    else:
        graph.node.append(helper.make_node("Relu", ["nowhere"], [f"r{len(graph.node)}"]))
    return "dangling"


def _opset(draw: st.DrawFn, model: onnx.ModelProto) -> str:
    kind = draw(st.sampled_from(["version", "twice", "drop", "function", "ir"]))
    if kind == "version" and model.opset_import:
        model.opset_import[0].version = draw(st.sampled_from([-1, 0, 1, 5, 10000, 1 << 40]))
    elif kind == "twice":
        model.opset_import.append(helper.make_opsetid("ai.onnx", 11))
    elif kind == "drop":
        del model.opset_import[:]
    elif kind == "function" and model.functions:
        del model.functions[0].opset_import[:]
    else:
        model.ir_version = draw(st.sampled_from([-1, 1, 2, 3, 99]))
    return f"opset-{kind}"


MUTATIONS: tuple[Mutation, ...] = (
    _drop_input, _rename, _raw_data, _typed_data, _dims, _data_type, _attribute_type, _subgraph_output,
    _duplicate, _dangling, _opset,
)


@st.composite
def malformed(draw: st.DrawFn) -> tuple[str, onnx.ModelProto, int]:
    """A mutated valid model and a target opset."""
    base = draw(st.sampled_from(sorted(BASES)))
    model = BASES[base]()
    done = [draw(st.sampled_from(MUTATIONS))(draw, model) for _ in range(draw(st.integers(1, 3)))]
    event(f"mutation: {done[0]}")
    return f"{base}: {', '.join(done)}", model, draw(st.sampled_from([7, 11, 12, 13, 18]))


# -- the property ---------------------------------------------------------------------------------------
class _DeadlineError(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _DeadlineError(f"an example took over {DEADLINE_S} s")


def _listing(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _check_cli(args: list[str], out_dir: Path, what: str) -> None:
    before = _listing(out_dir)
    result = CliRunner().invoke(main, args)
    assert result.exit_code in (0, 1, 2), f"{what}: exit {result.exit_code}: {result.stderr}{result.exception!r}"
    if result.exit_code == 0:
        return
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lowerer: error:"), f"{what}: {result.stderr}"
    assert "internal error" not in lines[0], f"{what}: {lines[0]}"
    assert "Traceback" not in result.output
    if result.exit_code == 2 and what == "convert":  # the report asked for is written for a model that was read
        def written(listing: dict[str, bytes]) -> dict[str, bytes]:
            return {k: v for k, v in listing.items() if k != "r.json"}

        assert written(_listing(out_dir)) == written(before), f"{what}: files written on failure"


def _convert_api(model: onnx.ModelProto | str, target: int, what: str) -> None:
    try:
        lowerer.convert(model, target_opset=target, verify=False)
    except LowererError as e:
        assert str(e) and "\n" not in str(e), f"{what}: {e!r}"


def _check_all(model: onnx.ModelProto, target: int, work: Path) -> None:
    _convert_api(model, target, "api")
    source = work / "in" / "m.onnx"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_bytes(model.SerializeToString())
    _convert_api(str(source), target, "api (path)")
    out_dir = work / "out"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "keep.txt").write_text("kept")
    _check_cli(["convert", str(source), "-o", str(out_dir / "m.onnx"), "--target-opset", str(target),
                "--no-verify", "--report", str(out_dir / "r.json")], out_dir, "convert")
    _check_cli(["inspect", str(source), "--target-opset", str(target)], out_dir, "inspect")
    _check_cli(["verify", str(source), str(source)], out_dir, "verify")


@given(case=malformed())
@_SETTINGS
def test_malformed_models_end_in_a_result_or_one_error_line(case: tuple[str, onnx.ModelProto, int],
                                                             tmp_path_factory: pytest.TempPathFactory) -> None:
    what, model, target = case
    work = tmp_path_factory.mktemp("malformed")
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(DEADLINE_S)
    try:
        _check_all(model, target, work)
    except AssertionError as e:
        raise AssertionError(f"{what} -> opset {target}: {e}") from None
    except _DeadlineError as e:
        raise AssertionError(f"{what} -> opset {target}: {e}") from None
    except Exception as e:
        raise AssertionError(f"{what} -> opset {target}: not a LowererError: {type(e).__name__}: {e}") from e
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_every_base_model_converts() -> None:
    """The unmutated models convert (so the mutations, not the bases, are what the property meets)."""
    for name, build in BASES.items():
        lowerer.convert(build(), target_opset=13 if name != "split" else 12, verify=False)

"""A rewrite computed once per pattern: every stamp is the rewrite a fresh emission makes.

``StepEngine.check_all_stamps`` makes the engine emit every stamped node afresh as well and hand
both to a check; here the check compares them (nodes and constants with the names the conversion
made replaced by their order of first use, and the crossings). Run on every pattern of onnx's node
cases (each model's graph doubled, so that the second copy of each node is stamped) and of the real
fixtures (``tests/fixtures/real``), each to a few targets.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from _node_cases import load_cases
from onnx import helper

import lowerer
from lowerer.core.errors import LowererError
from lowerer.steps.conversion import Conversion
from lowerer.steps.engine import StepEngine
from lowerer.steps.stamping import canonical

REAL = Path(__file__).parent / "fixtures" / "real"


class _Checks:
    def __init__(self) -> None:
        self.stamps = 0
        self.wrong: list[str] = []

    def __call__(self, node: onnx.NodeProto, stamped: Conversion | None, fresh: Conversion | None) -> None:
        self.stamps += 1
        a = None if stamped is None else (canonical(node, stamped.nodes, stamped.constants), stamped.crossings)
        b = None if fresh is None else (canonical(node, fresh.nodes, fresh.constants), fresh.crossings)
        if a != b:
            self.wrong.append(f"{node.op_type} {node.name!r}")


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Checks]:
    found = _Checks()
    monkeypatch.setattr(StepEngine, "check_all_stamps", found)
    yield found


def _doubled(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each main-graph node twice: the copy computes the same from the same inputs, named apart."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    made = {o for n in graph.node for o in n.output if o}
    copies = []
    for n in graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        copy.input[:] = [f"{i}__dup" if i in made else i for i in n.input]
        copy.output[:] = [f"{o}__dup" if o else o for o in n.output]
        if copy.name:
            copy.name += "__dup"
        copies.append(copy)
    graph.node.extend(copies)
    for o in list(graph.output):
        if o.name in made:
            dup = graph.output.add()
            dup.CopyFrom(o)
            dup.name = f"{o.name}__dup"
    return out


def _node_cases() -> list[tuple[str, onnx.ModelProto]]:
    out = []
    for c in load_cases():
        model = c.model
        if model is None:
            continue
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for n in model.graph.node for a in n.attribute):
            continue  # nodes with subgraphs are never stamped
        out.append((c.name, model))
    return out


def _convert_all(model: onnx.ModelProto, targets: list[int]) -> int:
    done = 0
    for target in targets:
        try:
            lowerer.convert(model, target_opset=target, verify=False)
            done += 1
        except LowererError:
            pass
    return done


def _source(model: onnx.ModelProto) -> int | None:
    return next((e.version for e in model.opset_import if e.domain in ("", "ai.onnx")), None)


def test_stamps_agree_with_fresh_emission_on_the_node_cases(checks: _Checks) -> None:
    converted = 0
    for k, (_, model) in enumerate(_node_cases()):
        source = _source(model)
        if source is None:
            continue
        # One opset down, and one of 11, 13 and 18 in turn (each reached by a third of the cases: the suite's time).
        targets = sorted({t for t in (source - 1, (11, 13, 18)[k % 3]) if t >= 7 and t != source})
        try:
            doubled = _doubled(model)
            onnx.checker.check_model(doubled)
        except Exception:
            continue
        converted += _convert_all(doubled, targets)
    assert converted > 500
    assert checks.stamps > 500
    assert not checks.wrong, f"{len(checks.wrong)} stamps differ from fresh emission: {checks.wrong[:20]}"


def test_stamps_agree_with_fresh_emission_on_the_real_fixtures(checks: _Checks) -> None:
    manifest = json.loads((REAL / "MANIFEST.json").read_text())
    converted = 0
    for name in sorted(manifest["fixtures"]):
        model = onnx.load(REAL / name)
        source = _source(model)
        assert source is not None
        converted += _convert_all(model, [t for t in (17, 13, 11) if t < source])
    assert converted > 10
    assert checks.stamps > 100
    assert not checks.wrong, f"{len(checks.wrong)} stamps differ from fresh emission: {checks.wrong[:20]}"


def test_a_stamp_has_the_later_nodes_names() -> None:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3, 4])
    nodes = [helper.make_node("Hardmax", ["x"], [f"y{k}"], name=f"h{k}", axis=1) for k in range(3)]
    outs = [helper.make_tensor_value_info(f"y{k}", onnx.TensorProto.FLOAT, [2, 3, 4]) for k in range(3)]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], outs), opset_imports=[helper.make_opsetid("", 11)])
    result = lowerer.convert(model, target_opset=13, verify=False)
    onnx.checker.check_model(result.model, full_check=True)
    for k in range(3):
        made = [n for n in result.model.graph.node if n.name.startswith(f"h{k}")]
        assert made and any(f"y{k}" in n.output for n in made)
        assert all(i == "x" or i.startswith(f"y{k}") for n in made for i in n.input)

"""lowerer inside a PyTorch export pipeline (needs ``pip install torch``; not part of the tests).

``torch.onnx.export(..., dynamo=True)`` gives an ``onnx_ir.Model`` at opset 18; lowerer converts it
to older opsets (and back to an ``onnx_ir.Model``), verifying each rewrite, and this script checks
that onnxruntime computes exactly what it computed on the exported model.

Run: ``python examples/torch_export.py``
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import torch

import lowerer


class Head(torch.nn.Module):
    """Softmax, ArgMax, LogSoftmax on inner axes and a global max pool."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The four heads."""
        return (torch.softmax(x, dim=1), torch.argmax(x, dim=1, keepdim=True), torch.log_softmax(x, dim=2),
                torch.nn.functional.adaptive_max_pool2d(x, 1))


def run(model: ir.Model, x: np.ndarray) -> list[np.ndarray]:
    proto = ir.serde.serialize_model(model)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {proto.graph.input[0].name: x})


def main() -> None:
    x = torch.randint(0, 3, (2, 4, 5, 6)).float()  # small integers: ties everywhere
    exported = torch.onnx.export(Head().eval(), (x,), dynamo=True, opset_version=18).model
    want = run(exported, x.numpy())
    for target in (13, 11, 9):
        result = lowerer.convert(exported, target_opset=target)
        got = run(result.model, x.numpy())
        same = all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
        print(f"opset 18 -> {target}: {result.report.summary()['by_status']}, outputs identical: {same}")


if __name__ == "__main__":
    main()

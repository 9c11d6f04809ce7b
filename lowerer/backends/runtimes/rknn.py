"""The rknn-toolkit2 simulator: ``config``, ``load_onnx``, ``build(do_quantization=False)``, ``init_runtime()``.

No target: the toolkit's simulator on this machine; the platform is ``LOWERER_RKNN_PLATFORM`` (rk3588
by default). The toolkit builds a graph of fixed input shapes (a dim named, not a number, is refused:
"The input shape ['batch', 3, 64, 64] of 'x' is not support!"), so the model is loaded for the input
set's shapes, as its users load one: ``load_onnx(model, inputs=..., input_size_list=...)`` (RKNN.load_onnx's
docstring in rknn-toolkit2 2.5.0: 'input_size_list: Set each input tensor size list'); an input set of
other shapes is run on a build for those (a model whose dims are all numbers is loaded as it is: naming
the inputs makes the toolkit refuse one that only a subgraph reads). rknn-toolkit2 raises ``ValueError``
holding a whole traceback: its last ``Error:`` line is the cause. Loaded by path in the witness worker:
imports only the standard library, numpy, rknn and onnx (which rknn-toolkit2 requires).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

NAME = "rknn-toolkit2"
LABEL = "rknn-toolkit2"
DEVICE = "simulator"
DISTRIBUTION = "rknn-toolkit2"
INSTALL = "pip install rknn-toolkit2 (Python 3.8-3.12; see benchmarks/backend_matrix.py for its pins)"
BACKENDS = ("rknn",)
BUDGET = 1e-2
BUDGET_SOURCE = ("rknn-toolkit2 computes a model built with do_quantization=False in float16: RKNN.config's "
                 "docstring in rknn-toolkit2 2.5.0 (rknn/api/rknn.py of the cp311 wheel): 'float_dtype: non "
                 "quantize data type, currently support: float16, default is float16'; float16's unit roundoff "
                 "is 2^-11 (4.9e-4), 1e-2 x scale allows about 20 of them (the worst right probe measured on its "
                 "simulator was 8.9e-4 x scale: measured/rknn-toolkit2-2.5.0.json)")


def version(param: str) -> dict[str, str]:
    """rknn-toolkit2's version (ImportError: not installed)."""
    from importlib import metadata

    return {"version": metadata.version(DISTRIBUTION)}


def _cause(error: BaseException) -> BaseException:
    causes = [ln.strip() for ln in str(error).splitlines() if "Error: " in ln]
    return RuntimeError(causes[-1]) if causes else error


def _build(model: str, shapes: dict[str, list[int]]) -> Any:
    """The toolkit's RKNN with ``model`` loaded for ``shapes`` (its inputs' shapes), built in float16, started."""
    rknn = importlib.import_module("rknn.api").RKNN(verbose=False)
    try:
        rknn.config(target_platform=os.environ.get("LOWERER_RKNN_PLATFORM", "rk3588"))
        sizes = {"inputs": list(shapes), "input_size_list": list(shapes.values())} if _named_dims(model) else {}
        if rknn.load_onnx(model=model, **sizes) != 0:
            raise RuntimeError("rknn-toolkit2's load_onnx returned an error (see its log)")
        if rknn.build(do_quantization=False) != 0:
            raise RuntimeError("rknn-toolkit2's build returned an error (see its log)")
        if rknn.init_runtime() != 0:
            raise RuntimeError("rknn-toolkit2's init_runtime (the simulator) returned an error")
    except Exception as e:
        rknn.release()
        raise _cause(e) from None
    return rknn


def _named_dims(model: str) -> bool:
    """Whether an input of ``model`` has a dim that is not a number (onnx: a dependency of the toolkit)."""
    graph = importlib.import_module("onnx").load(model, load_external_data=False).graph
    given = {t.name for t in graph.initializer}
    return any(not d.HasField("dim_value") for i in graph.input if i.name not in given
               for d in i.type.tensor_type.shape.dim)


def _shapes(feeds: dict[str, Any]) -> dict[str, list[int]]:
    return {name: [int(d) for d in value.shape] for name, value in feeds.items()}


def load(model: str, param: str) -> dict[str, Any]:
    """The model's path, the toolkit imported (it loads a model for given input shapes: :func:`prepare`)."""
    importlib.import_module("rknn.api")
    if not os.path.isfile(model):
        raise FileNotFoundError(model)
    return {"model": model}


def prepare(loaded: dict[str, Any], names: list[str] | None, feeds: dict[str, Any], param: str) -> dict[str, Any]:
    """The model loaded for the input set's shapes, built in float16 and the simulator started."""
    shapes = _shapes(feeds)
    return {**loaded, "shapes": shapes, "rknn": _build(loaded["model"], shapes)}


def infer(prepared: dict[str, Any], feeds: dict[str, Any], names: list[str] | None, order: list[str]) -> list[Any]:
    """One input set run (inputs in the model's order, NCHW as given); other shapes than built: built again."""
    if _shapes(feeds) != prepared["shapes"]:
        prepared["rknn"].release()
        prepared["rknn"] = None
        prepared["shapes"] = _shapes(feeds)
        prepared["rknn"] = _build(prepared["model"], prepared["shapes"])
    try:
        arrays = [feeds[n] for n in order]
        outputs = prepared["rknn"].inference(inputs=arrays, data_format=["nchw"] * len(arrays))
    except Exception as e:
        raise _cause(e) from None
    if outputs is None:
        raise RuntimeError("rknn-toolkit2's inference returned nothing (see its log)")
    return list(outputs)


def close(prepared: dict[str, Any]) -> None:
    """The toolkit's resources released."""
    if prepared.get("rknn") is not None:
        prepared["rknn"].release()

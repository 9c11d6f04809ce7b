"""Tencent's ncnn: the model converted by pnnx to ncnn's param/bin, run with ``ncnn.Net`` in fp32 on the CPU.

pnnx is the ``pnnx`` binary its wheel ships (``pnnx model.onnx inputshape=[...]f32 fp16=0 ncnnparam=...``),
found without importing the ``pnnx`` package (whose ``__init__`` imports torch): install it with
``--no-deps``. The input shapes are the first input set's, so the model is converted in ``prepare``.
pnnx names the inputs ``in0``.. and the outputs ``out0``.. in the model's order, so only the model's
outputs are computed. ncnn holds every tensor as float32, with the batch axis pnnx names per input and output
as the Mat's batch count (see :func:`prepare`): inputs go in as float32, an integer or bool output comes back
rounded to the model's type.

Numbers: ncnn's ``Option`` turns ``use_fp16_packed``, ``use_fp16_storage`` and ``use_fp16_arithmetic``
on by default (``src/option.cpp`` of Tencent/ncnn; ``use_bf16_storage`` is off), and pnnx stores weights
in fp16 unless ``fp16=0`` (its usage text, ``fp16=1``; ``pnnx/utils/convert.py``: ``fp16 = True``). A
witness turns all four off, so every kernel stores and computes in float32. Loaded by path in the
witness worker: imports only the standard library, numpy, onnx (the model's input and output names and
types) and ncnn.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any

NAME = "ncnn"
LABEL = "ncnn"
DEVICE = "CPU (fp32: fp16 storage, packing and arithmetic off; pnnx fp16=0)"
DISTRIBUTION = "ncnn"
INSTALL = "pip install ncnn onnx && pip install --no-deps pnnx (pnnx's Python API needs torch; its binary does not)"
#: pnnx without its torch dependency (only its binary is used), from the same day as ncnn 1.0.20261020.
PIP = (("ncnn=={version}", "numpy", "onnx"), ("pnnx==20261020", "--no-deps"))
BACKENDS = ("ncnn",)
BUDGET = 1e-5
BUDGET_SOURCE = "the probe budget (fp16 storage/arithmetic off, pnnx fp16=0: float32 kernels)"

#: pnnx's input type suffixes (its pnnx/utils/utils.py), by numpy dtype name; others go in as f32.
_TYPES = {"float64": "f64", "float16": "f16", "uint8": "u8", "int8": "i8", "int16": "i16", "int32": "i32",
          "int64": "i64", "bool": "u8"}
#: pnnx's "no batch axis" (its ``batch_index=233``).
NO_BATCH = 233
#: The batch axes in pnnx's test script (``model_ncnn.py``), per input and output index.
_BATCH_IN = re.compile(r'ex\.input\("in(\d+)", ncnn\.Mat\(in\d+\.numpy\(\), batch_index=(\d+)\)')
_BATCH_OUT = re.compile(r'out(\d+)\.numpy\(batch_index=(\d+)\)')


def version(param: str) -> dict[str, str]:
    """The versions of ncnn and pnnx (ImportError: either is not installed)."""
    from importlib import metadata

    importlib.import_module("ncnn")
    _pnnx()
    return {"version": metadata.version(DISTRIBUTION), "pnnx": metadata.version("pnnx")}


def _pnnx() -> str:
    """The pnnx binary inside its package (the package itself is not imported: it imports torch)."""
    spec = importlib.util.find_spec("pnnx")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("pnnx is not installed (pip install --no-deps pnnx)")
    found = os.path.join(next(iter(spec.submodule_search_locations)), "pnnx")
    if not os.path.exists(found):
        raise ImportError(f"pnnx's binary is missing: {found}")
    return found


def load(model: str, param: str) -> Any:
    """The model's path with its input and output names and output types (converted when shapes are known)."""
    onnx = importlib.import_module("onnx")
    proto = onnx.load(model, load_external_data=False)
    known = {i.name for i in proto.graph.initializer}
    inputs = [i.name for i in proto.graph.input if i.name not in known]
    outputs = [(o.name, onnx.helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type))
               for o in proto.graph.output]
    return model, inputs, outputs


def _shape(shape: list[int], dtype: Any) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]" + _TYPES.get(dtype.name, "f32")


def _convert(model: str, work: str, shapes: str) -> tuple[str, str, dict[int, int], dict[int, int]]:
    """The param/bin pnnx writes for ``shapes`` in ``work``, with the batch axis it names per input and output."""
    done = subprocess.run([_pnnx(), model, f"inputshape={shapes}", "fp16=0", "device=cpu"], cwd=work,
                          capture_output=True, text=True, check=False)
    param_path, bin_path = os.path.join(work, "model.ncnn.param"), os.path.join(work, "model.ncnn.bin")
    if done.returncode != 0 or not os.path.exists(param_path):
        lines = [ln for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
        raise RuntimeError(f"pnnx failed (exit {done.returncode}): {lines[-1] if lines else ''}")
    script = os.path.join(work, "model_ncnn.py")
    text = ""
    if os.path.exists(script):
        with open(script, encoding="utf-8") as f:
            text = f.read()
    axes_in = {int(i): int(a) for i, a in _BATCH_IN.findall(text)}
    axes_out = {int(i): int(a) for i, a in _BATCH_OUT.findall(text)}
    return param_path, bin_path, axes_in, axes_out


def prepare(loaded: Any, names: list[str] | None, feeds: dict[str, Any], param: str) -> Any:
    """The model converted by pnnx (fp16=0) with the feeds' shapes, loaded in an fp32 ``ncnn.Net``.

    pnnx leaves the batch axis it finds out of the graph it writes and names it per input and output in the test
    script it writes (``model_ncnn.py``: ``ncnn.Mat(in0.numpy(), batch_index=0)``, ``out0.numpy(batch_index=0)``;
    233: none). ncnn's Python Mat takes that axis as its batch count (``Mat.n``: Tencent/ncnn
    ``python/src/main.cpp``, ``Mat(array, batch_index)`` creates ``n = shape[batch_index]`` Mats of the other
    dims; ``numpy(batch_index=...)`` stacks them back), and :func:`infer` feeds and reads them so. With 233 for
    every input, a 4-D image batch became one 4-D Mat where the graph takes 3-D samples: wrong at batch 1 too.
    """
    ncnn = importlib.import_module("ncnn")
    model, inputs, outputs = loaded
    known = [n for n, _ in outputs]
    missing = [n for n in names or [] if n not in known]
    if missing:
        raise RuntimeError(f"ncnn computes only the model's outputs, not {missing[0]!r}")
    work = tempfile.mkdtemp(prefix="lowerer-ncnn-", dir=os.path.dirname(os.path.abspath(model)))
    shutil.copyfile(model, os.path.join(work, "model.onnx"))
    shapes = [list(feeds[n].shape) for n in inputs]
    param_path, bin_path, axes_in, axes_out = _convert("model.onnx", work, ",".join(
        _shape(s, feeds[n].dtype) for s, n in zip(shapes, inputs, strict=True)))
    net = ncnn.Net()
    for option in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic", "use_bf16_storage"):
        setattr(net.opt, option, False)
    net.opt.num_threads = 1
    if net.load_param(param_path) != 0 or net.load_model(bin_path) != 0:
        raise RuntimeError("ncnn could not load pnnx's param/bin")
    wanted = [known.index(n) for n in names] if names else list(range(len(known)))
    return net, inputs, [(f"out{k}", outputs[k][1], axes_out.get(k, NO_BATCH)) for k in wanted], axes_in


def infer(prepared: Any, feeds: dict[str, Any], names: list[str] | None, order: list[str]) -> list[Any]:
    """One input set run as pnnx's script runs it: each input's batch axis as the Mat's batch (inputs as float32).

    Integer and bool outputs are rounded to the model's type.
    """
    import numpy as np

    ncnn = importlib.import_module("ncnn")
    net, inputs, outputs, axes_in = prepared
    present = set(net.input_names())
    with net.create_extractor() as ex:
        for i, name in enumerate(inputs):
            if f"in{i}" in present:
                value = np.ascontiguousarray(np.asarray(feeds[name]), dtype=np.float32)
                ex.input(f"in{i}", ncnn.Mat(value, batch_index=axes_in.get(i, NO_BATCH)).clone())
        values = []
        for blob, dtype, axis in outputs:
            status, mat = ex.extract(blob)
            if status != 0:
                raise RuntimeError(f"ncnn could not compute {blob} (status {status})")
            value = np.array(mat.numpy(batch_index=axis), copy=True)
            values.append(value if dtype.kind in "fc" else np.rint(value).astype(dtype))
    return values

"""Run one ONNX model on one runtime, in a process of its own: the worker behind :mod:`lowerer.backends.witnesses`.

A runtime's crash (a segfault in a plugin, ``std::terminate`` in a kernel) ends this process, not
lowerer or its caller. It imports nothing of lowerer (it is run by path, ``python witness_worker.py``),
only numpy and the runtime named:

* ``openvino``: OpenVINO's ``Core`` on the CPU plugin, inference precision fp32
  (``INFERENCE_PRECISION_HINT=f32``: the CPU plugin may otherwise compute in bf16 where the processor has it);
* ``onnxruntime-openvino``: onnxruntime with ``OpenVINOExecutionProvider`` (device CPU, FP32), the
  CPU provider taking what it refuses, as users run it;
* ``rknn-toolkit2``: rknn-toolkit2's simulator (``config(target_platform)``, ``load_onnx``,
  ``build(do_quantization=False)``, ``init_runtime()`` with no target);
* ``onnxruntime``: onnxruntime with one named execution provider (``onnxruntime:CUDAExecutionProvider``).

Usage: ``witness_worker.py version RUNTIME`` prints ``{"version": ...}`` (JSON) and exits 0, or exits 3
when the runtime is not installed (for ``onnxruntime-openvino`` the JSON also holds ``"openvino"``, the
OpenVINO release the wheel bundles, read from its ``libopenvino_c.so`` by ``ov_get_openvino_version``:
``2025.4.1`` in onnxruntime-openvino 1.24.1); ``witness_worker.py run RUNTIME MODEL FEEDS.npz OUT_DIR
[OUTPUTS.json]`` writes ``OUT_DIR/outputs.npz`` (arrays ``0``, ``1`` ... in the order of the output
names given, or the model's) or ``OUT_DIR/error.json`` (``{"stage": "load"|"compile"|"run", "message":
...}``); ``witness_worker.py batch RUNTIME JOBS.json`` does ``run`` for each ``[MODEL, FEEDS, OUT_DIR,
OUTPUTS|null]`` of the list in one process (one runtime import for many small models), in order, so
that a caller can tell from the folders which job a crash ended and go on with the next.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any

NOT_INSTALLED = 3


class _StageError(Exception):
    def __init__(self, stage: str, error: BaseException, input_set: int | None = None) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.stage = stage
        self.input_set = input_set


def _version(runtime: str) -> str:
    from importlib import metadata

    if runtime == "openvino":
        return metadata.version("openvino")
    if runtime == "onnxruntime-openvino":
        import onnxruntime

        if "OpenVINOExecutionProvider" not in onnxruntime.get_available_providers():
            raise ImportError("OpenVINOExecutionProvider is not available in this onnxruntime")
        return metadata.version("onnxruntime-openvino")
    if runtime == "rknn-toolkit2":
        return metadata.version("rknn-toolkit2")
    if runtime.startswith("onnxruntime:"):
        import onnxruntime

        if runtime.split(":", 1)[1] not in onnxruntime.get_available_providers():
            raise ImportError(f"{runtime.split(':', 1)[1]} is not available in this onnxruntime")
        return str(onnxruntime.__version__)
    raise ImportError(f"unknown runtime {runtime!r}")


def bundled_openvino() -> str:
    """The OpenVINO release inside onnxruntime-openvino: ``ov_get_openvino_version`` of its libopenvino_c.

    The wheel ships ``onnxruntime/capi/libopenvino_c.so`` (and no ``openvino`` package); its build number
    reads ``2025.4.1-0-test`` in onnxruntime-openvino 1.24.1, of which the release is the part before ``-``.
    """
    import ctypes
    import glob

    import onnxruntime

    capi = os.path.join(os.path.dirname(onnxruntime.__file__), "capi")
    found = sorted(glob.glob(os.path.join(capi, "libopenvino_c.so*")))
    if not found:
        raise ImportError(f"no libopenvino_c.so in {capi}")

    class _Version(ctypes.Structure):
        _fields_ = [("buildNumber", ctypes.c_char_p), ("description", ctypes.c_char_p)]

    version = _Version()
    if ctypes.CDLL(found[0]).ov_get_openvino_version(ctypes.byref(version)) != 0:
        raise ImportError("ov_get_openvino_version failed")
    return str((version.buildNumber or b"").decode()).split("-", 1)[0]


@functools.lru_cache(maxsize=1)
def _openvino_core() -> Any:
    try:
        import openvino as ov

        return ov.Core()
    except (ImportError, AttributeError):  # 2023.0: the API is in openvino.runtime
        from openvino.runtime import Core

        return Core()


def _run_openvino(model: str, sets: list[dict[str, Any]], names: list[str] | None) -> list[list[Any]]:
    core = _openvino_core()
    try:
        ov_model = core.read_model(model)
    except Exception as e:
        raise _StageError("load", e) from None
    try:
        if names:
            ov_model.add_outputs([n for n in names if not _has_output(ov_model, n)])
        compiled = core.compile_model(ov_model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    except Exception as e:
        raise _StageError("compile", e) from None
    wanted = names or [_port_name(p) for p in ov_model.outputs]
    request = compiled.create_infer_request()
    values = []
    for k, feeds in enumerate(sets):
        try:
            results = request.infer({compiled.input(n): v for n, v in feeds.items()})
            values.append([_array(results[compiled.output(n)]) for n in wanted])
        except Exception as e:
            raise _StageError("run", e, k) from None
    return values


def _has_output(ov_model: Any, name: str) -> bool:
    return any(name in p.get_names() for p in ov_model.outputs)


def _port_name(port: Any) -> str:
    return str(port.get_any_name())


def _array(value: Any) -> Any:
    import numpy as np

    return np.array(value, copy=True)


def _run_onnxruntime(model: str, sets: list[dict[str, Any]], names: list[str] | None, provider: str
                     ) -> list[list[Any]]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    provider_options: dict[str, str] = {}
    if provider == "OpenVINOExecutionProvider":
        provider_options = {"device_type": "CPU", "precision": "FP32"}
    try:
        session = ort.InferenceSession(model, options, providers=[provider, "CPUExecutionProvider"],
                                       provider_options=[provider_options, {}])
    except Exception as e:
        raise _StageError("compile", e) from None
    values = []
    for k, feeds in enumerate(sets):
        try:
            values.append(list(session.run(names, feeds)))
        except Exception as e:
            raise _StageError("run", e, k) from None
    return values


def _rknn_cause(error: BaseException) -> BaseException:
    """rknn-toolkit2 raises ``ValueError`` holding a whole traceback: its last ``Error:`` line is the cause."""
    causes = [ln.strip() for ln in str(error).splitlines() if "Error: " in ln]
    return RuntimeError(causes[-1]) if causes else error


def _run_rknn(model: str, sets: list[dict[str, Any]], names: list[str] | None, order: list[str]
              ) -> list[list[Any]]:
    from rknn.api import RKNN

    rknn = RKNN(verbose=False)
    try:
        rknn.config(target_platform=os.environ.get("LOWERER_RKNN_PLATFORM", "rk3588"))
        if rknn.load_onnx(model=model) != 0:
            raise RuntimeError("rknn-toolkit2's load_onnx returned an error (see its log)")
    except Exception as e:
        raise _StageError("load", _rknn_cause(e)) from None
    try:
        if rknn.build(do_quantization=False) != 0:
            raise RuntimeError("rknn-toolkit2's build returned an error (see its log)")
        if rknn.init_runtime() != 0:
            raise RuntimeError("rknn-toolkit2's init_runtime (the simulator) returned an error")
    except Exception as e:
        raise _StageError("compile", _rknn_cause(e)) from None
    values = []
    try:
        for k, feeds in enumerate(sets):
            try:
                arrays = [feeds[n] for n in order]
                outputs = rknn.inference(inputs=arrays, data_format=["nchw"] * len(arrays))
                if outputs is None:
                    raise RuntimeError("rknn-toolkit2's inference returned nothing (see its log)")
                values.append(list(outputs))
            except Exception as e:
                raise _StageError("run", _rknn_cause(e), k) from None
    finally:
        rknn.release()
    return values


def _run(runtime: str, model: str, feeds_path: str, out_dir: str, outputs_path: str | None) -> None:
    import numpy as np

    with np.load(feeds_path, allow_pickle=False) as data:
        order = json.loads(str(data["__order__"]))
        count = int(data["__sets__"])
        sets = [{name: data[f"s{k}_in{i}"] for i, name in enumerate(order)} for k in range(count)]
    names = None
    if outputs_path:
        with open(outputs_path, encoding="utf-8") as f:
            names = json.load(f)
    try:
        if runtime == "openvino":
            values = _run_openvino(model, sets, names)
        elif runtime == "onnxruntime-openvino":
            values = _run_onnxruntime(model, sets, names, "OpenVINOExecutionProvider")
        elif runtime == "rknn-toolkit2":
            values = _run_rknn(model, sets, names, order)
        else:
            values = _run_onnxruntime(model, sets, names, runtime.split(":", 1)[1])
    except _StageError as e:
        with open(os.path.join(out_dir, "error.json"), "w", encoding="utf-8") as f:
            json.dump({"stage": e.stage, "message": " ".join(str(e).split())[:2000], "input_set": e.input_set}, f)
        return
    arrays: dict[str, Any] = {f"s{k}_{j}": np.asarray(v) for k, row in enumerate(values) for j, v in enumerate(row)}
    np.savez(os.path.join(out_dir, "outputs.npz"), **arrays)


def main(argv: list[str]) -> int:
    """Entry point (see the module docstring)."""
    if len(argv) >= 2 and argv[0] == "version":
        try:
            version = _version(argv[1])
        except Exception as e:
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
            return NOT_INSTALLED
        found = {"version": version}
        if argv[1] == "onnxruntime-openvino":
            found["openvino"] = bundled_openvino()
        print(json.dumps(found))
        return 0
    if len(argv) in (5, 6) and argv[0] == "run":
        _run(argv[1], argv[2], argv[3], argv[4], argv[5] if len(argv) == 6 else None)
        return 0
    if len(argv) == 3 and argv[0] == "batch":
        with open(argv[2], encoding="utf-8") as f:
            jobs = json.load(f)
        for model, feeds, out_dir, outputs in jobs:
            _run(argv[1], model, feeds, out_dir, outputs)
            with open(os.path.join(out_dir, "done"), "w", encoding="utf-8") as f:
                f.write("1")
        return 0
    print("usage: witness_worker.py version RUNTIME | run RUNTIME MODEL FEEDS.npz OUT_DIR [OUTPUTS.json] | "
          "batch RUNTIME JOBS.json",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

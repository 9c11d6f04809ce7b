"""Whether an execution provider onnxruntime lists can be created here: found once per process, in a child.

onnxruntime-gpu lists ``CUDAExecutionProvider`` (and ``TensorrtExecutionProvider``) whatever the
machine has. Where CUDA's libraries are missing (``libcublasLt.so.13``), no GPU is present or the
CUDA major differs, creating a session with that provider does not raise: onnxruntime logs the
library it failed to load and quietly runs every node on the CPU. And some of its calls
(``get_all_opkernel_def()``) create every compiled-in provider and kill the process with SIGSEGV
when one cannot load. So lowerer never asks such questions in its own process: a child opens a
one-node model with the provider alone and says whether the provider took it, and the library
errors onnxruntime printed name why not. A child that dies (a signal) is an answer too.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys

__all__ = ["PROBE_TIMEOUT_S", "probe_provider", "provider_problem"]

#: How long the child may take (creating a CUDA context can take seconds on a real GPU).
PROBE_TIMEOUT_S = 120.0

_CHILD = r"""
import json, sys
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state  # noqa: F401
provider = sys.argv[1]
model = sys.stdin.buffer.read()
so = ort.SessionOptions()
so.log_severity_level = 3
try:
    s = ort.InferenceSession(model, so, providers=[provider])
    print(json.dumps({"ok": provider in s.get_providers(), "error": None}))
except Exception as e:
    print(json.dumps({"ok": False, "error": " ".join(str(e).split())}))
"""

#: onnxruntime's log lines that say why a provider could not be created.
_LIBRARY = re.compile(r"Failed to load library (\S+) with error: ([^\n\x1b]+)")
_CREATE = re.compile(r"Failed to create (\w+ExecutionProvider)\.? ?([^\n\x1b]*)")


def _identity_model() -> bytes:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    data: bytes = model.SerializeToString()
    onnx.checker.check_model(model)
    return data


def probe_provider(provider: str, python: str | None = None, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Create a session with ``provider`` alone in a child process: None when it takes the model, else why not.

    Args:
        provider: a full provider name (``CUDAExecutionProvider``).
        python: the interpreter of the child (tests give a fake one); this one when None.
        timeout: seconds before the child is given up on.
    """
    env = dict(os.environ)
    env.setdefault("ORT_DISABLE_TELEMETRY", "1")
    try:
        done = subprocess.run([python or sys.executable, "-c", _CHILD, provider], input=_identity_model(),
                              capture_output=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return f"creating a {provider} session did not finish in {timeout:g} s"
    except OSError as e:
        return f"the probe could not start: {e}"
    err = done.stderr.decode("utf-8", "replace")
    library = _LIBRARY.search(err)
    because = f"onnxruntime failed to load {os.path.basename(library[1])}: {library[2].strip()}" if library else None
    if done.returncode < 0:
        import signal

        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        return f"creating a {provider} session killed the process ({name})" + (f"; {because}" if because else "")
    try:
        answer = json.loads(done.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (IndexError, ValueError):
        tail = " ".join(err.split())[-300:]
        return f"the probe ended with exit {done.returncode} and no answer ({tail or 'no output'})"
    if answer.get("ok"):
        return None
    if because:
        return because
    created = _CREATE.search(err)
    if created:
        return f"onnxruntime could not create {created[1]}" + (f" ({created[2].strip()})" if created[2].strip() else "")
    if answer.get("error"):
        return str(answer["error"]).replace("[ONNXRuntimeError] : ", "")[:300]
    return f"onnxruntime ran the probe on the CPU: {provider} was not used"


@functools.cache
def provider_problem(provider: str) -> str | None:
    """Why ``provider`` cannot run here (None: it can, or it is the CPU), asked once per process."""
    if provider == "CPUExecutionProvider":
        return None
    return probe_provider(provider)

"""The converted model opened as users open it: onnxruntime's default session options, optimizations on.

Every check of a conversion runs onnxruntime with graph optimizations off (:func:`.runner.quiet_session_options`),
so that what is compared is the graph lowerer wrote. Users write ``onnxruntime.InferenceSession(path)``:
their session runs onnxruntime's graph optimizer first, which may insert nodes of its own (its
``WeightBiasQuantization`` adds a ``Round`` to a QDQ Conv's float bias: no ``Round`` below opset 11)
or refuse what the unoptimized session takes. :func:`open_as_users_do` opens the final model that way
and runs it once on the first generated input set of the whole-model check (:func:`.feeds.generate_sets`).

A model that loads and runs with optimizations off but not with the default options fails the
conversion (exit 1), with one line naming onnxruntime's optimizer and the node its message names
(``inserted by onnxruntime's optimizer`` when the model has no node of that name). Where the
optimization-off session fails too, the failure is not the optimizer's: it is recorded, and the gates
that own it (the validation and runtime gates) speak for it. The outputs are not judged: with
optimizations on onnxruntime may fuse a QDQ unit into an integer kernel that rounds otherwise (the
original model too), so the comparisons stay with the optimization-off runs.

The session's thread pools are the one default not kept: ``intra_op_num_threads`` and
``inter_op_num_threads`` are 1. onnxruntime's graph optimizer does not read them (measured on
onnxruntime 1.32.0: the optimized graphs of the 29 real fixtures, saved with ``optimized_model_filepath``,
hold the same nodes and attributes either way, up to node names and order), and creating a default
session's thread pools cost 3 to 4 times the rest of the session (gpt2.dynamo.opset20: 42 ms of CPU
against 14 ms).

Cost: one session with optimizations on and one run. onnxruntime's optimizer grows faster than the graph
(measured on the synthetic benchmark model, converted to 13: 3.1 s at 5,000 nodes against 1.4 s with
optimizations off; about 70 s at 50,000), so above :data:`MAX_NODES` main-graph nodes the check is not run,
and the report's notes say so.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from lowerer.verification.feeds import MODEL_SET_KINDS, generate_sets
from lowerer.verification.graph_inputs import model_inputs
from lowerer.verification.ort import load_onnxruntime
from lowerer.verification.runner import EXTERNAL_DATA_FOLDER, quiet_session_options

__all__ = ["MAX_NODES", "UsersSession", "open_as_users_do"]

#: Above this many nodes (main graph and functions) the model is not opened with optimizations on (see above).
MAX_NODES = 2000
#: The node onnxruntime's loader names in its message: ``In Node, ("name", Op, "domain", version)``.
_NODE = re.compile(r'In Node, \("([^"]*)", ([A-Za-z0-9_]+)')


@dataclass
class UsersSession:
    """What opening the model with the default session options gave.

    Attributes:
        status: ``ran`` (opened and ran once), ``opened`` (opened; no input set could be made, or the run
            failed with optimizations off too), ``failed`` (fails with the default options only) or
            ``not-run`` (fails with optimizations off as well, or cannot be serialized).
        reason: one line.
        seconds: the time the check took.
    """

    status: str
    reason: str
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        """True when the default session options fail where the optimization-off ones do not."""
        return self.status == "failed"


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()).replace("[ONNXRuntimeError] : ", "")


def _named(model: onnx.ModelProto, message: str) -> str:
    """The node onnxruntime's message names, and whether the model has it or onnxruntime's optimizer made it."""
    found = _NODE.search(message)
    if found is None:
        return "a node onnxruntime's message does not name"
    name, op = found.group(1), found.group(2)
    ours = any(n.name == name for n in model.graph.node)
    made = "" if ours else ", inserted by onnxruntime's optimizer"
    return f"node {name!r} ({op}{made})"


def open_as_users_do(model: onnx.ModelProto, data_dir: str | os.PathLike[str] | None = None,
                     seed: int = 0) -> UsersSession:
    """Open ``model`` with onnxruntime's default session options (CPU) and run it once (see the module docstring)."""
    start = time.perf_counter()
    nodes = len(model.graph.node) + sum(len(f.node) for f in model.functions)
    if nodes > MAX_NODES:
        return UsersSession("not-run", f"not opened with onnxruntime's default session options: {nodes} nodes, over "
                                       f"{MAX_NODES} (its optimizer would take longer than the conversion)")
    try:
        data = model.SerializeToString()
    except ValueError:
        return UsersSession("not-run", "over protobuf's 2 GiB limit: not opened with the default session options")
    ort = load_onnxruntime()
    folder = None if data_dir is None else os.fspath(Path(data_dir).resolve())

    def session(default: bool) -> Any:
        so = ort.SessionOptions() if default else quiet_session_options(ort)
        # onnxruntime's log kept quiet: at 3 (ERROR) a failed run prints its kernel's lines on the user's stderr
        # (a ScatterND of moe_routing on a generated index); the exception carries the same message
        so.log_severity_level = 4
        so.intra_op_num_threads = so.inter_op_num_threads = 1  # see the module docstring: no optimizer reads them
        if folder is not None:  # external data: beside the model (an option that changes no optimization)
            so.add_session_config_entry(EXTERNAL_DATA_FOLDER, folder)
        return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])

    result = _open_and_run(model, session, seed)
    result.seconds = time.perf_counter() - start
    return result


def _open_and_run(model: onnx.ModelProto, session: Callable[[bool], Any], seed: int) -> UsersSession:
    """Open with the default options (then, on a failure, with optimizations off to tell whose it is); run once."""
    try:
        users = session(True)
    except Exception as e:
        said = _one_line(e)
        try:
            session(False)
        except Exception:
            return UsersSession("not-run", f"onnxruntime does not open it with optimizations off either: {said}")
        return UsersSession("failed", f"onnxruntime opens it with graph optimizations off, but not with its default "
                                      f"session options (as onnxruntime.InferenceSession(path) does): its graph "
                                      f"optimizer leaves {_named(model, said)} that does not load: {said}")
    specs = model_inputs(model)
    if isinstance(specs, str):
        return UsersSession("opened", f"opened with the default session options; not run: {specs}")
    sets, _ = generate_sets(model, specs, seed_key=[seed, 36], kinds=MODEL_SET_KINDS[:1])
    feeds = sets[0].feeds
    try:
        users.run(None, feeds)
    except Exception as e:
        said = _one_line(e)
        try:
            session(False).run(None, feeds)
        except Exception:
            return UsersSession("opened", f"opened with the default session options; the run on {sets[0].label} "
                                          f"fails with optimizations off too: {said}")
        return UsersSession("failed", f"onnxruntime runs it with graph optimizations off, but with its default "
                                      f"session options its graph optimizer leaves {_named(model, said)} that "
                                      f"fails on input set {sets[0].label}: {said}")
    return UsersSession("ran", f"opened with onnxruntime's default session options and ran on {sets[0].label}")

"""Issue 11, case 8: SIGINT, SIGTERM and SIGHUP at any moment of ``lowerer convert``.

The promise (lowerer/core/interrupts.py, README "What lowerer guarantees about files"): exit 128 + the
signal (130 SIGINT, 143 SIGTERM, 129 SIGHUP), one ``lowerer: error: interrupted by ...`` line, no
traceback, and every temporary file, file and folder the run created removed, unless the signal came
while the outputs were being renamed into place: it then waits for them all, and the line names them.

Two kinds of tests: a driver process that raises the signal at an exact point (during the imports,
while a data file is copied, while the model is written, just before the commit, during the commit),
and real ``python -m lowerer convert`` processes signalled after fixed delays from their start.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from _hostile_helpers import snapshot
from onnx import numpy_helper

import lowerer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from synthetic import build_model

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model that keeps lowerer busy for a while: 3,000 nodes (owned ops throughout), 8 MiB external data."""
    d = tmp_path_factory.mktemp("signals") / "model"
    d.mkdir()
    model = build_model(3000)
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(2 << 20, np.float32), "big"))
    onnx.save_model(model, str(d / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=1024)
    return d / "m.onnx"


def _assert_interrupted(proc: subprocess.CompletedProcess[str], signum: int) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lowerer: error: interrupted by "), (proc.args, proc.returncode,
                                                                                         proc.stderr)
    assert signal.Signals(signum).name in lines[0], proc.stderr
    assert proc.returncode == 128 + signum, (proc.returncode, proc.stderr)
    return lines[0]


#: Raise the signal at one exact point, then run the command line as ``python -m lowerer`` does.
_DRIVER = textwrap.dedent("""
    import os, signal, sys
    from lowerer.core import interrupts
    interrupts.install()
    phase, sig = sys.argv[1], getattr(signal, sys.argv[2])
    del sys.argv[1:3]

    if phase == "import":  # while onnx is being imported
        class Finder:
            def find_spec(self, name, path=None, target=None):
                if name == "onnx":
                    signal.raise_signal(sig)
                return None
        sys.meta_path.insert(0, Finder())
    else:
        import lowerer.model_io.files as files
        import lowerer.model_io as model_io
        if phase == "copy":  # halfway through copying the data file beside the output
            real_copy = model_io.writing._copy_range
            def copy(src, dst, so, do, n):
                real_copy(src, dst, so, do, n // 2)
                signal.raise_signal(sig)
                real_copy(src, dst, so + n // 2, do + n // 2, n - n // 2)
            model_io.writing._copy_range = copy
        elif phase == "write":  # halfway through writing the model's bytes
            real_write = model_io.writing._write_all
            def write(fd, data, offset):
                real_write(fd, data[: len(data) // 2], offset)
                signal.raise_signal(sig)
                real_write(fd, data[len(data) // 2:], offset + len(data) // 2)
            model_io.writing._write_all = write
        elif phase in ("before-commit", "in-commit"):
            real = files.Transaction.commit if phase == "before-commit" else files.Transaction._place
            def hook(self, *args):
                signal.raise_signal(sig)
                return real(self, *args)
            setattr(files.Transaction, "commit" if phase == "before-commit" else "_place", hook)
    from lowerer.cli import main
    main(prog_name="lowerer")
""")


@pytest.mark.parametrize(("phase", "signame", "extra"), [
    ("import", "SIGINT", []),
    ("copy", "SIGTERM", []),
    ("copy", "SIGINT", ["--report", "{out}/r.json"]),
    ("write", "SIGTERM", ["--external-data", "new/dir/d.bin"]),
    ("before-commit", "SIGHUP", ["--report", "{out}/r.json"]),
])
def test_signal_at_a_given_point_leaves_nothing(source: Path, tmp_path: Path, phase: str, signame: str,
                                                extra: list[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "existing.onnx").write_bytes(b"an output from before")
    before, before_src = snapshot(tmp_path), snapshot(source.parent)
    args = [a.format(out=out) for a in extra]
    proc = subprocess.run([sys.executable, "-c", _DRIVER, phase, signame, "convert", str(source), "-o",
                           str(out / "existing.onnx"), "--target-opset", "13", "--no-verify", *args],
                          capture_output=True, text=True, timeout=120)
    line = _assert_interrupted(proc, getattr(signal, signame))
    assert line.endswith("nothing was written")
    assert snapshot(tmp_path) == before
    assert snapshot(source.parent) == before_src


def test_signal_during_the_commit_waits_until_every_output_is_in_place(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([sys.executable, "-c", _DRIVER, "in-commit", "SIGINT", "convert", str(source), "-o",
                           str(out / "o.onnx"), "--target-opset", "13", "--no-verify", "--report",
                           str(out / "r.json")], capture_output=True, text=True, timeout=120)
    line = _assert_interrupted(proc, signal.SIGINT)
    assert line.endswith("(complete)") and str(out / "o.onnx") in line and str(out / "w.bin") in line
    assert sorted(p.name for p in out.iterdir()) == ["o.onnx", "r.json", "w.bin"]
    onnx.checker.check_model(str(out / "o.onnx"))
    loaded = onnx.load(str(out / "o.onnx"))
    assert {o.domain: o.version for o in loaded.opset_import}[""] == 13


_PACKAGE = Path(lowerer.__file__).resolve().parent
#: The console script beside this Python, where the install made one.
_SCRIPT = [str(Path(sys.executable).parent / "lowerer")] if (Path(sys.executable).parent / "lowerer").exists() else []


def _python_start_up(err: str) -> bool:
    """Whether ``err`` is Python's own start-up failing on the signal, before any line of lowerer ran.

    Either "Fatal Python error: init_import_site" (site, .pth files), or a KeyboardInterrupt whose
    traceback holds no frame of the lowerer package (runpy, the console script's first import).
    """
    if "Fatal Python error: init_import_site" in err:
        return True
    frames = [line for line in err.splitlines() if line.strip().startswith("File ")]
    return err.rstrip().endswith("KeyboardInterrupt") and not any(str(_PACKAGE) in f for f in frames)


@pytest.fixture(scope="module")
def delays(source: Path, tmp_path_factory: pytest.TempPathFactory) -> list[float]:
    """From 0 to 50 ms (Python starting, lowerer importing), then spread over one whole run's duration."""
    out = tmp_path_factory.mktemp("timing")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "lowerer", "convert", str(source), "-o", str(out / "o.onnx"),
                    "--target-opset", "13", "--report", str(out / "r.json")], check=True, capture_output=True,
                   timeout=300)
    whole = time.perf_counter() - start
    return [0.0, 0.01, 0.03, 0.05, *(whole * f for f in (0.15, 0.35, 0.55, 0.75, 0.95))]


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_real_process_signalled_after_delays(source: Path, tmp_path: Path, signame: str, delays: list[float]) -> None:
    """``lowerer convert`` (``python -m lowerer`` and the console script) signalled from its start to its end.

    Never a traceback from lowerer, never a leftover. A signal in the first milliseconds may come
    while Python itself starts, before any line of lowerer runs: the process then dies of the
    signal (no output), or Python's start-up reports it (see :func:`_python_start_up`). A signal
    while Python shuts down, after lowerer finished, kills the process the same way (Python has
    put the default handlers back by then). Every other signal is lowerer's: one line.
    """
    signum = getattr(signal, signame)
    outcomes = []
    for i, delay in enumerate(delays):
        out = tmp_path / f"out{i}"
        out.mkdir()
        before, before_src = snapshot(out), snapshot(source.parent)
        launcher = _SCRIPT if i % 2 and _SCRIPT else [sys.executable, "-m", "lowerer"]
        proc = subprocess.Popen([*launcher, "convert", str(source), "-o", str(out / "o.onnx"),
                                 "--target-opset", "13", "--report", str(out / "r.json")],
                                stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        time.sleep(delay)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
        assert snapshot(source.parent) == before_src
        if proc.returncode == -signum or _python_start_up(err):
            if snapshot(out) == before:
                outcomes.append("python start-up")
                assert not err or _python_start_up(err), err
            else:  # Python restores the default handlers while it shuts down: lowerer was done
                outcomes.append("python shut-down")
                assert proc.returncode == -signum and "Traceback" not in err and "lowerer: error" not in err, err
                assert sorted(p.name for p in out.iterdir()) == ["o.onnx", "r.json", "w.bin"]
            continue
        assert "Traceback" not in err, err
        if proc.returncode == 0:  # it finished first
            outcomes.append("finished")
            assert sorted(p.name for p in out.iterdir()) == ["o.onnx", "r.json", "w.bin"]
            continue
        line = _assert_interrupted(subprocess.CompletedProcess([delay], proc.returncode, "", err), signum)
        if line.endswith("(complete)"):
            outcomes.append("after the commit")
            assert sorted(p.name for p in out.iterdir()) == ["o.onnx", "r.json", "w.bin"]
        else:
            outcomes.append("interrupted")
            assert line.endswith("nothing was written")
            assert snapshot(out) == before
    print(signame, outcomes)
    assert outcomes.count("interrupted") >= 3, outcomes  # the work itself was interrupted, several times


def test_library_use_keeps_its_own_handlers() -> None:
    """Importing lowerer in another program (here pytest) installs no handler, and a held signal is raised again."""
    from lowerer.core import interrupts

    assert not interrupts.started_as_command()
    before = signal.getsignal(signal.SIGINT)
    assert before is signal.default_int_handler
    interrupts.take_over({signal.SIGINT: before}, [])
    assert signal.getsignal(signal.SIGINT) is before
    with pytest.raises(KeyboardInterrupt):
        interrupts.take_over({signal.SIGINT: before}, [signal.SIGINT])
    assert signal.getsignal(signal.SIGINT) is before

"""Saving: every output planned before any work (:func:`plan_outputs`), then written all or nothing.

Every path to be written (the model, its data files, a report) is checked against the others and
against the input's files before any work; see :func:`plan_outputs`. :func:`write_outputs` then
writes through a :class:`lowerer.model_io.files.Transaction`: unique temporaries, committed all together,
nothing left behind on a failure or a signal. :func:`save_model` does both.
"""

from __future__ import annotations

import filecmp
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from lowerer.core.errors import InputError, InternalError
from lowerer.model_io.external_data import check_external_data, external_data_locations
from lowerer.model_io.files import Transaction
from lowerer.model_io.paths import check_output_path, location_problem, require_regular_file, same_file
from lowerer.model_io.reading import PROTOBUF_LIMIT
from lowerer.model_io.writing import _check_new_file_path, _copy_file, _stage_bytes, _stage_single_data_file

__all__ = ["OutputPlan", "plan_outputs", "save_model", "write_outputs"]

@dataclass
class OutputPlan:
    """Every file a conversion will write, checked (see :func:`plan_outputs`); then :func:`write_outputs`.

    Attributes:
        model: the output model's path.
        directory: its folder, resolved (external-data locations of the output are relative to it).
        report: the report's path, or None.
        external_data: the one data file for every weight (relative to ``directory``), or None.
        source_dir: where the model's own data files are found (resolved), or None.
        copies: for each of the model's data locations that must be copied beside the output:
            (the file there now, its destination). Locations whose destination already holds the
            same bytes, or that need no copy (the output beside the input), are absent.
        locations: the data locations planned for (the written model may reference no others).
    """

    model: Path
    directory: Path
    report: Path | None = None
    external_data: str | None = None
    source_dir: Path | None = None
    copies: dict[str, tuple[Path, Path]] = field(default_factory=dict)
    locations: tuple[str, ...] = ()


def plan_outputs(output: str | os.PathLike[str], *, locations: Sequence[str] = (),
                 source_dir: str | os.PathLike[str] | None = None, input_model: Path | None = None,
                 external_data: str | None = None, report: str | os.PathLike[str] | None = None) -> OutputPlan:
    """Check every path a conversion will write, before any work, and say what will be written where.

    Args:
        output: the output model's path.
        locations: the external-data locations of the model to be written.
        source_dir: where those data files are now (None: they are already where the output's
            references expect them).
        input_model: the input model's file, when there is one (it may only be replaced by the
            output model: converting in place).
        external_data: write every weight into this one file (relative to the output's folder).
        report: the report's path.

    Each output must be absent or a regular file (never a directory, FIFO or device) in an
    existing writable directory, with a usable name. None may be one of the input's files,
    except that the output model may replace the input model itself (converting in place); no
    two outputs may be the same file. Data files copied beside the output never replace a
    different file, and no destination may pass through a symbolic link.

    Raises:
        InputError: the first rule broken, in one line.
    """
    out = Path(output)
    check_output_path(out, "output model")
    out_dir = out.parent.resolve()
    src_dir = Path(source_dir).resolve() if source_dir is not None else None
    reads = _InputFiles(input_model, src_dir, locations)
    _check_sources(out, out_dir, src_dir, locations)
    plan = OutputPlan(out, out_dir, source_dir=src_dir, locations=tuple(locations))
    written: list[tuple[Path, str]] = [(out, "output model")]
    if report is not None:
        plan.report = _plan_report(Path(report), out, reads)
        written.append((plan.report, "report"))
    if external_data is not None:
        written.append((_plan_external_data(external_data, out, out_dir, reads), "external data file"))
        plan.external_data = external_data
    elif src_dir is not None and src_dir != out_dir:
        for location in locations:
            dst = _plan_copy(location, src_dir, out_dir, reads)
            if dst is not None:
                plan.copies[location] = (src_dir / location, dst)
                written.append((dst, "external data file"))
    for i, (a, what_a) in enumerate(written):
        for b, what_b in written[i + 1:]:
            if same_file(a, b):
                raise InputError(f"{b}: the {what_b} would be the same file as the {what_a}; give them different paths")
    return plan


class _InputFiles:
    """The files a conversion reads (the input model, its data files), which no output may replace."""

    def __init__(self, input_model: Path | None, src_dir: Path | None, locations: Sequence[str]) -> None:
        self.input_model = input_model
        self.data_reads: dict[Path, str] = {}
        if src_dir is not None:
            for location in locations:
                self.data_reads[src_dir / location] = location
        self.files = [*([input_model] if input_model is not None else []), *self.data_reads]

    def clash(self, path: Path, what: str) -> None:
        """Refuse to write the ``what`` at ``path`` when it is one of the files read."""
        for f in self.files:
            if same_file(path, f):
                name = ("the input model" if f == self.input_model
                        else f"the input's external data file {self.data_reads.get(f, f.name)!r}")
                raise InputError(f"{path}: is {name}; writing the {what} there would destroy it. Choose another path")


def _check_sources(out: Path, out_dir: Path, src_dir: Path | None, locations: Sequence[str]) -> None:
    """The output model lands on none of its data files, and each data file to read is usable."""
    for location in locations:  # the model must not land on a data file it references
        if (src_dir is not None and same_file(out, src_dir / location)) or same_file(out, out_dir / location):
            raise InputError(f"{out}: is the model's external data file {location!r}; writing the model there "
                             "would destroy the weights. Choose another output name")
    if src_dir is not None:
        for location in locations:
            src = src_dir / location
            problem = location_problem(location, src_dir, "the input's directory")
            if problem is not None:
                raise InputError(f"external data location {location!r} {problem}")
            require_regular_file(src, f"the model's external data file {location!r}")


def _plan_report(report_path: Path, out: Path, reads: _InputFiles) -> Path:
    """Check the report's path; return it."""
    check_output_path(report_path, "report")
    reads.clash(report_path, "report")
    if same_file(report_path, out):
        raise InputError(f"{report_path}: is the output model too; give the report another path")
    return report_path


def _plan_external_data(external_data: str, out: Path, out_dir: Path, reads: _InputFiles) -> Path:
    """Check the one data file every weight goes to; return its path."""
    problem = location_problem(external_data, out_dir, "the output's directory")
    if problem is not None or Path(external_data).name in ("", ".", ".."):
        raise InputError(f"external data file {external_data!r}: give a file name relative to the output's "
                         "directory that stays inside it (no '..', no absolute path, no link leading out)")
    dst = out_dir / external_data
    _check_new_file_path(dst, f"external data file {external_data!r}")
    if same_file(dst, out):
        raise InputError(f"{out}: is the model's external data file {external_data!r}; writing the model there "
                         "would destroy the weights. Choose another output name")
    reads.clash(dst, "weights")
    return dst


def _plan_copy(location: str, src_dir: Path, out_dir: Path, reads: _InputFiles) -> Path | None:
    """Where data file ``location`` is copied beside the output, or None when the same bytes are there."""
    problem = location_problem(location, out_dir, "the output directory")
    if problem is not None:
        problem = problem.replace("beside the model", "beside the output")
        raise InputError(f"external data location {location!r} {problem}")
    src, dst = src_dir / location, out_dir / location
    if _check_new_file_path(dst, f"the external data file {location!r}"):
        if same_file(src, dst) or filecmp.cmp(src, dst, shallow=False):
            return None  # the same bytes are there already
        raise InputError(f"{dst}: a different file of that name already exists where the output's external "
                         "data must go; move it or choose another output directory")
    reads.clash(dst, "external data")
    return dst


def write_outputs(plan: OutputPlan, model: onnx.ModelProto | None, report_text: str | None = None) -> None:
    """Write what ``plan`` says, all or nothing: data files, the report, then the model, committed together.

    ``model`` None writes only the report (after a failed verification). ``model`` is not modified.

    Raises:
        InputError: the model is over 2 GiB with its weights inline (protobuf cannot write it: use
            ``external_data``), a different file appeared where a data file must go, or a write failed.
    """
    try:
        _write_outputs(plan, model, report_text)
    except MemoryError:
        raise InputError("not enough memory to write the model (nothing was written): store its weights in a data "
                         "file (API: save_model(..., external_data='weights.bin'); CLI: --external-data "
                         "weights.bin), or free memory") from None


def _write_outputs(plan: OutputPlan, model: onnx.ModelProto | None, report_text: str | None) -> None:
    with Transaction() as tx:
        if model is not None:
            if plan.external_data is not None:
                model = _stage_single_data_file(tx, model, plan.directory, plan.external_data, plan.source_dir)
            payload = _serialize(model)
            if plan.external_data is None:
                missing = [loc for loc in external_data_locations(model, payload) if loc not in plan.locations]
                if missing:
                    raise InternalError(f"the converted model references data files that were not planned: {missing}")
                for src, dst in plan.copies.values():
                    tx.make_dirs(dst.parent)
                    fd, tmp = tx.temp_file(dst.parent)
                    try:
                        _copy_file(src, fd)
                    finally:
                        os.close(fd)
                    tx.stage(tmp, dst, replace=False)
        if plan.report is not None and report_text is not None:
            _stage_bytes(tx, plan.report, report_text.encode())
        if model is not None:
            _stage_bytes(tx, plan.model, payload)
        tx.commit()


def _serialize(model: onnx.ModelProto) -> bytes:
    """The model's bytes; a model protobuf cannot write (over 2 GiB) is an InputError saying what to do."""
    try:
        payload = model.SerializeToString()
    except Exception:  # protobuf's EncodeError (its ByteSize fails the same way)
        payload = None
    if payload is None or len(payload) > PROTOBUF_LIMIT:
        raise InputError("the model is over 2 GiB with its weights inline; protobuf cannot write a model that "
                         "large: store the weights in a data file (API: save_model(..., "
                         "external_data='weights.bin'); CLI: --external-data weights.bin)")
    return bytes(payload)


def save_model(
    model: onnx.ModelProto,
    path: str | os.PathLike[str],
    *,
    source_dir: str | os.PathLike[str] | None = None,
    external_data: str | None = None,
) -> None:
    """Write ``model`` to ``path`` atomically, with its external data (see :func:`plan_outputs`).

    With ``external_data`` (a file name relative to the output's directory), every weight is
    written into that one file instead (see :func:`write_single_data_file`): tensors already
    external are copied there range by range in the kernel, inline ones of 1 KiB or more moved
    there; the input's data files are then not needed beside the output.

    External data files the model references (relative to ``source_dir``) are made available
    beside the output under the same relative locations: nothing to do when the output sits
    beside the input, else a copy (``copy_file_range``: in-kernel, a reflink on file systems
    that have them; never a hard link, which ``onnx.load`` refuses as a "hardlink attack"). An
    existing different file of the same name is never overwritten, and no destination may pass
    through a symbolic link. Every destination is checked before anything is written, and every
    reference is checked (:func:`check_external_data`) against the files in ``source_dir``.

    Raises:
        InputError: a path is unusable or would destroy a file, a data file would clash, a
            reference is bad, or the model cannot be written (see :func:`write_outputs`).
    """
    try:
        payload = model.SerializeToString() if external_data is None else None
    except Exception:  # over 2 GiB, protobuf's EncodeError: said clearly by write_outputs, before any write
        payload = None
    check_external_data(model, Path(source_dir).resolve() if source_dir is not None else None, source="the model",
                        serialized=payload)
    plan = plan_outputs(path, locations=external_data_locations(model, payload), source_dir=source_dir,
                        external_data=external_data)
    write_outputs(plan, model)

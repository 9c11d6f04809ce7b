"""Model I/O and structure: loading and saving models, and what a model is made of.

Every input is checked before it is read, every output planned before any work. The package also owns what
a model is made of: its scopes (:mod:`.scopes`: graphs, subgraphs and
functions), the names in them (:mod:`.naming`), its structure checks (:mod:`.structure`, :mod:`.tensor_data`,
:mod:`.input_check`), paths and files (:mod:`.paths`, :mod:`.files`), and IR versions (:mod:`.ir_version`).
Imports only :mod:`lowerer.core` (``pyproject.toml``'s import contracts: no conversion code, no facts).

What each module owns (they import one way: ``saving`` → ``writing`` → ``reading`` → ``external_data``):

* :mod:`.external_data`: every external-data reference found (:func:`iter_tensors`) and checked
  (:func:`check_external_data`): inside the model's folder, no symbolic link on the way, a regular
  file, an ``offset`` / ``length`` within it that match the tensor's type and shape;
* :mod:`.reading`: loading (:func:`load_input`, :func:`read_model`, :func:`load_model`): the model
  file must be a regular file (checked with ``os.stat`` before it is opened: a FIFO or a device is
  refused, never read) of at most 2 GiB (protobuf's limit); then its external data and its
  structure (:func:`lowerer.model_io.structure.check_structure`) are checked. Weights are never read. And
  the in-memory working copy that holds large weights back (:func:`working_copy`);
* :mod:`.writing`: bytes staged into a :class:`lowerer.model_io.files.Transaction` (unique temporaries,
  committed all together, nothing left behind on a failure or a signal), and the one data file
  every weight can go to (:func:`write_single_data_file`);
* :mod:`.saving`: :func:`plan_outputs` checks every path to be written (the model, its data files,
  a report) against the others and against the input's files before any work, then
  :func:`write_outputs` writes them all or nothing; :func:`save_model` does both.

Its public API is :func:`~.saving.save_model` (a model written with its data files, ``docs/files.md``);
everything else is imported from the module that defines it.
"""

from __future__ import annotations

from lowerer.model_io.saving import save_model

__all__ = ["save_model"]

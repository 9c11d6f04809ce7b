"""Lowering for a named backend (``--for BACKEND``): profiles as data, the plan, the proof of placement.

* :mod:`lowerer.backends.profile`: the profiles (``<name>.json`` beside this file), loaded and checked;
* :mod:`lowerer.backends.plan`: which nodes a profile names and the exact form each gets (the step
  engine's picker), and :func:`scan` of a whole model;
* :mod:`lowerer.backends.proof`: the converted model opened with the backend's execution provider and
  ``session.disable_cpu_ep_fallback=1``, where that provider is installed;
* :mod:`lowerer.backends.lowering`: what :func:`lowerer.convert` (``for_backend=``) and ``inspect --for`` do;
* :mod:`lowerer.backends.witnesses` (and its worker, :mod:`lowerer.backends.witness_worker`): a model run in a
  backend's real runtime (one of :mod:`lowerer.backends.runtimes`) where it is installed;
* :mod:`lowerer.backends.deployment`: the converted model verified on that runtime;
* :mod:`lowerer.backends.probe_models` and ``measured/``: the probes that measured each profile row, and the
  runs' results the rows cite (the suite itself runs from :mod:`lowerer.cli.probes`).

Imports verification, the step engine, facts, model I/O and core; never a rule, the passes or the API.
"""

from __future__ import annotations

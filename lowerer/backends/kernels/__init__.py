"""onnxruntime's kernel tables per release, as data (see :mod:`lowerer.backends.kernel_tables`)."""

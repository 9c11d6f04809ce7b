"""Test-session setup shared by every test module."""

import os

# The tests import onnxruntime themselves: keep its telemetry database out of the user's home, as
# lowerer does (lowerer/verification/ort.py).
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

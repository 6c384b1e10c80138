"""The in-process gRPC server and the gated model (kept for the tests that import them by this name):
harness.inprocess and harness.repository. The repository is the one test repository, whose single-input
models name their tensors INPUT and OUTPUT; ``classify`` (labels :data:`LABELS`) is its classification model."""

from __future__ import annotations

from harness.inprocess import GrpcTestServer, wait_grpc_ready
from harness.inprocess import running_grpc_server as running_server
from harness.models import DTYPES, GATED_PY
from harness.repository import CLASS_LABELS as LABELS
from harness.repository import add_gated_model, build_test_repository

__all__ = [
    "ECHO_TYPES", "GATED_MODEL", "LABELS", "GrpcTestServer", "add_gated_model", "build_test_repository",
    "running_server", "wait_ready",
]  # fmt: skip

#: OIP datatype -> (ONNX element type, config.pbtxt type) of the ``echo_<dtype>`` models
ECHO_TYPES: dict[str, tuple[int, str]] = {
    d: (elem, "TYPE_STRING" if d == "BYTES" else f"TYPE_{d}") for d, elem in DTYPES.items()
}
GATED_MODEL = GATED_PY
wait_ready = wait_grpc_ready

"""A real gRPC server for the gRPC integration tests: DataPlane + start_grpc_server on 127.0.0.1.

The server runs in its own event loop in a background thread, on a port picked by binding port 0, over
a repository written here from tiny ONNX models (nothing downloaded):

- ``simple``: Triton's classic INT32 [16] add/sub (built by examples/build_repository.py)
- ``echo_<dtype>``: Identity for every OIP datatype, [-1, -1] batched (max_batch_size 8)
- ``scores``: FP32 [8] Identity with labels.txt, for the classification extension
- ``counted``: INT32 Identity that only the statistics test sends to
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import onnx
from onnx import TensorProto, helper

from servelab.config.settings import ControlMode
from servelab.core.dataplane import DataPlane
from servelab.core.registry import ModelRegistry
from servelab.frontends.grpc import bound_port, start_grpc_server
from servelab.protocol import grpc_service_pb2 as pb
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc
from servelab.repository import ModelRepository

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: OIP datatype -> (ONNX element type, config.pbtxt type)
ECHO_TYPES: dict[str, tuple[int, str]] = {
    "BOOL": (TensorProto.BOOL, "TYPE_BOOL"),
    "UINT8": (TensorProto.UINT8, "TYPE_UINT8"),
    "UINT16": (TensorProto.UINT16, "TYPE_UINT16"),
    "UINT32": (TensorProto.UINT32, "TYPE_UINT32"),
    "UINT64": (TensorProto.UINT64, "TYPE_UINT64"),
    "INT8": (TensorProto.INT8, "TYPE_INT8"),
    "INT16": (TensorProto.INT16, "TYPE_INT16"),
    "INT32": (TensorProto.INT32, "TYPE_INT32"),
    "INT64": (TensorProto.INT64, "TYPE_INT64"),
    "FP16": (TensorProto.FLOAT16, "TYPE_FP16"),
    "FP32": (TensorProto.FLOAT, "TYPE_FP32"),
    "FP64": (TensorProto.DOUBLE, "TYPE_FP64"),
    "BF16": (TensorProto.BFLOAT16, "TYPE_BF16"),
    "BYTES": (TensorProto.STRING, "TYPE_STRING"),
}
LABELS = [f"class_{i}" for i in range(8)]

#: The ``gated`` Python model connects to 127.0.0.1:<port> when it starts executing and answers only
#: after the test sends a byte back, so a test holds a request in flight without guessing at timings.
#: A socket works whether the backend runs in this process or in a worker process.
GATED_MODEL = """\
import socket


class TritonPythonModel:
    def initialize(self, args):
        pass

    def execute(self, requests):
        with socket.create_connection(("127.0.0.1", {port}), timeout=30) as gate:
            gate.sendall(b"entered")
            if not gate.recv(1):
                raise RuntimeError("gate closed without releasing")
        return [{{"OUTPUT0": r.inputs["INPUT0"]}} for r in requests]

    def finalize(self):
        pass
"""


def _identity(path: Path, elem_type: int, dims: list[int | str]) -> None:
    x = helper.make_tensor_value_info("INPUT0", elem_type, ["batch", *dims])
    y = helper.make_tensor_value_info("OUTPUT0", elem_type, ["batch", *dims])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], path.parent.parent.name, [x], [y]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True)
    onnx.save(model, path)


def _echo_model(
    repo: Path, name: str, elem_type: int, triton_type: str, dims: list[int], label_file: bool = False
) -> None:
    _identity(
        repo / name / "1" / "model.onnx", elem_type, [d if d >= 0 else f"d{i}" for i, d in enumerate(dims)]
    )
    labels = ', label_filename: "labels.txt"' if label_file else ""
    if label_file:
        (repo / name / "labels.txt").write_text("\n".join(LABELS) + "\n")
    (repo / name / "config.pbtxt").write_text(
        textwrap.dedent(
            f"""\
            name: "{name}"
            platform: "onnxruntime_onnx"
            max_batch_size: 8
            input [ {{ name: "INPUT0", data_type: {triton_type}, dims: {dims} }} ]
            output [ {{ name: "OUTPUT0", data_type: {triton_type}, dims: {dims}{labels} }} ]
            """
        )
    )


def add_gated_model(repo: Path, gate_port: int) -> None:
    """``gated``: FP32 [-1] echo on the Python backend that waits at the gate on 127.0.0.1:``gate_port``."""
    d = repo / "gated"
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.py").write_text(GATED_MODEL.format(port=gate_port))
    (d / "config.pbtxt").write_text(
        'name: "gated"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [-1] } ]\n'
        'output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [-1] } ]\n'
    )


def build_test_repository(repo: Path) -> Path:
    """Write the gRPC test repository into ``repo`` (created) and return it."""
    repo.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(EXAMPLES))
    try:
        import build_repository  # examples/build_repository.py
    finally:
        sys.path.remove(str(EXAMPLES))
    build_repository.build_simple(repo)
    for datatype, (elem, triton) in ECHO_TYPES.items():
        _echo_model(repo, f"echo_{datatype.lower()}", elem, triton, [-1])
    _echo_model(repo, "scores", TensorProto.FLOAT, "TYPE_FP32", [8], label_file=True)
    _echo_model(repo, "counted", TensorProto.INT32, "TYPE_INT32", [-1])
    return repo


class GrpcTestServer:
    """DataPlane + start_grpc_server in a background event loop; ``address`` is ``127.0.0.1:<port>``."""

    def __init__(
        self,
        repo: Path,
        *,
        mode: ControlMode = ControlMode.EXPLICIT,
        load: list[str] | None = None,
        max_message_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        registry = ModelRegistry(ModelRepository([repo]), mode, cores=1)
        self.dataplane = DataPlane(registry)
        self.dataplane.startup(["*"] if load is None else load)
        self.max_message_bytes = max_message_bytes
        self.loop = asyncio.new_event_loop()
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self._thread = threading.Thread(target=self.loop.run_forever, name="grpc-test-server", daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> GrpcTestServer:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            start_grpc_server(self.dataplane, "127.0.0.1", 0, max_message_bytes=self.max_message_bytes),
            self.loop,
        )
        self.server = future.result(timeout=30)
        self.port = bound_port(self.server)
        wait_ready(self.address)
        return self

    def stop(self) -> None:
        if self.server is not None:
            asyncio.run_coroutine_threadsafe(self.server.stop(0), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.loop.close()
        self.dataplane.close()


def wait_ready(address: str, timeout_s: float = 30.0) -> None:
    """Poll ServerReady until it answers true (no sleeps standing in for readiness)."""
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        while True:
            try:
                if stub.ServerReady(pb.ServerReadyRequest(), timeout=2).ready:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"gRPC server at {address} not ready within {timeout_s} s")
            time.sleep(0.05)


@contextmanager
def running_server(repo: Path, **kwargs: object) -> Iterator[GrpcTestServer]:
    server = GrpcTestServer(repo, **kwargs).start()  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()

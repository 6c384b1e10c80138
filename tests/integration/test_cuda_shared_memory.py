"""Triton's CUDA shared-memory extension on a real server, where a GPU and cuda-python exist.

The client allocates device memory with ``tritonclient.utils.cuda_shared_memory``, registers its IPC
handle, and the server copies inputs from and outputs to it. On a machine without cuda-python or without a
GPU every test here skips, saying which is missing (the UNSUPPORTED answer there is tested in
test_shared_memory.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from harness.servers import ServerProcess


def _cuda() -> Any:
    try:
        cudart = importlib.import_module("cuda.bindings.runtime")
    except ImportError:
        pytest.skip("cuda-python is not installed (pip install cuda-python)")
    err, count = cudart.cudaGetDeviceCount()
    if err != cudart.cudaError_t.cudaSuccess or count < 1:
        pytest.skip("no CUDA device is visible")
    return importlib.import_module("tritonclient.utils.cuda_shared_memory")


A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 2, dtype=np.int32)


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest) -> Iterator[tuple[ModuleType, Any]]:
    _cuda()  # skip before any server starts
    server: ServerProcess = request.getfixturevalue("server")
    module = httpclient if request.param == "http" else grpcclient
    address = server.http_address if request.param == "http" else server.grpc_address
    with module.InferenceServerClient(address) as c:
        yield module, c
        c.unregister_cuda_shared_memory()


def test_inputs_and_outputs_in_cuda_shared_memory(client: tuple[ModuleType, Any]) -> None:
    cudashm = _cuda()
    module, c = client
    size = A.nbytes
    h_in = cudashm.create_shared_memory_region("in", 2 * size, 0)
    h_out = cudashm.create_shared_memory_region("out", 2 * size, 0)
    try:
        cudashm.set_shared_memory_region(h_in, [A, B])
        c.register_cuda_shared_memory("in", cudashm.get_raw_handle(h_in), 0, 2 * size)
        c.register_cuda_shared_memory("out", cudashm.get_raw_handle(h_out), 0, 2 * size)
        meta = c.get_server_metadata(**({"as_json": True} if module is grpcclient else {}))
        assert "cuda_shared_memory" in meta["extensions"]
        inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory("in", size)
        inputs[1].set_shared_memory("in", size, offset=size)
        outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
        outputs[0].set_shared_memory("out", size)
        outputs[1].set_shared_memory("out", size, offset=size)
        c.infer("simple", inputs, outputs=outputs)
        both = cudashm.get_contents_as_numpy(h_out, np.int32, [2, 16])
        np.testing.assert_array_equal(both[0], (A + B)[0])
        np.testing.assert_array_equal(both[1], (A - B)[0])
    finally:
        c.unregister_cuda_shared_memory()
        cudashm.destroy_shared_memory_region(h_in)
        cudashm.destroy_shared_memory_region(h_out)

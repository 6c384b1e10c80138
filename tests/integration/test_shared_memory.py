"""Triton's system shared-memory extension on a real server, driven by stock tritonclient (HTTP and gRPC).

The client creates POSIX shared-memory objects with ``tritonclient.utils.shared_memory`` and registers
them; inputs are read from and outputs written into them. Also here: CUDA shared memory answering
UNSUPPORTED while its status and unregister answer (Triton's examples call them first).
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as client_shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor, serialized_byte_size

from harness.clients import infer_input
from harness.servers import ServerProcess
from harness.shm import ClientRegions

PROTOCOLS = {"http": (httpclient, "http_address"), "grpc": (grpcclient, "grpc_address")}
A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)
NBYTES = A.nbytes


@pytest.fixture(params=sorted(PROTOCOLS))
def client(request: pytest.FixtureRequest, server: ServerProcess) -> Iterator[tuple[ModuleType, Any]]:
    """(tritonclient module, its client) on the shared server; regions left over are unregistered."""
    module, address = PROTOCOLS[request.param]
    with module.InferenceServerClient(getattr(server, address)) as c:
        yield module, c
        c.unregister_system_shared_memory()


@pytest.fixture
def regions() -> Iterator[ClientRegions]:
    """This test's shared-memory objects (unique keys), destroyed at its end."""
    with ClientRegions("it") as r:
        yield r


def _simple_request(module: ModuleType, in_region: str, out_region: str) -> tuple[list[Any], list[Any]]:
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory(in_region, NBYTES)
    inputs[1].set_shared_memory(in_region, NBYTES, offset=NBYTES)
    outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory(out_region, NBYTES)
    outputs[1].set_shared_memory(out_region, NBYTES, offset=NBYTES)
    return inputs, outputs


def test_inputs_and_outputs_in_shared_memory(client: tuple[ModuleType, Any], regions: ClientRegions) -> None:
    module, c = client
    h_in, k_in = regions.create("in", 2 * NBYTES)
    h_out, k_out = regions.create("out", 2 * NBYTES)
    client_shm.set_shared_memory_region(h_in, [A, B])
    c.register_system_shared_memory("in", k_in, 2 * NBYTES)
    c.register_system_shared_memory("out", k_out, 2 * NBYTES)
    inputs, outputs = _simple_request(module, "in", "out")
    result = c.infer("simple", inputs, outputs=outputs)
    if module is httpclient:  # the data is in the region, not in the response: name, datatype, shape only
        assert result.get_output("OUTPUT0") == {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}
    else:  # an empty raw entry keeps the others in place (gRPC's as_numpy cannot reshape it, as with Triton)
        assert result.get_response().raw_output_contents[0] == b""
    out0 = client_shm.get_contents_as_numpy(h_out, np.int32, [1, 16])
    out1 = client_shm.get_contents_as_numpy(h_out, np.int32, [1, 16], offset=NBYTES)
    np.testing.assert_array_equal(out0, A + B)
    np.testing.assert_array_equal(out1, A - B)
    status = c.get_system_shared_memory_status(**({"as_json": True} if module is grpcclient else {}))
    rows = status["regions"].values() if module is grpcclient else status
    assert sorted((r["name"], r["key"], int(r["byte_size"])) for r in rows) == [
        ("in", k_in, 2 * NBYTES), ("out", k_out, 2 * NBYTES)]  # fmt: skip
    # the same region with new contents, and a mix: one input in the request, one output returned
    client_shm.set_shared_memory_region(h_in, [B * 2], offset=0)
    inputs[1].set_data_from_numpy(A)
    plain = module.InferRequestedOutput("OUTPUT1")
    result = c.infer("simple", inputs, outputs=[outputs[0], plain])
    np.testing.assert_array_equal(client_shm.get_contents_as_numpy(h_out, np.int32, [1, 16]), B * 2 + A)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), B * 2 - A)
    c.unregister_system_shared_memory("in")
    with pytest.raises(InferenceServerException, match="Unable to find system shared memory region: 'in'"):
        c.get_system_shared_memory_status("in")


def test_bytes_tensors_in_shared_memory(client: tuple[ModuleType, Any], regions: ClientRegions) -> None:
    module, c = client
    words = np.array([[b"one", b"", "zwölf".encode(), b"\x00\xff"]], dtype=object)
    raw = serialize_byte_tensor(words)
    size = serialized_byte_size(raw)
    h_in, k_in = regions.create("sin", size)
    h_out, k_out = regions.create("sout", size)
    client_shm.set_shared_memory_region(h_in, [raw])
    c.register_system_shared_memory("sin", k_in, size)
    c.register_system_shared_memory("sout", k_out, size)
    inp = module.InferInput("INPUT", [1, 4], "BYTES")
    inp.set_shared_memory("sin", size)
    out = module.InferRequestedOutput("OUTPUT")
    out.set_shared_memory("sout", size)
    c.infer("echo_bytes", [inp], outputs=[out])
    assert client_shm.get_contents_as_numpy(h_out, np.object_, [1, 4]).tolist() == words.tolist()


def test_a_region_registered_over_http_serves_grpc(server: ServerProcess, regions: ClientRegions) -> None:
    h, key = regions.create("both", 4 * NBYTES)
    client_shm.set_shared_memory_region(h, [A, B])
    with httpclient.InferenceServerClient(server.http_address) as http, \
            grpcclient.InferenceServerClient(server.grpc_address) as grpc:  # fmt: skip
        http.register_system_shared_memory("both", key, 4 * NBYTES)
        try:
            inputs, outputs = _simple_request(grpcclient, "both", "both")
            for o in outputs:  # outputs after the inputs in the same region
                o.set_shared_memory("both", NBYTES, offset=2 * NBYTES + (NBYTES if o.name() == "OUTPUT1" else 0))
            grpc.infer("simple", inputs, outputs=outputs)
            np.testing.assert_array_equal(client_shm.get_contents_as_numpy(h, np.int32, [1, 16], offset=2 * NBYTES), A + B)
            assert grpc.get_system_shared_memory_status(as_json=True)["regions"]["both"]["key"] == key
        finally:
            grpc.unregister_system_shared_memory()
        assert http.get_system_shared_memory_status() == []


def test_bad_regions_and_slices_are_refused_with_triton_texts(client: tuple[ModuleType, Any], regions: ClientRegions) -> None:
    module, c = client
    _, key = regions.create("bad", 2 * NBYTES)
    with pytest.raises(InferenceServerException, match="Unable to open shared memory region: '/servelab-no-such"):
        c.register_system_shared_memory("x", "/servelab-no-such-object", 16)
    with pytest.raises(InferenceServerException, match="names an object in /dev/shm only"):
        c.register_system_shared_memory("x", "/../../etc/passwd", 16)
    with pytest.raises(InferenceServerException, match="Invalid shared memory region"):
        c.register_system_shared_memory("x", key, 4 * NBYTES)
    c.register_system_shared_memory("bad", key, 2 * NBYTES)
    with pytest.raises(InferenceServerException, match="shared memory region 'bad' already in manager"):
        c.register_system_shared_memory("bad", key, 2 * NBYTES)
    cases = [
        ("nope", NBYTES, 0, "Unable to find shared memory region: 'nope'"),
        ("bad", NBYTES - 4, 0, "needs 64 bytes of data; got 60"),
        ("bad", NBYTES, 2 * NBYTES - 8, "Invalid offset \\+ byte size for shared memory region: 'bad'"),
    ]
    for region, size, offset, message in cases:
        inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory(region, size, offset=offset)
        inputs[1].set_data_from_numpy(B)
        with pytest.raises(InferenceServerException, match=message):
            c.infer("simple", inputs)
    inputs, outputs = _simple_request(module, "bad", "bad")
    outputs[0].set_shared_memory("bad", 8)
    with pytest.raises(InferenceServerException, match=r"output 'OUTPUT0' \(8 bytes\) should be at least 64 bytes"):
        c.infer("simple", inputs, outputs=outputs)
    result = c.infer("simple", [infer_input(module, "INPUT0", A), infer_input(module, "INPUT1", B)])  # still serving
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)


def test_cuda_shared_memory_is_unsupported_but_its_status_and_unregister_answer(client: tuple[ModuleType, Any]) -> None:
    module, c = client
    c.unregister_cuda_shared_memory()  # what Triton's shm examples call first
    status = c.get_cuda_shared_memory_status(**({"as_json": True} if module is grpcclient else {}))
    assert status in ([], {})
    with pytest.raises(InferenceServerException, match="CUDA shared memory is not supported by this server") as info:
        c.register_cuda_shared_memory("g", b"\0" * 64, 0, 64)
    assert info.value.status() in ("501", "StatusCode.UNIMPLEMENTED")

"""Sequence models on a real server, driven by stock tritonclient over HTTP and gRPC (unary and streaming):
the direct and oldest strategies, CORRID, implicit state, string ids, and Triton's request errors. The
models are examples/sequence_models (the behaviour and configs of Triton's simple_sequence and
simple_dyna_sequence examples) and examples/triton_models/sequence_accumulator (python backend)."""

from __future__ import annotations

import queue
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from harness.repository import sequence_models
from harness.servers import ServerProcess, running_server

ROOT = Path(__file__).resolve().parents[2]
VALUES = [11, 7, 5, 3, 2, 0, 1]


@pytest.fixture(scope="module")
def sequence_server(tmp_path_factory: pytest.TempPathFactory, log_dir: Path) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("sequences")
    sequence_models(repo)
    shutil.copytree(ROOT / "examples" / "triton_models" / "sequence_accumulator", repo / "sequence_accumulator")
    with running_server(repo, log_dir, "sequence") as server:
        yield server


def _clients(server: ServerProcess) -> list[tuple[ModuleType, Any]]:
    return [(httpclient, httpclient.InferenceServerClient(server.http_address)),
            (grpcclient, grpcclient.InferenceServerClient(server.grpc_address))]  # fmt: skip


def _infer(module: ModuleType, client: Any, model: str, value: int, rows: int = 1, **kw: Any) -> Any:
    tensor = module.InferInput("INPUT", [rows, 1], "INT32")
    tensor.set_data_from_numpy(np.full((rows, 1), value, dtype=np.int32))
    return client.infer(model, [tensor], **kw)


def _sequence(module: ModuleType, client: Any, model: str, sid: int | str, values: list[int]) -> list[int]:
    out = []
    for i, v in enumerate(values):
        r = _infer(module, client, model, v, sequence_id=sid, sequence_start=i == 0, sequence_end=i == len(values) - 1)
        out.append(int(r.as_numpy("OUTPUT")[0, 0]))
    return out


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_simple_sequence_as_tritons_client_example_expects(sequence_server: ServerProcess, protocol: str) -> None:
    module, client = _clients(sequence_server)[protocol == "grpc"]
    assert _sequence(module, client, "simple_sequence", 1000, [0, *VALUES]) == [1, *VALUES]  # START adds 1
    assert _sequence(module, client, "simple_sequence", 1001, [100, *(-v for v in VALUES)]) == [101, *(-v for v in VALUES)]
    assert _sequence(module, client, "simple_sequence", "e333c95a-07fc", [20, 3]) == [21, 3]  # a string id


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_dyna_sequence_adds_the_correlation_id_at_the_end(sequence_server: ServerProcess, protocol: str) -> None:
    module, client = _clients(sequence_server)[protocol == "grpc"]
    assert _sequence(module, client, "simple_dyna_sequence", 1000, [0, *VALUES]) == [1, *VALUES[:-1], 1 + 1000]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_implicit_state_accumulates_in_the_server(sequence_server: ServerProcess, protocol: str) -> None:
    module, client = _clients(sequence_server)[protocol == "grpc"]
    got = _sequence(module, client, "simple_string_dyna_sequence", "1002", [20, 5, -3, 1])
    assert got == [20, 25, 22, 23 + 1002]  # running sum; the END request adds int(CORRID), a string here
    r = _infer(module, client, "sequence_state", 4, sequence_id=77, sequence_start=True)
    assert int(r.as_numpy("OUTPUT")[0, 0]) == 4 and int(r.as_numpy("OUTPUT_STATE")[0, 0]) == 4  # initial zeros
    r = _infer(module, client, "sequence_state", 6, sequence_id=77, sequence_end=True)
    assert int(r.as_numpy("OUTPUT_STATE")[0, 0]) == 10


def test_interleaved_sequences_over_one_grpc_stream(sequence_server: ServerProcess) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    sequences = {3001: [0, *VALUES], 3002: [100, *(-v for v in VALUES)]}
    with grpcclient.InferenceServerClient(sequence_server.grpc_address) as client:
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        for i in range(len(VALUES) + 1):
            for sid, values in sequences.items():
                tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
                tensor.set_data_from_numpy(np.full((1, 1), values[i], dtype=np.int32))
                client.async_stream_infer("simple_dyna_sequence", [tensor], request_id=f"{sid}_{i}", sequence_id=sid,
                                          sequence_start=i == 0, sequence_end=i == len(values) - 1)  # fmt: skip
        got: dict[int, dict[int, int]] = {sid: {} for sid in sequences}
        for _ in range(2 * (len(VALUES) + 1)):
            item = answers.get(timeout=60)
            assert not isinstance(item, InferenceServerException), item
            sid, i = map(int, item.get_response().id.split("_"))
            got[sid][i] = int(item.as_numpy("OUTPUT")[0, 0])
        client.stop_stream()
    for sid, values in sequences.items():
        want = [v + (1 if i == 0 else 0) + (sid if i == len(values) - 1 else 0) for i, v in enumerate(values)]
        assert [got[sid][i] for i in range(len(values))] == want


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_python_model_sees_the_control_values(sequence_server: ServerProcess, protocol: str) -> None:
    module, client = _clients(sequence_server)[protocol == "grpc"]
    first = _infer(module, client, "sequence_accumulator", 3, sequence_id=55, sequence_start=True)
    last = _infer(module, client, "sequence_accumulator", 4, sequence_id=55, sequence_end=True)
    assert first.as_numpy("CONTROLS").tolist() == [[1, 0, 1, 55]] and int(first.as_numpy("OUTPUT")[0, 0]) == 3
    assert last.as_numpy("CONTROLS").tolist() == [[0, 1, 1, 55]] and int(last.as_numpy("OUTPUT")[0, 0]) == 7


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize(
    ("kwargs", "rows", "message"),
    [
        ({}, 1, "inference request to model 'simple_sequence' must specify a non-zero or non-empty correlation ID"),
        ({"sequence_id": 9}, 1, "inference request for sequence 9 to model 'simple_sequence' must specify the START flag"),
        ({"sequence_id": 9, "sequence_start": True}, 2, "must specify batch-size 1 due to requirements of sequence batcher"),
    ],
)
def test_tritons_errors_over_both_protocols(
    sequence_server: ServerProcess, protocol: str, kwargs: dict[str, Any], rows: int, message: str
) -> None:
    module, client = _clients(sequence_server)[protocol == "grpc"]
    with pytest.raises(InferenceServerException, match=message) as caught:
        _infer(module, client, "simple_sequence", 1, rows, **kwargs)
    assert caught.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")


def test_a_non_boolean_flag_over_rest_names_the_parameter(sequence_server: ServerProcess) -> None:
    body = {"parameters": {"sequence_id": 5, "sequence_start": "true"},
            "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [1]}]}  # fmt: skip
    with sequence_server.client() as http:
        r = http.post(f"{sequence_server.http_url}/v2/models/simple_sequence/infer", json=body)
    assert r.status_code == 400 and "'sequence_start' must be true or false, got 'true'" in r.json()["error"]


def test_the_server_says_it_has_the_sequence_extension(sequence_server: ServerProcess) -> None:
    for _, client in _clients(sequence_server):
        meta = client.get_server_metadata()
        extensions = meta["extensions"] if isinstance(meta, dict) else meta.extensions
        assert {"sequence", "sequence(string_id)"} <= set(extensions)


def test_config_json_over_rest_and_grpc(sequence_server: ServerProcess) -> None:
    rest = httpclient.InferenceServerClient(sequence_server.http_address).get_model_config("simple_dyna_sequence")
    sb = rest["sequence_batching"]
    assert sb["max_sequence_idle_microseconds"] == 10000000 and sb["oldest"]["max_queue_delay_microseconds"] == 10000
    assert rest["instance_group"][0] | {"name": ""} == {
        "name": "", "kind": "KIND_CPU", "count": 2, "gpus": [], "secondary_devices": [], "profile": [],
        "passive": False, "host_policy": "",
    }  # fmt: skip
    assert rest["version_policy"] == {"latest": {"num_versions": 1}}
    grpc = grpcclient.InferenceServerClient(sequence_server.grpc_address).get_model_config("simple_dyna_sequence")
    assert grpc.config.sequence_batching.oldest.max_candidate_sequences == 1024
    assert grpc.config.instance_group[0].name == "simple_dyna_sequence_0"

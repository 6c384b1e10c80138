"""The trust boundary against a real server, as a hostile client on 127.0.0.1 with no credentials.

Every path-taking API (REST and gRPC repository load/unload, ``file:`` uploads, config overrides,
TorchServe register, the infer routes of OIP, TF Serving and TorchServe) is sent names with ``..``,
``/``, NUL, absolute paths and symlinks that lead out of the repository. Each must be refused with a
400 / INVALID_ARGUMENT naming the field and the rule, and the kernel (inotify on the folder outside)
must report that no file there was opened, read or written.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from trust_harness import CUSTOM_MODULE, OpenWatch, TrustLayout, build_trust_layout

from harness.ident import LABELS, ident_onnx_bytes
from harness.ident import ident_override as override
from harness.servers import ServerProcess, running_server

X = np.array([[0.1, 0.9, 0.3, 0.2]], np.float32)
NAME_RULE = "must not be empty or '.', and must contain no '/', no '..' and no NUL"


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> TrustLayout:
    return build_trust_layout(tmp_path_factory.mktemp("trust"))


@contextlib.contextmanager
def _server(layout: TrustLayout, log_dir: Path, name: str, *flags: str) -> Iterator[ServerProcess]:
    """A server in explicit mode with ``ident`` loaded and the custom backend module importable."""
    pythonpath = os.pathsep.join(p for p in (str(layout.custom), os.environ.get("PYTHONPATH")) if p)
    args = ["--model-control-mode", "explicit", "--load-model", "ident", *flags]
    with running_server(layout.repo, log_dir, name, *args, env={"PYTHONPATH": pythonpath}) as server:
        yield server


@pytest.fixture(scope="module")
def guarded(layout: TrustLayout, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with _server(layout, tmp_path_factory.mktemp("logs"), "trust") as server:
        yield server


@pytest.fixture(scope="module")
def watch(layout: TrustLayout, guarded: ServerProcess) -> Iterator[OpenWatch]:
    watcher = OpenWatch(layout.outside)
    yield watcher
    watcher.close()


@pytest.fixture(scope="module")
def http(guarded: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=guarded.http_url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def management(guarded: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=guarded.management_url, timeout=60) as client:
        yield client


#: every error body a test received, for the no-server-path scan at the end
BODIES: list[str] = []


def _refused(response: httpx.Response, *needles: str, status: int = 400) -> str:
    assert response.status_code == status, response.text
    text = response.text
    BODIES.append(text)
    for needle in needles:
        assert needle in text, text
    return text


def _load(http: httpx.Client, name: str, **parameters: Any) -> httpx.Response:
    return http.post(f"/v2/repository/models/{name}/load", json={"parameters": parameters})


def test_the_watch_sees_opens_outside_even_through_a_symlink(layout: TrustLayout, watch: OpenWatch) -> None:
    """Positive control: the kernel reports an open of a watched file, also via a link in the repository."""
    watch.events()
    (layout.repo / "ident" / "linked_labels.txt").read_text()
    assert any(line.startswith("open") and line.endswith("outside/labels.txt") for line in watch.events())


# ----- model names -----
@pytest.mark.parametrize("name", ["%2E%2E", "%2E", "a%00b", "..%2E"])
def test_rest_load_and_unload_refuse_bad_names(http: httpx.Client, watch: OpenWatch, name: str) -> None:
    with watch.nothing_touched():
        _refused(http.post(f"/v2/repository/models/{name}/load"), NAME_RULE)
        _refused(http.post(f"/v2/repository/models/{name}/unload"), NAME_RULE)


def test_rest_names_with_a_slash_do_not_reach_the_repository(http: httpx.Client, watch: OpenWatch) -> None:
    with watch.nothing_touched():
        _refused(http.post("/v2/repository/models/..%2F..%2Foutside/load"), status=404)


def test_grpc_load_and_unload_refuse_bad_names(guarded: ServerProcess, watch: OpenWatch) -> None:
    client = grpcclient.InferenceServerClient(guarded.grpc_address)
    with watch.nothing_touched():
        for name in ["..", ".", "", "../outside", "ident/../ident", "a\0b"]:
            for call in (client.load_model, client.unload_model):
                with pytest.raises(InferenceServerException) as info:
                    call(name)
                assert info.value.status() == "StatusCode.INVALID_ARGUMENT", (name, info.value.message())
                assert NAME_RULE in info.value.message()
    client.close()


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"url": ".."}, "register: url '..' is not valid"),
        ({"url": "../../outside"}, "servelab fetches no archives or URLs"),
        ({"url": "https://example.com/ident.mar"}, "registers models of its repository by folder name"),
        ({"url": "."}, NAME_RULE),
        ({"url": "ident", "model_name": "../x"}, "register: model_name '../x' is not valid"),
        ({"url": "spare.mar", "model_name": "other"}, "differs from the model folder 'spare'"),
    ],
)
def test_torchserve_register_refuses_bad_url_and_model_name(
    management: httpx.Client, watch: OpenWatch, params: dict[str, str], needle: str
) -> None:
    with watch.nothing_touched():
        body = json.loads(_refused(management.post("/models", params=params), needle))
    assert body["code"] == 400


def test_torchserve_register_by_folder_name_still_works(management: httpx.Client) -> None:
    response = management.post("/models", params={"url": "spare.mar"})
    assert response.status_code == 200, response.text
    assert management.delete("/models/spare").status_code == 200
    _refused(management.delete("/models/%2E%2E"), NAME_RULE)


@pytest.mark.parametrize(
    ("method", "path", "needle"),
    [
        ("POST", "/v2/models/%2E%2E/infer", NAME_RULE),
        ("GET", "/v2/models/a%00b/ready", NAME_RULE),
        ("GET", "/v2/models/%2E%2E/config", NAME_RULE),
        ("POST", "/v2/models/ident/versions/%2E%2E/infer", "model version '..' is not valid"),
        ("POST", "/v1/models/%2E%2E:predict", NAME_RULE),
        ("GET", "/v1/models/%2E%2E/metadata", NAME_RULE),
        ("POST", "/v1/models/ident/versions/x1:predict", "model version 'x1' is not valid"),
        ("POST", "/predictions/%2E%2E", NAME_RULE),
        ("POST", "/predictions/ident/a%20b", "model version 'a b' is not valid"),  # 'abc' would be a label: 404
    ],
)
def test_infer_routes_refuse_bad_names_and_versions(
    http: httpx.Client, watch: OpenWatch, method: str, path: str, needle: str
) -> None:
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": X.ravel().tolist()}]}
    with watch.nothing_touched():
        _refused(http.request(method, path, json=body if method == "POST" else None), needle)


def test_grpc_infer_refuses_a_bad_name(guarded: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(guarded.grpc_address)
    inp = grpcclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(X)
    with pytest.raises(InferenceServerException) as info:
        client.infer("..", [inp])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT" and NAME_RULE in info.value.message()
    client.close()


# ----- files named by a config override -----
def _traversals(layout: TrustLayout) -> list[tuple[dict[str, Any], str]]:
    out = layout.outside
    version_dir = layout.repo / "ident" / "1"
    up_from_version = os.path.relpath(out / "model.onnx", version_dir)
    up_from_model = os.path.relpath(out / "labels.txt", layout.repo / "ident")

    def labelled(name: str) -> dict[str, Any]:
        return override(output=[{"name": "y", "data_type": "TYPE_FP32", "dims": [4], "label_filename": name}])

    def graph(value: str) -> dict[str, Any]:
        return override(backend="graphsage_sampler", parameters={"graph_dir": {"string_value": value}})

    return [
        (override(default_model_filename=up_from_version), "default_model_filename '../../../outside/model.onnx'"),
        (override(default_model_filename="../../../../../../../etc/passwd"), "default_model_filename"),
        (override(default_model_filename=str(out / "model.onnx")), "default_model_filename"),
        (override(default_model_filename="linked.onnx"), "default_model_filename 'linked.onnx' leads outside"),
        (override(default_model_filename="model.onnx\u0000x"), "default_model_filename"),
        (labelled(up_from_model), "output 'y' label_filename '../../outside/labels.txt' leads outside"),
        (labelled(str(out / "labels.txt")), "output 'y' label_filename"),
        (labelled("linked_labels.txt"), "label_filename 'linked_labels.txt' leads outside"),
        (graph("../outside/graph"), "parameter graph_dir '../outside/graph' leads outside the model repository"),
        (graph(str(out / "graph")), "parameter graph_dir"),
        (graph("ident/graph_link"), "parameter graph_dir 'ident/graph_link' leads outside"),
        (override(backend=f"{CUSTOM_MODULE}:Echo"), "--allow-custom-backends"),
        (override(backend="os:system"), "--allow-custom-backends"),
    ]


def test_rest_config_overrides_naming_files_outside_are_refused(
    http: httpx.Client, layout: TrustLayout, watch: OpenWatch
) -> None:
    for config, needle in _traversals(layout):
        with watch.nothing_touched():
            _refused(_load(http, "ident", config=json.dumps(config)), needle)
    assert not layout.marker.exists(), "the custom backend module was imported"
    assert http.post("/v2/models/ident/ready").status_code in (200, 405)


def test_grpc_config_overrides_naming_files_outside_are_refused(
    guarded: ServerProcess, layout: TrustLayout, watch: OpenWatch
) -> None:
    client = grpcclient.InferenceServerClient(guarded.grpc_address)
    for config, needle in _traversals(layout):
        with watch.nothing_touched(), pytest.raises(InferenceServerException) as info:
            client.load_model("ident", config=json.dumps(config))
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT", info.value.message()
        assert needle in info.value.message()
        BODIES.append(info.value.message())
    assert not layout.marker.exists()
    assert client.is_model_ready("ident")  # a refused reload keeps the old version serving
    client.close()


@pytest.mark.parametrize("name", ["linked", "escaped"])
def test_models_whose_files_are_symlinks_out_of_the_repository_do_not_load(
    http: httpx.Client, watch: OpenWatch, name: str
) -> None:
    with watch.nothing_touched():
        _refused(_load(http, name), "leads outside the model's folder")


# ----- file: uploads -----
def _upload_keys(layout: TrustLayout) -> list[str]:
    deep = "../" * 12 + str(layout.outside).lstrip("/")
    return ["../planted.txt", "1/../../planted.txt", str(layout.outside / "planted.txt"), f"{deep}/planted.txt"]


def test_rest_uploads_with_paths_out_of_the_model_folder_are_refused(
    http: httpx.Client, layout: TrustLayout, watch: OpenWatch
) -> None:
    model = base64.b64encode(ident_onnx_bytes()).decode()
    for key in _upload_keys(layout):
        planted = base64.b64encode(b"planted").decode()
        params = {"config": json.dumps(override()), "file:1/model.onnx": model, f"file:{key}": planted}
        with watch.nothing_touched():
            _refused(_load(http, "ident", **params), f"parameter 'file:{key}'", "expected a relative path")
    assert not (layout.outside / "planted.txt").exists()
    source = base64.b64encode((layout.outside / "model.py").read_bytes()).decode()
    python = {"config": json.dumps(override(backend="python")), "file:1/model.py": source}
    _refused(_load(http, "ident", **python), "runs code from its files")
    _refused(_load(http, "ident", **{"file:1/model.onnx": model}), "needs parameters.config")
    _refused(_load(http, "ident", config=json.dumps(override()), **{"file:1/model.onnx": "%%%"}), "not valid base64")
    assert not (layout.outside / "ran").exists()


def test_grpc_uploads_with_paths_out_of_the_model_folder_are_refused(
    guarded: ServerProcess, layout: TrustLayout, watch: OpenWatch
) -> None:
    client = grpcclient.InferenceServerClient(guarded.grpc_address)
    for key in _upload_keys(layout):
        files = {"file:1/model.onnx": ident_onnx_bytes(), f"file:{key}": b"planted"}
        with watch.nothing_touched(), pytest.raises(InferenceServerException) as info:
            client.load_model("ident", config=json.dumps(override()), files=files)
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT" and f"'file:{key}'" in info.value.message()
    assert not (layout.outside / "planted.txt").exists()
    client.close()


def _classify(client: httpclient.InferenceServerClient, name: str = "ident") -> str:
    inp = httpclient.InferInput("x", [1, 4], "FP32").set_data_from_numpy(X)
    out = httpclient.InferRequestedOutput("y", class_count=1)
    return str(client.infer(name, [inp], outputs=[out]).as_numpy("y").reshape(-1)[0].decode())


def test_an_upload_serves_while_loaded_and_is_removed_on_unload(guarded: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(guarded.http_address)
    labelled = override(output=[{"name": "y", "data_type": "TYPE_FP32", "dims": [4], "label_filename": "labels.txt"}])
    files = {"file:1/model.onnx": ident_onnx_bytes(), "file:labels.txt": b"up0\nup1\nup2\nup3\n"}
    client.load_model("spare", config=json.dumps(labelled), files=files)
    try:
        assert _classify(client, "spare") == "0.900000:1:up1"
        folder = Path(re.findall(r"model spare: 2 uploaded file\(s\) written to (\S+)", guarded.log_tail(20000))[-1])
        assert folder.is_dir() and not folder.is_relative_to(guarded.repository)
    finally:
        client.unload_model("spare")
    assert not folder.exists()
    client.close()


# ----- caches and messages -----
def test_changed_labels_are_served_after_a_reload(guarded: ServerProcess, layout: TrustLayout) -> None:
    client = httpclient.InferenceServerClient(guarded.http_address)
    labels = layout.repo / "ident" / "labels.txt"
    assert _classify(client) == f"0.900000:1:{LABELS[1]}"
    try:
        labels.write_text("cat\ndog\nbird\nfish\n")
        client.load_model("ident")
        assert _classify(client) == "0.900000:1:dog"
    finally:
        labels.write_text("\n".join(LABELS) + "\n")
        client.load_model("ident")
    assert _classify(client) == f"0.900000:1:{LABELS[1]}"
    client.close()


def test_error_bodies_name_no_server_path(http: httpx.Client, guarded: ServerProcess, layout: TrustLayout) -> None:
    """Every refusal above, plus loads that fail inside the repository and the index reasons."""
    (layout.repo / "broken" / "1").mkdir(parents=True, exist_ok=True)
    (layout.repo / "broken" / "1" / "model.onnx").write_bytes(b"not an onnx model")
    _refused(_load(http, "broken"))
    _refused(_load(http, "ident", config=json.dumps(override(default_model_filename="missing.onnx"))), "1/missing.onnx")
    _refused(_load(http, "nothing_here"), "not in the model repository", status=404)
    BODIES.append(http.post("/v2/repository/index").text)
    BODIES.append(http.get("/v2/models/broken").text)
    roots = {str(layout.repo), str(layout.repo.resolve())}  # (paths a client sent may come back)
    assert len(BODIES) > 40
    for body in BODIES:
        for root in roots:
            assert root not in body, body
    assert str(layout.repo.resolve()) in guarded.log_tail(200_000)  # the log keeps the full paths


# ----- custom backends -----
def test_custom_backends_load_when_the_operator_allows_them(
    layout: TrustLayout, tmp_path_factory: pytest.TempPathFactory
) -> None:
    config = json.dumps(override(backend=f"{CUSTOM_MODULE}:Echo"))
    with _server(layout, tmp_path_factory.mktemp("logs"), "permissive", "--allow-custom-backends") as server:
        client = httpclient.InferenceServerClient(server.http_address)
        client.load_model("spare", config=config)
        assert layout.marker.read_text() == "imported"
        inp = httpclient.InferInput("x", [1, 4], "FP32").set_data_from_numpy(X)
        np.testing.assert_array_equal(client.infer("spare", [inp]).as_numpy("y"), X)
        client.close()

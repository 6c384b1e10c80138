"""The same TorchServe model store on real TorchServe 0.12 and on servelab: the same requests get the same
answers, over REST (bytes, status, content type) and over TorchServe's gRPC API.

The stores are built at test time with torch-model-archiver (tests/harness/torchserve_store.py): an eager
model with a custom ``BaseHandler``, a batching model (batchSize 4) and a streaming handler; and, in a
store of its own served with ``service_envelope=json``, a TorchScript model with the built-in base
handler (servelab reads that store's config.properties with ``--torchserve-config``). TorchServe runs in its own venv under ``.peers/`` (installed on
first use; skipped with the reason when it cannot be, e.g. without Java).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import httpx
import pytest

from harness.torchserve_store import (
    ARCHIVES,
    TorchServeStoreServer,
    build_envelope_store,
    build_store,
    envelope_config,
    ts_missing,
)
from servelab.bench.net import HOST, free_ports, wait_until
from servelab.bench.peers.base import Endpoint
from servelab.bench.peers.torchserve import TorchServePeer
from servelab.errors import Unavailable
from servelab.protocol import torchserve as ts_pb

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.skipif(ts_missing() is not None, reason=str(ts_missing()))]  # fmt: skip

PEERS_DIR = Path(__file__).resolve().parents[3] / ".peers"


class StorePeer(TorchServePeer):
    """TorchServe serving a whole prepared model store (every archive, ``load_models=all``)."""

    def __init__(self, store: Path, models: tuple[str, ...], extra_config: str = "") -> None:
        super().__init__(PEERS_DIR, workers=1)
        self.store = store
        self.models = models
        self.extra_config = extra_config
        self.grpc = {"inference": 0, "management": 0}
        self.url = ""
        self.metrics_url = ""

    def start(self) -> Endpoint:
        shutil.copytree(self.store, self.work_dir / "model-store", dirs_exist_ok=True)
        ports = free_ports(5)
        config = self._write_config(ports)
        config.write_text(config.read_text() + "load_models=all\n" + self.extra_config)
        tmp = self.work_dir / "tmp"
        tmp.mkdir(exist_ok=True)
        env = {"TMPDIR": str(tmp), "LOG_LOCATION": str(self.work_dir / "logs"),
               "METRICS_LOCATION": str(self.work_dir / "logs"), "PATH": f"{self.env.root / 'bin'}:/usr/bin:/bin"}  # fmt: skip
        argv = [str(self.env.bin("torchserve")), "--start", "--foreground", "--ncs", "--disable-token-auth",
                "--enable-model-api", "--ts-config", str(config), "--log-config", str(self.work_dir / "log4j2.xml")]  # fmt: skip
        proc = self._launch(argv, cwd=self.work_dir, env={**os.environ, **env})
        self.management_url = f"http://{HOST}:{ports[1]}"
        self.grpc = {"inference": ports[3], "management": ports[4]}
        self.url = f"http://{HOST}:{ports[0]}"
        self.metrics_url = f"http://{HOST}:{ports[2]}"
        self._wait_http(f"{self.url}/ping", 180.0, lambda s, b: s == 200 and b"Healthy" in b)
        wait_until(self._all_ready, 300.0, "TorchServe workers of every model", self.process.exited if self.process else None)
        return Endpoint(url=self.url, kind="torchserve", model="*", pid=proc.pid)

    def _all_ready(self) -> bool:
        with httpx.Client(timeout=10) as client:
            for model in self.models:
                r = client.get(f"{self.management_url}/models/{model}")
                if r.status_code != 200 or not any(w.get("status") == "READY" for w in r.json()[0]["workers"]):
                    return False
        return True


def _peer(store: Path, models: tuple[str, ...], extra_config: str = "") -> Iterator[StorePeer]:
    if shutil.which("java") is None:
        pytest.skip("TorchServe needs Java 17: apt-get install -y openjdk-17-jre-headless")
    with StorePeer(store, models, extra_config) as peer:
        try:
            peer.install()
        except Unavailable as exc:
            pytest.skip(f"TorchServe environment unavailable: {str(exc)[:300]}")
        peer.start()
        yield peer


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("parity")


@pytest.fixture(scope="module")
def torchserve(folder: Path) -> Iterator[StorePeer]:
    yield from _peer(build_store(folder), ARCHIVES)


@pytest.fixture(scope="module")
def servelab(folder: Path, torchserve: StorePeer) -> Iterator[TorchServeStoreServer]:
    server = TorchServeStoreServer(folder / "store", folder / "parity-servelab.log").start()
    try:
        yield server
    finally:
        assert server.stop() == 0, server.log_tail()


@pytest.fixture(scope="module")
def envelope_pair(folder: Path) -> Iterator[tuple[StorePeer, TorchServeStoreServer]]:
    store = build_envelope_store(folder)
    config = envelope_config(folder / "config.properties", store)
    peers = _peer(store, ("scripted",), "service_envelope=json\n")
    peer = next(peers)
    server = TorchServeStoreServer(store, folder / "parity-envelope.log", config=config).start()
    try:
        yield peer, server
    finally:
        assert server.stop() == 0, server.log_tail()
        peers.close()


def _clients(peer: StorePeer, server: TorchServeStoreServer) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    with httpx.Client(base_url=peer.url, timeout=120) as ts, httpx.Client(base_url=server.http_url, timeout=120) as sl:
        yield ts, sl


@pytest.fixture(scope="module")
def both(torchserve: StorePeer, servelab: TorchServeStoreServer) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    yield from _clients(torchserve, servelab)


def _same(answers: list[httpx.Response]) -> None:
    ts, sl = answers
    assert sl.status_code == ts.status_code, (ts.text, sl.text)
    assert sl.content == ts.content
    assert sl.headers.get("content-type") == ts.headers.get("content-type")
    if "x-handler-tag" in ts.headers:
        assert sl.headers["x-handler-tag"] == ts.headers["x-handler-tag"]


def test_base_handler_on_torchscript_is_byte_identical(envelope_pair: tuple[StorePeer, TorchServeStoreServer]) -> None:
    for clients in _clients(*envelope_pair):
        for x in ([[1.0, 2.0, 3.0, 4.0], [0.5, 0.0, -1.0, 2.0]], [[0.1, 0.2, 0.3, 0.4]]):
            answers = [c.post("/predictions/scripted", json={"instances": x}) for c in clients]
            assert answers[0].status_code == 200, answers[0].text
            _same(answers)


REQUESTS = [
    ("eager", {"content": b"[1, 2, 3, 4]", "headers": {"content-type": "application/json"}}),
    ("eager", {"content": b"[1, 2, 3, 4]"}),  # no content type: the handler gets bytes
    ("eager", {"content": b'{"not": 4}', "headers": {"content-type": "application/json"}}),  # handler fails: 503
    ("eager", {"files": {"data": ("x.json", b"[4, 3, 2, 1]", "application/json")}}),  # multipart form field
    ("streamer", {"content": b"go"}),
    ("nope", {"content": b"{}"}),
]


@pytest.mark.parametrize(("model", "request_kwargs"), REQUESTS)
def test_rest_predictions_are_byte_identical(both: tuple[httpx.Client, httpx.Client], model: str, request_kwargs: dict) -> None:
    _same([c.post(f"/predictions/{model}", **request_kwargs) for c in both])


def test_batches_of_four_on_both(both: tuple[httpx.Client, httpx.Client]) -> None:
    for client in both:
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda i, c=client: c.post("/predictions/batcher", json={"i": i}), range(4)))
        assert [json.loads(a.content) for a in answers] == [{"batch": 4, "max_batch": 4, "echo": {"i": i}} for i in range(4)]


def test_ping_and_describe(both: tuple[httpx.Client, httpx.Client], torchserve: StorePeer, servelab: TorchServeStoreServer) -> None:
    ts, sl = both
    assert ts.get("/ping").content == sl.get("/ping").content
    keys = ("modelName", "modelVersion", "modelUrl", "batchSize", "maxBatchDelay", "minWorkers", "maxWorkers")
    with httpx.Client(timeout=30) as client:
        for model in ARCHIVES:
            a = client.get(f"{torchserve.management_url}/models/{model}").json()[0]
            b = client.get(f"{servelab.management_url}/models/{model}").json()[0]
            assert {k: b[k] for k in keys} == {k: a[k] for k in keys}, model


def _grpc_answers(port: int, model: str, inputs: dict[str, bytes], stream: bool = False) -> tuple[str, object]:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = ts_pb.inference_pb2_grpc.InferenceAPIsServiceStub(channel)
        request = ts_pb.inference_pb2.PredictionsRequest(model_name=model, input=inputs)
        try:
            if stream:
                return "ok", [m.prediction for m in stub.StreamPredictions(request)]
            return "ok", stub.Predictions(request).prediction
        except grpc.RpcError as exc:
            return exc.code().name, exc.details()


@pytest.mark.parametrize(("model", "inputs", "stream"), [
    ("eager", {"data": b"[1, 2, 3, 4]"}, False),
    ("eager", {"data": b"{}"}, False),
    ("streamer", {"data": b"go"}, True),
    ("nope", {"data": b"1"}, False),
])  # fmt: skip
def test_grpc_predictions_are_identical(torchserve: StorePeer, servelab: TorchServeStoreServer, model: str,
                                        inputs: dict[str, bytes], stream: bool) -> None:
    expected = _grpc_answers(torchserve.grpc["inference"], model, inputs, stream)
    assert _grpc_answers(servelab.grpc_inference_port, model, inputs, stream) == expected


def _ts_samples(text: str) -> set[tuple[str, tuple[str, ...]]]:
    """(sample name, label names) of TorchServe's ts_* metrics in an exposition."""
    found = set()
    for line in text.splitlines():
        if line.startswith("ts_") and "{" in line:
            name, _, rest = line.partition("{")
            labels = (p.split("=")[0] for p in rest.split("}")[0].split(",") if p)  # TorchServe ends with ","
            found.add((name, tuple(sorted(labels))))
    return found


def test_metrics_names_where_a_scrape_config_expects_them(both: tuple[httpx.Client, httpx.Client], torchserve: StorePeer,
                                                          servelab: TorchServeStoreServer) -> None:
    for client in both:
        assert client.post("/predictions/eager", json=[1, 2, 3, 4]).status_code == 200
    expected = _ts_samples(httpx.get(f"{torchserve.metrics_url}/metrics", timeout=30).text)
    assert expected, "TorchServe exported no ts_* metric"
    assert expected <= _ts_samples(httpx.get(f"{servelab.metrics_url}/metrics", timeout=30).text)

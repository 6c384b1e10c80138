"""Binding beyond loopback: refused without a management key (exit 2, saying why and what to pass); started
with --disable-auth or with a generated key file (0600, its path logged, never a key). These servers bind
0.0.0.0 on port 0 only, and the tests reach them through 127.0.0.1."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from harness.servers import running_server

EXPOSED = ("--host", "0.0.0.0", "--model-control-mode", "explicit", "--load-model", "simple")


def test_exposed_without_a_key_refuses_to_start(test_repository: Path) -> None:
    cmd = [sys.executable, "-m", "servelab.cli", "serve", str(test_repository), *EXPOSED,
           "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--management-port", "0"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "refusing to start: --host 0.0.0.0 listens beyond loopback" in done.stderr
    for hint in ("--key-file PATH", "--management-key KEY", "SERVELAB_AUTH__MANAGEMENT_KEY", "--disable-auth"):
        assert hint in done.stderr
    assert "SERVELAB_PORTS" not in done.stdout  # refused before any port was bound


def test_exposed_with_disable_auth_starts_open(test_repository: Path, tmp_path: Path) -> None:
    with running_server(test_repository, tmp_path, "open", *EXPOSED, "--disable-auth") as server:
        client = httpclient.InferenceServerClient(server.http_address)
        try:
            client.load_model("echo_uint32")
            assert client.is_model_ready("echo_uint32")
            client.unload_model("echo_uint32")
        finally:
            client.close()
        assert "auth disabled while listening on 0.0.0.0" in server.log_tail(200_000)


def test_exposed_with_a_generated_key_file(test_repository: Path, tmp_path: Path) -> None:
    key_file = tmp_path / "key_file.json"
    with running_server(test_repository, tmp_path, "keyfile", *EXPOSED, "--key-file", str(key_file)) as server:
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        keys = json.loads(key_file.read_text())
        management, inference = keys["management"]["key"], keys["inference"]["key"]
        log = server.log_tail(200_000)
        assert str(key_file.resolve()) in log
        assert management not in log and inference not in log
        http = httpclient.InferenceServerClient(server.http_address)
        grpc = grpcclient.InferenceServerClient(server.grpc_address)
        try:
            with pytest.raises(InferenceServerException, match="needs the management key"):
                http.load_model("echo_uint32")
            http.load_model("echo_uint32", headers={"Authorization": f"Bearer {management}"})
            with pytest.raises(InferenceServerException, match="needs the management key"):
                grpc.unload_model("echo_uint32")
            grpc.unload_model("echo_uint32", headers={"authorization": f"Bearer {management}"})
            inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
            for i in inputs:
                i.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
            with pytest.raises(InferenceServerException, match="needs the inference key"):
                grpc.infer("simple", inputs)
            result = grpc.infer("simple", inputs, headers={"authorization": f"Bearer {inference}"})
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 16)))
        finally:
            http.close()
            grpc.close()

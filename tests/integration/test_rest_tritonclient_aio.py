"""Stock tritonclient.http.aio against a real server: the asyncio client, concurrent requests."""

from __future__ import annotations

import asyncio

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from harness.clients import infer_input, simple_inputs
from harness.servers import ServerProcess


def test_aio_health_metadata_config(server: ServerProcess) -> None:
    async def run() -> None:
        async with aioclient.InferenceServerClient(server.http_address) as client:
            assert await client.is_server_live()
            assert await client.is_server_ready()
            assert await client.is_model_ready("classify")
            meta = await client.get_model_metadata("echo_fp16")
            assert meta["inputs"][0]["datatype"] == "FP16"
            config = await client.get_model_config("echo_bytes")
            assert config["input"][0]["data_type"] == "TYPE_STRING"
            stats = await client.get_inference_statistics("simple")
            assert stats["model_stats"][0]["name"] == "simple"
            with pytest.raises(InferenceServerException, match="unknown model"):
                await client.get_model_config("missing_model")

    asyncio.run(run())


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_aio_concurrent_infers(server: ServerProcess, binary: bool) -> None:
    async def one(client: aioclient.InferenceServerClient, i: int) -> None:
        a = np.full((1, 16), i, dtype=np.int32)
        b = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = simple_inputs(aioclient, a, b, binary=binary)
        outputs = [aioclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
        result = await client.infer("simple", inputs, outputs=outputs, request_id=str(i))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        assert result.get_response()["id"] == str(i)

    async def run() -> None:
        async with aioclient.InferenceServerClient(server.http_address, conn_limit=16) as client:
            await asyncio.gather(*(one(client, i) for i in range(64)))

    asyncio.run(run())


def test_aio_bf16_fp16_bytes(server: ServerProcess) -> None:
    async def run() -> None:
        async with aioclient.InferenceServerClient(server.http_address) as client:
            cases = {
                "echo_bf16": ("BF16", np.array([[0.5, -3.0, 1024.0]], dtype=ml_dtypes.bfloat16)),
                "echo_fp16": ("FP16", np.array([[0.5, -3.0, 65504.0]], dtype=np.float16)),
                "echo_bytes": ("BYTES", np.array([[b"x", b"\x00\x01", b"long" * 100]], dtype=object)),
            }
            for model, (datatype, data) in cases.items():
                out = aioclient.InferRequestedOutput("OUTPUT", binary_data=True)
                result = await client.infer(model, [infer_input(aioclient, "INPUT", data, datatype, binary=True)], outputs=[out])
                got = result.as_numpy("OUTPUT")
                assert got.dtype == data.dtype
                np.testing.assert_array_equal(got, data)

    asyncio.run(run())

"""The "ONNX Runtime behind a small web app" baseline of published comparisons: FastAPI + onnxruntime.

It answers the Open Inference Protocol in JSON only (no binary extension, no batching): ``POST
/v2/models/{m}/infer``, ``GET /v2/models/{m}`` (metadata, so load generators can shape inputs),
``GET /v2/health/ready`` and ``GET /v2``. Run standalone with::

    python -m servelab.bench.peers.fastapi_ort --model model.onnx --port 8000 [--name mlp]

It uses servelab's own venv (uvicorn with uvloop and httptools, one worker); ``FastApiOrtPeer``
starts it in a process group of its own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import Request, Response

from servelab.bench.net import HOST, free_port
from servelab.bench.peers.base import Endpoint, ModelArtefacts, Peer
from servelab.errors import InvalidArgument

__all__ = ["FastApiOrtPeer", "create_app", "main"]

_ORT_TO_OIP = {
    "tensor(float)": "FP32", "tensor(double)": "FP64", "tensor(float16)": "FP16", "tensor(int64)": "INT64",
    "tensor(int32)": "INT32", "tensor(int8)": "INT8", "tensor(uint8)": "UINT8", "tensor(bool)": "BOOL",
}  # fmt: skip
_OIP_TO_NUMPY = {
    "FP32": np.float32, "FP64": np.float64, "FP16": np.float16, "INT64": np.int64, "INT32": np.int32,
    "INT8": np.int8, "UINT8": np.uint8, "BOOL": np.bool_,
}  # fmt: skip


def _tensor_meta(arg: Any) -> dict[str, Any]:
    return {
        "name": arg.name,
        "datatype": _ORT_TO_OIP.get(arg.type, "BYTES"),
        "shape": [d if isinstance(d, int) else -1 for d in arg.shape],
    }


def create_app(model_path: str, name: str, intra_op_threads: int = 0) -> Any:
    """A FastAPI app serving one ONNX model over OIP JSON."""
    import onnxruntime as ort
    import orjson
    from fastapi import FastAPI
    from starlette.concurrency import run_in_threadpool

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = intra_op_threads
    session = ort.InferenceSession(model_path, sess_options=opts, providers=["CPUExecutionProvider"])
    metadata: dict[str, Any] = {
        "name": name, "versions": ["1"], "platform": "onnxruntime_onnx",
        "inputs": [_tensor_meta(i) for i in session.get_inputs()],
        "outputs": [_tensor_meta(o) for o in session.get_outputs()],
    }  # fmt: skip
    input_types = {i["name"]: _OIP_TO_NUMPY.get(i["datatype"], np.float32) for i in metadata["inputs"]}
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    def json_response(doc: Any, status: int = 200) -> Response:
        return Response(
            orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY), status, media_type="application/json"
        )

    @app.get("/v2/health/ready")
    @app.get("/v2/health/live")
    async def ready() -> Response:
        return json_response({"ready": True})

    @app.get("/v2")
    async def server_metadata() -> Response:
        return json_response({"name": "fastapi-ort", "version": "1", "extensions": []})

    @app.get("/v2/models/{model}")
    async def model_metadata(model: str) -> Response:
        if model != name:
            return json_response({"error": f"unknown model {model!r}; this server has {name!r}"}, 404)
        return json_response(metadata)

    @app.post("/v2/models/{model}/infer")
    async def infer(model: str, request: Request) -> Response:
        if model != name:
            return json_response({"error": f"unknown model {model!r}; this server has {name!r}"}, 404)
        try:
            doc = orjson.loads(await request.body())
            feeds = {
                t["name"]: np.asarray(t["data"], dtype=input_types.get(t["name"], np.float32)).reshape(
                    t["shape"]
                )
                for t in doc["inputs"]
            }
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            return json_response({"error": f"bad OIP JSON request: {exc}"}, 400)
        outputs = await run_in_threadpool(session.run, None, feeds)
        return json_response({
            "model_name": name, "model_version": "1", "id": doc.get("id", ""),
            "outputs": [
                {"name": o["name"], "datatype": o["datatype"], "shape": list(v.shape), "data": np.ascontiguousarray(v).ravel()}
                for o, v in zip(metadata["outputs"], outputs, strict=True)
            ],
        })  # fmt: skip

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="FastAPI + onnxruntime OIP JSON baseline server.")
    parser.add_argument("--model", required=True, help="path of the .onnx file")
    parser.add_argument("--name", default="", help="model name on the wire (default: the file's folder name)")
    parser.add_argument("--host", default=HOST)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--intra-op-threads", type=int, default=0)
    args = parser.parse_args(argv)
    path = Path(args.model)
    if not path.is_file():
        parser.error(f"--model {args.model!r} is not a file")
    import uvicorn

    app = create_app(str(path), args.name or path.parent.name, args.intra_op_threads)
    uvicorn.run(app, host=args.host, port=args.port, workers=1, loop="uvloop", http="httptools",
                log_level="warning", access_log=False)  # fmt: skip


class FastApiOrtPeer(Peer):
    """Starts ``main`` above from servelab's own interpreter."""

    name = "fastapi-ort"

    def __init__(self, work_dir: Path | None = None, progress: Any = None, intra_op_threads: int = 0) -> None:
        super().__init__(work_dir, progress)
        self.intra_op_threads = intra_op_threads

    def prepare(self, artefacts: ModelArtefacts) -> None:
        if artefacts.onnx is None:
            raise InvalidArgument(f"{self.name} needs an ONNX model; {artefacts.name!r} has none")
        self.artefacts = artefacts

    def start(self) -> Endpoint:
        assert self.artefacts is not None and self.artefacts.onnx is not None, "prepare() first"
        port = free_port()
        argv = [sys.executable, "-m", "servelab.bench.peers.fastapi_ort", "--model", str(self.artefacts.onnx),
                "--name", self.artefacts.name, "--port", str(port), "--intra-op-threads", str(self.intra_op_threads)]  # fmt: skip
        proc = self._launch(argv)
        url = f"http://{HOST}:{port}"
        self._wait_http(f"{url}/v2/health/ready", timeout_s=60.0)
        return Endpoint(url=url, kind="oip-http", model=self.artefacts.name, pid=proc.pid, binary=False)


if __name__ == "__main__":
    main()

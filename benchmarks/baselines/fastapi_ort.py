"""Baseline: a minimal FastAPI + onnxruntime app answering OIP JSON infer for Triton's ``simple`` model.

    python benchmarks/baselines/fastapi_ort.py MODEL.onnx --port 9000

Only ``POST /v2/models/simple/infer`` (JSON inputs INPUT0, INPUT1 INT32 [n, 16]) and
``GET /v2/health/ready``. The session runs in FastAPI's thread pool, as a careful hand-written
server would; bodies go through orjson. No validation beyond what numpy and ORT do.
"""

from __future__ import annotations

import argparse

import numpy as np
import onnxruntime as ort
import orjson
import uvicorn
from fastapi import FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool


def make_app(model_path: str) -> FastAPI:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    outputs = [o.name for o in session.get_outputs()]
    app = FastAPI()

    @app.get("/v2/health/ready")
    async def ready() -> Response:
        return Response(status_code=200)

    @app.post("/v2/models/simple/infer")
    async def infer(request: Request) -> Response:
        body = orjson.loads(await request.body())
        feed = {
            t["name"]: np.asarray(t["data"], dtype=np.int32).reshape(t["shape"]) for t in body["inputs"]
        }
        results = await run_in_threadpool(session.run, None, feed)
        out = [
            {"name": n, "datatype": "INT32", "shape": list(r.shape), "data": r.reshape(-1)}
            for n, r in zip(outputs, results, strict=True)
        ]
        payload = {"model_name": "simple", "model_version": "1", "outputs": out}
        return Response(orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json")

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="path of simple's model.onnx")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args()
    uvicorn.run(make_app(args.model), host=args.host, port=args.port, loop="uvloop", http="httptools",
                access_log=False, log_level="warning")


if __name__ == "__main__":
    main()

"""The runtime alone: an onnxruntime InferenceSession called directly, in worker threads.

This is the baseline that "through the server" results are compared against.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from servelab.bench.client_base import Client, RequestFailed
from servelab.bench.inputs import Request, TensorMeta
from servelab.errors import InvalidArgument, Unsupported

__all__ = ["InProcessClient", "onnx_input_metas", "open_session"]

_ORT_TYPES = {
    "tensor(float)": "FP32", "tensor(double)": "FP64", "tensor(float16)": "FP16", "tensor(int64)": "INT64",
    "tensor(int32)": "INT32", "tensor(int16)": "INT16", "tensor(int8)": "INT8", "tensor(uint8)": "UINT8",
    "tensor(bool)": "BOOL", "tensor(string)": "BYTES",
}  # fmt: skip


def open_session(path: str, intra_op_threads: int = 0) -> object:
    """An onnxruntime session on ``path`` (a .onnx file)."""
    p = Path(path)
    if not p.is_file() or p.suffix != ".onnx":
        raise InvalidArgument(f"in-process target needs a .onnx model file, got {path!r}")
    try:
        import onnxruntime as ort
    except ImportError as exc:  # pragma: no cover - onnxruntime is a core dependency
        raise Unsupported("the in-process target needs onnxruntime: pip install onnxruntime") from exc
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = intra_op_threads
    return ort.InferenceSession(str(p), sess_options=opts, providers=["CPUExecutionProvider"])


def onnx_input_metas(session: object) -> list[TensorMeta]:
    """Inputs of an ORT session as TensorMeta (symbolic or unknown dims become -1)."""
    metas = []
    for i in session.get_inputs():  # type: ignore[attr-defined]
        dtype = _ORT_TYPES.get(i.type)
        if dtype is None:
            raise Unsupported(f"input {i.name!r} has ONNX type {i.type}, which the bench cannot generate")
        metas.append(TensorMeta(i.name, dtype, tuple(d if isinstance(d, int) else -1 for d in i.shape)))
    return metas


class InProcessClient(Client):
    def __init__(self, target: object, model: str, max_inflight: int) -> None:
        super().__init__(target, model, max_inflight)  # type: ignore[arg-type]
        self._feeds: list[Request] = []
        self._session: object | None = None
        self._pool: ThreadPoolExecutor | None = None

    @property
    def n_prepared(self) -> int:
        return len(self._feeds)

    def prepare(self, requests: list[Request]) -> None:
        self._feeds = requests

    async def start(self) -> None:
        self._session = open_session(self.target.url)
        self._pool = ThreadPoolExecutor(
            max_workers=min(self.max_inflight, 64), thread_name_prefix="bench-ort"
        )

    async def send(self, index: int) -> None:
        assert self._session is not None and self._pool is not None, "start() must be awaited before send()"
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._pool, self._session.run, None, self._feeds[index])  # type: ignore[attr-defined]
        except Exception as exc:
            raise RequestFailed(f"runtime_{type(exc).__name__}", str(exc)[:200]) from exc

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._session = None

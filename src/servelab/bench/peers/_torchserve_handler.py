"""TorchServe handler for a TorchScript model with one tensor input (runs inside TorchServe's venv).

Packed into the ``.mar`` by torch-model-archiver; imports only torch, numpy and the standard library.
TorchServe calls ``handle(data, context)`` with a list of requests (several when ``batch_size`` > 1);
each request's body is ``{input_name: nested list}`` (JSON, decoded by TorchServe) or raw little-endian
float32 bytes. The requests are stacked into one batch, run once, and split back: one compact JSON answer
``{"outputs": nested list}`` per request, in order. A bad request fails only itself (HTTP 400).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import torch


class _Model:
    def __init__(self) -> None:
        self.module: Any = None
        self.features = 0

    def load(self, context: Any) -> None:
        props = context.system_properties
        model_dir = props.get("model_dir")
        serialized = context.manifest["model"]["serializedFile"]
        self.module = torch.jit.load(os.path.join(model_dir, serialized), map_location="cpu").eval()
        extra = os.path.join(model_dir, "io.json")
        if os.path.exists(extra):
            with open(extra) as f:
                self.features = int(np.prod(json.load(f)["input_dims"]))

    def decode(self, request: dict[str, Any]) -> np.ndarray:
        body = request.get("body") if request.get("body") is not None else request.get("data")
        if isinstance(body, (bytes, bytearray)):
            try:
                body = json.loads(body)
            except ValueError:
                arr = np.frombuffer(bytes(body), dtype=np.float32)
                return arr.reshape(-1, self.features) if self.features else arr.reshape(1, -1)
        if isinstance(body, dict):
            if len(body) != 1:
                raise ValueError(f"expected one input tensor, got {sorted(body)}")
            body = next(iter(body.values()))
        arr = np.asarray(body, dtype=np.float32)
        return arr if arr.ndim >= 2 else arr.reshape(1, -1)

    def run(self, data: list[dict[str, Any]], context: Any) -> list[str]:
        answers: list[str] = [""] * len(data)
        arrays: list[np.ndarray] = []
        slots: list[int] = []
        for i, request in enumerate(data):
            try:
                arrays.append(self.decode(request))
                slots.append(i)
            except (ValueError, TypeError) as exc:
                answers[i] = json.dumps({"error": f"bad request: {exc}"})
                context.set_response_status(code=400, phrase="Bad Request", idx=i)
        if arrays:
            batch = torch.from_numpy(np.concatenate(arrays, axis=0))
            with torch.inference_mode():
                out = self.module(batch).numpy()
            start = 0
            for i, arr in zip(slots, arrays, strict=True):
                answers[i] = json.dumps(
                    {"outputs": out[start : start + arr.shape[0]].tolist()}, separators=(",", ":")
                )
                start += arr.shape[0]
        return answers


_model = _Model()


def handle(data: list[dict[str, Any]] | None, context: Any) -> list[str] | None:
    """TorchServe's module-level entry point: initialise on first call, then one answer per request."""
    if _model.module is None:
        _model.load(context)
    if data is None:
        return None
    return _model.run(data, context)

"""TorchServe handler for GraphSAGE node classification (runs inside TorchServe's venv, not servelab's).

The TorchServe-style baseline done the way a TorchServe user would: the graph store's ``.npy`` files
memory-mapped with numpy, 2-hop neighbour sampling in pure Python (uniform without replacement, the
fan-outs of the model, the same algorithm as servelab's ``PythonSampler``), feature rows gathered with
numpy, and the SAGE layers run by torch (the TorchScript file in the ``.mar``). Imports only numpy, torch
and the standard library.

Packed into the ``.mar`` with one extra file, ``graphsage.json``: ``{"graph_dir": ..., "fanouts": [f0, f1],
"seed": int, "torch_threads": int}``; the environment variable ``SERVELAB_GRAPH_DIR`` overrides
``graph_dir``. A request body is ``{"node_ids": [int, ...]}``; the answer is ``{"logits": [[float, ...],
...]}``, one row per node id, in order. When TorchServe hands over several requests at once
(``batch_size`` > 1) their node ids are sampled and run as one block and the logits split back. A bad
request fails only itself (HTTP 400).
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import numpy as np
import torch

CONFIG_FILE = "graphsage.json"


class _Sampler:
    """2-hop sampler on CSR arrays: Python lists, dicts and ``random.sample``."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, fanouts: tuple[int, int], seed: int) -> None:
        self.indptr = indptr
        self.indices = indices
        self.num_nodes = int(indptr.shape[0]) - 1
        self.fanouts = fanouts
        self.rng = random.Random(seed)

    def _neighbours(self, node: int, k: int) -> list[int]:
        lo, hi = int(self.indptr[node]), int(self.indptr[node + 1])
        nbrs: list[int] = self.indices[lo:hi].tolist()
        return nbrs if len(nbrs) <= k else self.rng.sample(nbrs, k)

    def _hop(self, rows: list[int], k: int, nodes: list[int], pos: dict[int, int]) -> list[list[int]]:
        out = []
        for g in rows:
            local = []
            for v in self._neighbours(g, k):
                if v not in pos:
                    pos[v] = len(nodes)
                    nodes.append(v)
                local.append(pos[v])
            out.append(local)
        return out

    def sample(self, seeds: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(nodes [n_all], nbr1 [n1, f1] padded with n_all, nbr2 [B, f0] padded with n1)."""
        f0, f1 = self.fanouts
        nodes = list(seeds)
        pos: dict[int, int] = {}
        for i, v in enumerate(seeds):
            pos.setdefault(v, i)
        l2 = self._hop(seeds, f0, nodes, pos)
        n1 = len(nodes)
        l1 = self._hop(nodes[:n1], f1, nodes, pos)
        n_all = len(nodes)
        nbr2 = np.array([r + [n1] * (f0 - len(r)) for r in l2], dtype=np.int64).reshape(len(seeds), f0)
        nbr1 = np.array([r + [n_all] * (f1 - len(r)) for r in l1], dtype=np.int64).reshape(n1, f1)
        return np.array(nodes, dtype=np.int64), nbr1, nbr2


def _open_store(graph_dir: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, indices, features) of a servelab graph store, memory-mapped read-only."""
    with open(os.path.join(graph_dir, "manifest.json")) as f:
        manifest = json.load(f)
    files = manifest["files"]

    def load(key: str) -> np.ndarray:
        if not files.get(key):
            raise RuntimeError(f"graph store {graph_dir} has no {key} file")
        return np.load(os.path.join(graph_dir, files[key]), mmap_mode="r")

    return load("indptr"), load("indices"), load("features")


class _GraphSage:
    def __init__(self) -> None:
        self.module: Any = None
        self.sampler: _Sampler | None = None
        self.features: np.ndarray | None = None

    def load(self, context: Any) -> None:
        model_dir = context.system_properties.get("model_dir")
        with open(os.path.join(model_dir, CONFIG_FILE)) as f:
            cfg = json.load(f)
        torch.set_num_threads(int(cfg.get("torch_threads", 1)))
        indptr, indices, self.features = _open_store(os.environ.get("SERVELAB_GRAPH_DIR") or cfg["graph_dir"])
        f0, f1 = (int(k) for k in cfg["fanouts"])
        self.sampler = _Sampler(indptr, indices, (f0, f1), int(cfg.get("seed", 0)))
        serialized = context.manifest["model"]["serializedFile"]
        self.module = torch.jit.load(os.path.join(model_dir, serialized), map_location="cpu").eval()

    def decode(self, request: dict[str, Any]) -> list[int]:
        body = request.get("body") if request.get("body") is not None else request.get("data")
        if isinstance(body, (bytes, bytearray, str)):
            body = json.loads(body)
        if not isinstance(body, dict) or not isinstance(body.get("node_ids"), list):
            raise ValueError('expected {"node_ids": [int, ...]}')
        ids = body["node_ids"]
        assert self.sampler is not None
        n = self.sampler.num_nodes
        if not ids:
            raise ValueError("node_ids is empty")
        for i, v in enumerate(ids):
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < n:
                raise ValueError(f"node_ids[{i}] = {v!r} is not a node id in [0, {n})")
        return ids

    def infer(self, seeds: list[int]) -> np.ndarray:
        assert self.sampler is not None and self.features is not None
        nodes, nbr1, nbr2 = self.sampler.sample(seeds)
        x = np.asarray(np.take(self.features, nodes, axis=0), dtype=np.float32)
        with torch.inference_mode():
            logits, _ = self.module(torch.from_numpy(x), torch.from_numpy(nbr1), torch.from_numpy(nbr2))
        return logits.numpy()

    def run(self, data: list[dict[str, Any]], context: Any) -> list[str]:
        answers = [""] * len(data)
        good: list[tuple[int, list[int]]] = []
        for i, request in enumerate(data):
            try:
                good.append((i, self.decode(request)))
            except (ValueError, TypeError) as exc:
                answers[i] = json.dumps({"error": f"bad request: {exc}"})
                context.set_response_status(code=400, phrase="Bad Request", idx=i)
        if good:
            logits = self.infer([v for _, ids in good for v in ids])
            start = 0
            for i, ids in good:
                rows = logits[start : start + len(ids)]
                answers[i] = json.dumps({"logits": rows.tolist()}, separators=(",", ":"))
                start += len(ids)
        return answers


_model = _GraphSage()


def handle(data: list[dict[str, Any]] | None, context: Any) -> list[str] | None:
    """TorchServe's module-level entry point: initialise on first call, then one answer per request."""
    if _model.module is None:
        _model.load(context)
    if data is None:
        return None
    return _model.run(data, context)

"""Triton python-backend ``model.py`` for GraphSAGE: the published hybrid's sampler stage and layers in one model.

Runs inside Triton's python stub (numpy, onnxruntime and numba from the backend folder; servelab is not
importable there), so it is a template that :mod:`servelab.bench.peers.triton_graphsage` copies into a
model's version folder together with:

* ``_sampler_kernels.py``: servelab's numba sampler kernels (``servelab/graph/_sampler_kernels.py``), the
  same file byte for byte, loaded from beside this one;
* ``model.onnx``: the layers graph of servelab's ``sage`` ensemble (``graphsage_layers``: x, nbr1, nbr2 in;
  logits, embeddings out), run on onnxruntime.

Per request: node ids -> 2-hop sample (the kernels' ``_sample``, on a per-call seed drawn as servelab's
``NumbaSampler`` draws it, so a fresh instance samples what a fresh ``sage_fused`` samples for the same
sequence of requests) -> feature rows gathered from the memory-mapped graph store -> layers. Input
``node_ids`` INT64 [-1]; outputs ``logits`` FP32 [-1, C] and ``embeddings`` FP32 [-1, H], as ``sage_fused``.

Config ``parameters`` (string values): ``graph_dir`` (absolute path of the servelab graph store, required),
``fanouts`` ("hop1,hop2"), ``seed``, ``layers_threads`` (onnxruntime intra-op threads, default 1),
``parallel_from`` (batch size from which the parallel sampling kernel runs, default 64).
"""

import importlib.util
import json
import os

import numpy as np
import onnxruntime as ort

import triton_python_backend_utils as pb_utils

_MASK63 = (1 << 63) - 1
_OUTPUTS = ("logits", "embeddings")


def _parameter(config, key, default):
    value = config.get("parameters", {}).get(key, {}).get("string_value")
    if value in (None, ""):
        if default is None:
            raise ValueError(f"config parameter {key!r} is required")
        return default
    return value


def _load_kernels(folder):
    """servelab's kernel module from the version folder (numba caches its compiled code beside it)."""
    path = os.path.join(folder, "_sampler_kernels.py")
    spec = importlib.util.spec_from_file_location("_sampler_kernels", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load the sampler kernels from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _open_store(graph_dir):
    """(indptr, indices, features) of a servelab graph store, memory-mapped read-only."""
    with open(os.path.join(graph_dir, "manifest.json")) as f:
        files = json.load(f)["files"]

    def load(key):
        if not files.get(key):
            raise ValueError(f"graph store {graph_dir} has no {key} file")
        return np.ascontiguousarray(np.load(os.path.join(graph_dir, files[key]), mmap_mode="r"))

    return load("indptr"), load("indices"), load("features")


def _error(message):
    """A client error (INVALID_ARG: gRPC INVALID_ARGUMENT, HTTP 400) where this python backend has codes."""
    code = getattr(pb_utils.TritonError, "INVALID_ARG", None)
    error = pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)
    return pb_utils.InferenceResponse(output_tensors=[], error=error)


class TritonPythonModel:
    """initialize / execute / finalize; one response per request, a bad request fails only itself."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        folder = os.path.join(args["model_repository"], args["model_version"])
        self.kernels = _load_kernels(folder)
        self.indptr, self.indices, self.features = _open_store(_parameter(config, "graph_dir", None))
        self.num_nodes = self.indptr.size - 1
        self.fanouts = tuple(int(k) for k in _parameter(config, "fanouts", "10,10").split(","))
        self.seed = int(_parameter(config, "seed", "0")) & _MASK63
        self.parallel_from = int(_parameter(config, "parallel_from", "64"))
        self.calls = 0
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(_parameter(config, "layers_threads", "1"))
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as servelab's sessions
        path = os.path.join(folder, "model.onnx")
        self.session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
        one = np.zeros(1, dtype=np.int64)
        for parallel in (False, True):  # compile (or load from numba's cache) both kernels now
            nodes, _, nbr1, nbr2, _ = self.kernels._sample(self.indptr, self.indices, one, *self.fanouts, 0, parallel)
        self._layers(nodes, nbr1, nbr2)

    def _next_seed(self):
        """The n-th call's seed, as servelab's NumbaSampler draws it."""
        self.calls += 1
        return (self.seed * 6364136223846793005 + 1442695040888963407 * self.calls) & _MASK63

    def _layers(self, nodes, nbr1, nbr2):
        x = np.take(self.features, nodes, axis=0)
        if x.dtype != np.float32:
            x = x.astype(np.float32)
        return self.session.run(list(_OUTPUTS), {"x": x, "nbr1": nbr1, "nbr2": nbr2})

    def _node_ids(self, request):
        tensor = pb_utils.get_input_tensor_by_name(request, "node_ids")
        if tensor is None:
            raise ValueError("input 'node_ids' (INT64 [-1]) is missing")
        ids = tensor.as_numpy()
        if ids.dtype != np.int64 or ids.ndim != 1 or ids.size == 0:
            raise ValueError(f"node_ids must be a non-empty 1-D INT64 array, got {ids.dtype} with shape {ids.shape}")
        return np.ascontiguousarray(ids)

    def _answer(self, request):
        ids = self._node_ids(request)
        parallel = ids.size >= self.parallel_from
        f0, f1 = self.fanouts
        nodes, _, nbr1, nbr2, bad = self.kernels._sample(
            self.indptr, self.indices, ids, f0, f1, self._next_seed(), parallel
        )
        if bad >= 0:
            raise ValueError(
                f"node_ids[{bad}] = {int(ids[bad])} is outside the graph: expected ids in [0, {self.num_nodes})"
            )
        logits, embeddings = self._layers(nodes, nbr1, nbr2)
        tensors = [pb_utils.Tensor("logits", logits), pb_utils.Tensor("embeddings", embeddings)]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests):
        answers = []
        for request in requests:
            try:
                answers.append(self._answer(request))
            except ValueError as exc:
                answers.append(_error(str(exc)))
        return answers

    def finalize(self):
        self.session = None

"""The ``graphsage`` backend: sampling, first-layer aggregation and the dense layers in one model call.

The ``sage`` ensemble keeps Triton's layout (sampler -> layers, each a model of its own, any layers
runtime). This backend is the published hybrid design's "one serving entry": one request walks
through the numba sampler, a numba kernel that averages the first hop's feature rows while reading
them from the store (:mod:`servelab.graph._fused_kernels`), and the 11-node dense graph of
:mod:`servelab.graph.dense` on ONNX Runtime or OpenVINO, with none of the per-step validation,
statistics and scheduling of nested model calls. Same inputs (``node_ids`` and the inductive
``new_features`` / ``new_edges``) and outputs (``logits``, ``embeddings``) as ``sage``.

Config parameters (read by :class:`~servelab.graph.parameters.FusedSageParameters`), besides the
sampler's (``graph_dir``, ``fanouts``, ``sampler``, ``seed``, ``threads``):
  runtime          "onnxruntime" (default) or "openvino": what runs the dense graph (``model.onnx``)
  layers_threads   intra-op threads of the dense graph, default 1: its ops are small and concurrent
                   requests run side by side on one session, which serves 2 cores better than
                   splitting each call (batch-1 layers 20 us on 1 thread, 39 us on 2)
  parallel_from    batch size from which the aggregation kernel runs in parallel, default 64

Stage times: ``sample_ns`` (sampling), ``gather_ns`` (reading and averaging feature rows) and
``layers_ns`` (the dense graph), so the sampling share reads off as for the ensemble.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from servelab.backends.base import Inputs, Outputs
from servelab.errors import InvalidArgument
from servelab.graph import _sampler_kernels
from servelab.graph._fused_kernels import dense_inputs, dense_serial
from servelab.graph.backend import NEW_EDGES, NEW_FEATURES, GraphSamplerBackend
from servelab.graph.parameters import FusedSageParameters
from servelab.graph.sampler import NumbaSampler
from servelab.graph.sessions import OUTPUT_NAMES, openvino_model, ort_session
from servelab.trust import version_file

__all__ = ["FusedSageBackend"]

DenseFn = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def _onnxruntime(path: Path, threads: int) -> DenseFn:
    run, names = ort_session(path, threads).run, list(OUTPUT_NAMES)  # type: ignore[attr-defined]

    def dense(a1: np.ndarray, idx2: np.ndarray, w2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits, emb = run(names, {"a1": a1, "idx2": idx2, "w2": w2})  # DENSE_INPUTS, spelt out: hot path
        return logits, emb

    return dense


def _openvino(path: Path, threads: int) -> DenseFn:
    compiled = openvino_model(path, threads)
    logits_out, emb_out = compiled.output("logits"), compiled.output("embeddings")  # type: ignore[attr-defined]

    def dense(a1: np.ndarray, idx2: np.ndarray, w2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # one infer request per call: requests run concurrently from the worker threads
        request = compiled.create_infer_request()  # type: ignore[attr-defined]
        result = request.infer({"a1": a1, "idx2": idx2, "w2": w2})
        return np.array(result[logits_out]), np.array(result[emb_out])

    return dense


class FusedSageBackend(GraphSamplerBackend):
    """node_ids -> (logits, embeddings) in one call: sample, aggregate while gathering, dense layers."""

    kind = "graphsage"
    parameters: ClassVar[type[FusedSageParameters]] = FusedSageParameters
    releases_gil = True  # numba kernels run nogil; both runtimes release the GIL while computing

    def load(self) -> None:
        params = FusedSageParameters.read(self.config)  # bad keys fail before the store is opened
        super().load()
        name = self.config.default_model_filename or "model.onnx"
        path = version_file(self.ctx.version_dir, name, "default_model_filename")
        if path.is_dir():
            path = version_file(self.ctx.version_dir, f"{name}/model.onnx", "default_model_filename")
        if not path.is_file():
            raise InvalidArgument(
                f"model '{self.ctx.model_name}': no dense graph at {self.ctx.version_dir.name}/{name} "
                "(written by `servelab graph export`, see servelab.graph.dense)"
            )
        self.parallel_from = params.parallel_from
        self._dense = (_onnxruntime if params.runtime == "onnxruntime" else _openvino)(path, params.layers_threads)
        self.layers_ns = 0
        # the small-batch fast path needs the numba sampler and float32 features (numba reads them in place)
        sampler, self._next_seed, self._serial_below = self.sampler, None, 0
        if isinstance(sampler, NumbaSampler) and self.store.features.dtype == np.float32:
            self._next_seed = sampler._next_seed
            self._serial_below = min(self.parallel_from, sampler.parallel_threshold)
        self._warmup()

    def _warmup(self) -> None:
        """Load both aggregation kernels (numba cache) and run the graph once, on a fixed sampler seed
        so that the first request samples what the ensemble's first request would."""
        blocks = self.sampler.sample(np.zeros(1, dtype=np.int64), seed=0)
        for parallel in (False, True):  # the serial one is dense_serial, the fast path's
            a1, idx2, w2 = dense_inputs(self.store.features, blocks.nodes, blocks.nbr1, blocks.nbr2, parallel)
        self._dense(a1, idx2, w2)

    def infer(self, inputs: Inputs) -> Outputs:
        if NEW_FEATURES in inputs or NEW_EDGES in inputs:
            a1, idx2, w2 = self._inductive_inputs(inputs)
        else:
            a1, idx2, w2 = self._stored_inputs(inputs)
        t0 = time.perf_counter_ns()
        logits, emb = self._dense(a1, idx2, w2)
        elapsed = time.perf_counter_ns() - t0
        with self._lock:
            self.layers_ns += elapsed
        return {"logits": logits, "embeddings": emb}

    def _stored_inputs(self, inputs: Inputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample the stored graph and aggregate its first hop; records the sample and gather times."""
        t0 = time.perf_counter_ns()
        ids = inputs.get("node_ids")
        if (
            self._next_seed is not None and type(ids) is np.ndarray and ids.dtype == np.int64 and ids.ndim == 1
            and 0 < ids.size < self._serial_below and ids.flags.c_contiguous
        ):  # fmt: skip
            # Small batches: two compiled calls and no numpy calls in Python; in a busy server each
            # numpy call costs several times its in-process time (cold caches).
            nodes, _, nbr1, nbr2, bad = _sampler_kernels._sample(
                *self._csr, ids, *self.fanouts, self._next_seed(), False
            )
            if bad >= 0:
                self._node_ids(inputs, self.store.num_nodes)  # raises, naming every bad id
            t1 = time.perf_counter_ns()
            dense = dense_serial(self.store.features, nodes, nbr1, nbr2)
        else:
            ids = self._node_ids(inputs, self.store.num_nodes)
            blocks = self.sampler.sample(ids)
            nodes = blocks.nodes
            t1 = time.perf_counter_ns()
            parallel = ids.size >= self.parallel_from
            dense = dense_inputs(self.store.features, nodes, blocks.nbr1, blocks.nbr2, parallel)
        self._record(t1 - t0, time.perf_counter_ns() - t1, int(ids.size), int(nodes.size))
        return dense  # type: ignore[no-any-return]

    def _inductive_inputs(self, inputs: Inputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The same over the stored graph plus the request's new nodes and edges."""
        x, nbr1, nbr2 = self._inductive(inputs)  # records its sampling and gathering
        t0 = time.perf_counter_ns()
        dense = dense_inputs(x, np.arange(x.shape[0], dtype=np.int64), nbr1, nbr2)
        elapsed = time.perf_counter_ns() - t0
        with self._lock:
            self.stages.gather_ns += elapsed
        return dense

    def stage_times(self) -> dict[str, int]:
        with self._lock:
            return {**self.stages.as_dict(), "layers_ns": self.layers_ns}

    def stage_stats(self) -> dict[str, Any]:
        return self.stage_times()

"""The ``graphsage_sampler`` backend: node ids in, a padded 2-hop block (x, nbr1, nbr2) out.

Config parameters (``config.pbtxt`` ``parameters``, read by
:class:`~servelab.graph.parameters.GraphSamplerParameters`):
  graph_dir   store folder relative to the model repository root (required), e.g. ``_graphs/demo``;
              it must stay inside the repository (:func:`servelab.trust.resolve_inside`): a store is
              data several models share, so its boundary is the repository, not one model's folder
  fanouts     "hop1,hop2", default "10,10"
  sampler     "numba" (default) or "python" (the pure-Python reference, for baselines)
  seed        sampler seed, default "0"
  threads     numba threads for large batches, default: the instance's thread budget

Inputs: ``node_ids`` INT64 [-1] and, for inductive inference, the optional ``new_features`` FP32
[-1, F] and ``new_edges`` INT64 [-1, 2]: ids >= num_nodes name new nodes (id num_nodes + i is row i
of new_features) and the edges (undirected) join them to the stored graph or to each other. Such
requests sample over the stored CSR plus a per-request adjacency (see :mod:`servelab.graph._overlay`)
with the compiled union kernel, whatever ``sampler`` says.

Each call adds its sampling and feature-gathering time to :attr:`GraphSamplerBackend.stages`.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from servelab.backends.base import Backend, Inputs, Outputs
from servelab.errors import InvalidArgument
from servelab.graph import _overlay
from servelab.graph.parameters import GraphSamplerParameters
from servelab.graph.sampler import NumbaSampler, PythonSampler, gather_features
from servelab.graph.store import GraphStore
from servelab.trust import resolve_inside

__all__ = ["GraphSamplerBackend", "StageTimes"]

_SHOWN_IDS = 10
_MASK63 = (1 << 63) - 1
#: optional inputs of inductive requests
NEW_FEATURES, NEW_EDGES = "new_features", "new_edges"


@dataclass
class StageTimes:
    """Cumulative nanoseconds per pipeline stage over ``count`` calls (``nodes``: rows gathered)."""

    sample_ns: int = 0
    gather_ns: int = 0
    count: int = 0
    seeds: int = 0
    nodes: int = 0
    #: calls that brought new nodes or edges (their overlay build is counted in sample_ns)
    inductive: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


class GraphSamplerBackend(Backend):
    """Samples the 2-hop neighbourhood of the requested nodes and gathers their features."""

    kind = "graphsage_sampler"
    parameters: ClassVar[type[GraphSamplerParameters]] = GraphSamplerParameters
    releases_gil = True  # the numba serial kernel runs nogil; gather is one numpy take
    never_blocks = True  # compiled sampling, gathers and ONNX Runtime/OpenVINO layers: CPU work only, no I/O

    def load(self) -> None:
        params = self.parameters.read(self.config)
        if not params.graph_dir:
            raise InvalidArgument(
                f"model '{self.ctx.model_name}': parameter graph_dir is required "
                "(a graph store folder relative to the repository, e.g. _graphs/demo)"
            )
        repository = self.ctx.version_dir.parent.parent
        graph_dir = resolve_inside(repository, params.graph_dir, "parameter graph_dir", within="the model repository")
        self.store = GraphStore.open(graph_dir)
        self._check_outputs()
        fanouts, seed = params.fanouts, params.seed
        if params.sampler == "numba":
            threads = params.threads or max(self.ctx.threads, 1)
            self.sampler: NumbaSampler | PythonSampler = NumbaSampler(
                self.store, fanouts, seed, threads=threads
            )
            self.sampler.warmup()
        else:
            self.sampler = PythonSampler(self.store, fanouts, seed)
        self._csr = (self.sampler.indptr, self.sampler.indices)  # plain contiguous arrays for numba
        _overlay.warmup(*self._csr, fanouts)
        self.fanouts = fanouts
        self._seed = seed & _MASK63
        self._calls = itertools.count(1)
        self.stages = StageTimes()
        self._lock = threading.Lock()

    def _check_outputs(self) -> None:
        for out in self.config.output:
            if out.name == "x" and len(out.dims) == 2 and out.dims[1] not in (-1, self.store.num_features):
                raise InvalidArgument(
                    f"model '{self.ctx.model_name}': output x has {out.dims[1]} columns in config.pbtxt "
                    f"but its graph store has {self.store.num_features} features"
                )

    def _node_ids(self, inputs: Inputs, num_total: int) -> np.ndarray:
        if "node_ids" not in inputs:
            raise InvalidArgument(
                f"model '{self.ctx.model_name}' expects input 'node_ids', got {sorted(inputs)}"
            )
        ids = np.asarray(inputs["node_ids"])
        if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise InvalidArgument(
                f"node_ids must be a non-empty 1-D integer array, got {ids.dtype} with shape {ids.shape}"
            )
        ids = ids.astype(np.int64, copy=False)
        bad = ids[(ids < 0) | (ids >= num_total)]
        if bad.size:
            shown = ", ".join(str(int(v)) for v in bad[:_SHOWN_IDS])
            more = f" and {bad.size - _SHOWN_IDS} more" if bad.size > _SHOWN_IDS else ""
            extra = num_total - self.store.num_nodes
            new = f" ({self.store.num_nodes} stored nodes + {extra} rows of new_features)" if extra else ""
            raise InvalidArgument(
                f"node_ids {shown}{more} are outside the graph: expected ids in [0, {num_total}){new}"
            )
        return ids

    def _inductive(self, inputs: Inputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample and gather over the stored graph plus this request's new nodes and edges."""
        t0 = time.perf_counter_ns()
        store = self.store
        overlay = _overlay.build_overlay(
            *self._csr, store.num_features, inputs.get(NEW_FEATURES), inputs.get(NEW_EDGES)
        )
        ids = self._node_ids(inputs, overlay.num_total)
        seed = (self._seed * 6364136223846793005 + 1442695040888963407 * next(self._calls)) & _MASK63
        nodes, _, nbr1, nbr2 = _overlay.sample_union(*self._csr, overlay, ids, self.fanouts, seed)
        t1 = time.perf_counter_ns()
        x = _overlay.gather_union(store.features, overlay, nodes)
        self._record(t1 - t0, time.perf_counter_ns() - t1, int(ids.size), int(nodes.size), inductive=1)
        return x, nbr1, nbr2

    def _record(self, sample_ns: int, gather_ns: int, seeds: int, nodes: int, inductive: int = 0) -> None:
        with self._lock:
            s = self.stages
            s.sample_ns += sample_ns
            s.gather_ns += gather_ns
            s.count += 1
            s.seeds += seeds
            s.nodes += nodes
            s.inductive += inductive

    def infer(self, inputs: Inputs) -> Outputs:
        if NEW_FEATURES in inputs or NEW_EDGES in inputs:
            x, nbr1, nbr2 = self._inductive(inputs)
            return {"x": x, "nbr1": nbr1, "nbr2": nbr2}
        ids = self._node_ids(inputs, self.store.num_nodes)
        t0 = time.perf_counter_ns()
        blocks = self.sampler.sample(ids)
        t1 = time.perf_counter_ns()
        x = gather_features(self.store, blocks.nodes)
        self._record(t1 - t0, time.perf_counter_ns() - t1, int(ids.size), int(blocks.nodes.size))
        return {"x": x, "nbr1": blocks.nbr1, "nbr2": blocks.nbr2}

    def stage_times(self) -> dict[str, int]:
        """A consistent snapshot of the cumulative stage times and counts."""
        with self._lock:
            return self.stages.as_dict()

    def stage_stats(self) -> dict[str, Any]:
        return self.stage_times()

    def unload(self) -> None:
        self.sampler = None  # type: ignore[assignment]
        self.store = None  # type: ignore[assignment]

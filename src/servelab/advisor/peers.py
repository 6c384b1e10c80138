"""Peer servers on the same model as reference rows: TorchServe (TorchScript), MLServer (ONNX Runtime) and
the real Triton 2.51 (its python backend running the ONNX model on onnxruntime; labelled as such).

They are the peers ``servelab compare`` launches. Each is started in its own environment, measured with the
same rate search and the same requests as the candidates, and stopped. A peer that cannot run the model (no
environment, no artefact it can serve, inputs its handler does not take) is a row with the reason.

A model that does not batch (``max_batch_size`` 0) is served unbatched by every peer: Triton with
``max_batch_size: 0`` and full shapes, MLServer without adaptive batching, and fed the same whole requests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from servelab.advisor.wire import MeasureSettings, Probe, RateSearch, measure_probe, search_rate
from servelab.bench import TargetSpec
from servelab.bench.peers.base import ModelArtefacts, Peer, TensorInfo
from servelab.bench.peers.targets import PeerSettings
from servelab.errors import InvalidArgument, ServelabError

__all__ = ["PEERS", "PeerRun", "measure_peer", "peer_artefacts", "peer_settings"]

#: peer -> the runtime that computes inside it (for the qualitative scores)
PEERS: dict[str, str] = {"torchserve": "pytorch", "mlserver": "onnxruntime", "triton": "onnxruntime"}
#: the dynamic batching delay Triton's generated model gets for a batching model (the grid's start setting)
TRITON_QUEUE_DELAY_US = 200
Progress = Callable[[str], None]


@dataclass
class PeerRun:
    """A peer's rate search, and how it served the model (Triton: which python model ran it)."""

    search: RateSearch
    served_as: str = ""


def peer_artefacts(
    peer: str, name: str, inputs: Sequence[object], outputs: Sequence[object], onnx: Path | None,
    torchscript: Path | None, max_batch: int,
) -> ModelArtefacts:  # fmt: skip
    """The fp32 artefacts as ``peer``'s launcher takes them: dims without the batch axis; for a model that
    does not batch (``max_batch`` 0) Triton gets the full shapes (its config says max_batch_size 0), while
    MLServer's settings put the first axis back themselves."""
    full = max_batch == 0 and peer == "triton"

    def info(t: object) -> TensorInfo:
        return TensorInfo(t.name, t.dtype.value, tuple(t.shape if full else t.dims))  # type: ignore[attr-defined]

    return ModelArtefacts(name, tuple(info(t) for t in inputs), tuple(info(t) for t in outputs),
                          max_batch_size=max_batch, onnx=onnx, torchscript=torchscript)  # fmt: skip


def peer_settings(peers_dir: Path, batched: bool, threads: int) -> PeerSettings:
    """The peers' own knobs: their batching off for a model that does not batch, ``threads`` for Triton's ORT."""
    if batched:
        return PeerSettings(peers_dir=peers_dir, intra_op_threads=threads, triton_max_queue_delay_us=TRITON_QUEUE_DELAY_US)
    return PeerSettings(peers_dir=peers_dir, torchserve_batch_size=1, mlserver_max_batch_size=1, intra_op_threads=threads)


def _peer(name: str, settings: PeerSettings, progress: Progress) -> Peer:
    if name == "torchserve":
        from servelab.bench.peers.torchserve import TorchServePeer

        return TorchServePeer(settings.peers_dir, progress=progress, batch_size=settings.torchserve_batch_size,
                              max_batch_delay_ms=settings.torchserve_max_batch_delay_ms, workers=settings.torchserve_workers)  # fmt: skip
    if name == "mlserver":
        from servelab.bench.peers.mlserver import MLServerPeer

        return MLServerPeer(settings.peers_dir, progress=progress, max_batch_size=settings.mlserver_max_batch_size,
                            max_batch_time_s=settings.mlserver_max_batch_time_s,
                            parallel_workers=settings.mlserver_parallel_workers)  # fmt: skip
    if name == "triton":
        from servelab.bench.peers.triton import TritonPeer

        return TritonPeer(settings.peers_dir, progress=progress, instances=settings.triton_instances,
                          max_queue_delay_us=settings.triton_max_queue_delay_us,
                          intra_op_threads=max(settings.intra_op_threads, 1))  # fmt: skip
    raise InvalidArgument(f"unknown peer {name!r}; expected one of {sorted(PEERS)}")


def _unfit(name: str, artefacts: ModelArtefacts) -> str | None:
    """Why ``name`` cannot serve ``artefacts`` here, or None."""
    if name == "torchserve":
        if artefacts.torchscript is None:
            return "torchserve needs an fp32 TorchScript artefact, and convert made none"
        if len(artefacts.inputs) != 1 or artefacts.inputs[0].datatype != "FP32":
            got = ", ".join(f"{t.name} {t.datatype}" for t in artefacts.inputs)
            return f"torchserve's handler here takes one FP32 input tensor; this model takes {got}"
        return None
    if artefacts.onnx is None:
        return f"{name} needs an fp32 ONNX artefact, and convert made none"
    return None


def measure_peer(
    name: str, artefacts: ModelArtefacts, settings: PeerSettings, measure: MeasureSettings, progress: Progress
) -> PeerRun:
    """Start peer ``name`` on ``artefacts``, search its highest rate within the SLA, stop it."""
    why = _unfit(name, artefacts)
    if why is not None:
        return PeerRun(RateSearch(complete=False, error=why))
    try:
        with _peer(name, settings, progress) as peer:
            peer.install()
            peer.prepare(artefacts)
            ep = peer.start()
            target = TargetSpec(ep.kind, ep.url, binary=ep.binary, server_pid=ep.pid)  # type: ignore[arg-type]

            def probe(mode: str, level: float) -> Probe:
                p = measure_probe(target, ep.model, measure, mode, level)
                progress(f"  {name} {level:,.0f}{'/s' if mode == 'request_rate' else ' conc'}: P99 {p.p99_ms:.2f} ms")
                return p

            search = search_rate(probe, measure.rate_steps, measure.closed_concurrency, sla_p99_ms=measure.sla_p99_ms)
            return PeerRun(search, ep.extra.get("served_as", ""))
    except ServelabError as exc:
        return PeerRun(RateSearch(complete=False, error=f"{name} could not be measured: {exc.message}"))

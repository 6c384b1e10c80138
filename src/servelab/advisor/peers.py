"""Peer servers on the same model as reference rows: TorchServe (TorchScript) and MLServer (ONNX Runtime).

They are the peers ``servelab compare`` launches today (Triton joins when its launcher lands). Each is
started in its own environment, measured with the same rate search as the candidates, and stopped.
A peer that cannot start (no environment, no artefact it can serve) is a row with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from servelab.advisor.wire import MeasureSettings, Probe, RateSearch, measure_probe, search_rate
from servelab.bench import TargetSpec
from servelab.bench.peers.base import ModelArtefacts, Peer, TensorInfo
from servelab.bench.peers.targets import PeerSettings
from servelab.errors import InvalidArgument, ServelabError

__all__ = ["PEERS", "measure_peer", "peer_artefacts"]

PEERS: dict[str, str] = {"torchserve": "pytorch", "mlserver": "onnxruntime"}
Progress = Callable[[str], None]


def peer_artefacts(
    name: str, inputs: Sequence[object], outputs: Sequence[object], onnx: Path | None, torchscript: Path | None, max_batch: int
) -> ModelArtefacts:
    """The fp32 artefacts as the peers' launchers take them (dims without the batch axis)."""

    def info(t: object) -> TensorInfo:
        return TensorInfo(t.name, t.dtype.value, tuple(t.dims))  # type: ignore[attr-defined]

    return ModelArtefacts(name, tuple(info(t) for t in inputs), tuple(info(t) for t in outputs),
                          max_batch_size=max_batch, onnx=onnx, torchscript=torchscript)  # fmt: skip


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
    raise InvalidArgument(f"unknown peer {name!r}; expected one of {sorted(PEERS)}")


def measure_peer(
    name: str, artefacts: ModelArtefacts, settings: PeerSettings, measure: MeasureSettings, progress: Progress
) -> RateSearch:
    """Start peer ``name`` on ``artefacts``, search its highest rate within the SLA, stop it."""
    needed = artefacts.torchscript if name == "torchserve" else artefacts.onnx
    if needed is None:
        kind = "TorchScript" if name == "torchserve" else "ONNX"
        return RateSearch(complete=False, error=f"{name} needs an fp32 {kind} artefact, and convert made none")
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

            return search_rate(probe, measure.rate_steps, measure.closed_concurrency)
    except ServelabError as exc:
        return RateSearch(complete=False, error=f"{name} could not be measured: {exc.message}")

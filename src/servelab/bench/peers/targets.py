"""Compare targets by name: parse ``servelab-onnxruntime,inprocess-ort,mlserver@grpc,oip=URL`` and
open each one (start its server, or point at the runtime or URL) as a bench ``TargetSpec``.

Names: ``servelab-onnxruntime``, ``servelab-openvino``, ``servelab-torch``, ``servelab-python``
(``servelab serve`` with the family's model for that runtime), ``inprocess-ort`` (onnxruntime called
directly, no server), ``fastapi-ort``, ``torchserve``, ``mlserver``, ``triton`` (the real Triton 2.51,
python backend: the family's python model as it is, else its ONNX model inside a generated python model),
and ``oip=URL`` (any running OIP server: ``http://...`` or ``grpc://host:port``). ``@http`` / ``@grpc``
after a servelab, mlserver or triton name picks the OIP transport.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab.bench.peers.base import Endpoint, Peer
from servelab.bench.peers.family import Family
from servelab.bench.specs import TargetSpec
from servelab.errors import InvalidArgument

__all__ = ["TARGET_NAMES", "OpenTarget", "PeerSettings", "TargetChoice", "open_target", "parse_targets"]

TARGET_NAMES: tuple[str, ...] = (
    "servelab-onnxruntime", "servelab-openvino", "servelab-torch", "servelab-python", "inprocess-ort", "fastapi-ort",
    "torchserve", "mlserver", "triton",
)  # fmt: skip
_SERVELAB_RUNTIMES = {
    "servelab-onnxruntime": "onnxruntime",
    "servelab-openvino": "openvino",
    "servelab-torch": "torch",
    "servelab-python": "python",
}
_TRANSPORT_CHOICE = ("servelab-onnxruntime", "servelab-openvino", "servelab-torch", "servelab-python", "mlserver", "triton")


@dataclass(frozen=True, slots=True)
class TargetChoice:
    """One parsed target: ``label`` as the user wrote it, ``name`` without the transport suffix."""

    label: str
    name: str
    protocol: str = "http"
    url: str | None = None


@dataclass(frozen=True, slots=True)
class PeerSettings:
    """Knobs of the peers' own servers (each peer's batching is its own, documented in the report)."""

    peers_dir: Path = Path(".peers")
    torchserve_batch_size: int = 8
    torchserve_max_batch_delay_ms: int = 5
    torchserve_workers: int = 1
    mlserver_max_batch_size: int = 8
    mlserver_max_batch_time_s: float = 0.002
    mlserver_parallel_workers: int = 0
    intra_op_threads: int = 0
    triton_instances: int = 1
    triton_max_queue_delay_us: int | None = None  # dynamic batching of the generated ONNX model (None: off)


@dataclass
class OpenTarget:
    """A target ready to measure: the bench spec, the model name on its wire, and what it is."""

    spec: TargetSpec
    model: str
    shapes: dict[str, tuple[int, ...]]
    description: dict[str, Any] = field(default_factory=dict)


def parse_targets(text: str, default_protocol: str = "http") -> list[TargetChoice]:
    """Parse a comma-separated target list; InvalidArgument names the bad entry and the valid names."""
    choices: list[TargetChoice] = []
    for raw in (t.strip() for t in text.split(",")):
        if not raw:
            continue
        if raw.startswith("oip="):
            url = raw[4:]
            if not url.startswith(("http://", "https://", "grpc://")):
                raise InvalidArgument(
                    f"target {raw!r}: expected oip=http://host:port or oip=grpc://host:port"
                )
            choices.append(TargetChoice(raw, "oip", "grpc" if url.startswith("grpc://") else "http", url))
            continue
        name, _, proto = raw.partition("@")
        if name not in TARGET_NAMES:
            raise InvalidArgument(
                f"unknown target {raw!r}; expected one of {', '.join(TARGET_NAMES)} or oip=URL"
            )
        if proto and (proto not in ("http", "grpc") or name not in _TRANSPORT_CHOICE):
            raise InvalidArgument(
                f"target {raw!r}: '@http'/'@grpc' applies only to {', '.join(_TRANSPORT_CHOICE)}"
            )
        protocol = proto or (default_protocol if name in _TRANSPORT_CHOICE else "http")
        choices.append(TargetChoice(raw, name, protocol))
    if not choices:
        raise InvalidArgument("--targets is empty; name at least one target")
    labels = [c.label for c in choices]
    if len(set(labels)) != len(labels):
        raise InvalidArgument(f"--targets lists a target twice: {labels}")
    return choices


def _make_peer(
    choice: TargetChoice, family: Family, settings: PeerSettings, progress: Callable[[str], None]
) -> tuple[Peer, Any]:
    """The peer object for a server target and the artefacts it needs."""
    if choice.name in _SERVELAB_RUNTIMES:
        from servelab.bench.peers.servelab_target import ServelabPeer

        member = family.member(_SERVELAB_RUNTIMES[choice.name])
        return ServelabPeer(family.repository, member.name, progress=progress, protocol=choice.protocol), None
    if choice.name == "fastapi-ort":
        from servelab.bench.peers.fastapi_ort import FastApiOrtPeer

        return FastApiOrtPeer(
            progress=progress, intra_op_threads=settings.intra_op_threads
        ), family.artefacts("onnxruntime")
    if choice.name == "torchserve":
        from servelab.bench.peers.torchserve import TorchServePeer

        ts: Peer = TorchServePeer(
            settings.peers_dir, progress=progress, batch_size=settings.torchserve_batch_size,
            max_batch_delay_ms=settings.torchserve_max_batch_delay_ms, workers=settings.torchserve_workers,
        )  # fmt: skip
        return ts, family.artefacts("torch")
    if choice.name == "triton":
        return _triton_peer(choice, family, settings, progress)
    from servelab.bench.peers.mlserver import MLServerPeer

    peer = MLServerPeer(
        settings.peers_dir, progress=progress, max_batch_size=settings.mlserver_max_batch_size,
        max_batch_time_s=settings.mlserver_max_batch_time_s, parallel_workers=settings.mlserver_parallel_workers,
        protocol=choice.protocol,
    )  # fmt: skip
    return peer, family.artefacts("onnxruntime")


def _triton_peer(
    choice: TargetChoice, family: Family, settings: PeerSettings, progress: Callable[[str], None]
) -> tuple[Peer, Any]:
    """Triton with the family's python model (as it is) or, failing that, its ONNX model."""
    from servelab.bench.peers.triton import TritonPeer

    peer = TritonPeer(
        settings.peers_dir, progress=progress, protocol=choice.protocol, instances=settings.triton_instances,
        max_queue_delay_us=settings.triton_max_queue_delay_us, intra_op_threads=max(settings.intra_op_threads, 1),
    )  # fmt: skip
    runtime = "python" if "python" in family.members else "onnxruntime"
    return peer, family.artefacts(runtime)


def _describe(choice: TargetChoice, settings: PeerSettings) -> dict[str, Any]:
    if choice.name == "torchserve":
        return {"batch_size": settings.torchserve_batch_size, "max_batch_delay_ms": settings.torchserve_max_batch_delay_ms,
                "workers": settings.torchserve_workers, "payload": "JSON"}  # fmt: skip
    if choice.name == "mlserver":
        return {"max_batch_size": settings.mlserver_max_batch_size, "max_batch_time_s": settings.mlserver_max_batch_time_s,
                "parallel_workers": settings.mlserver_parallel_workers, "payload": "raw" if choice.protocol == "grpc" else "JSON"}  # fmt: skip
    if choice.name == "fastapi-ort":
        return {"payload": "JSON", "batching": "none"}
    if choice.name == "triton":
        return {"payload": "binary", "instances": settings.triton_instances}
    if choice.name.startswith("servelab-"):
        return {"payload": "binary", "batching": "as config.pbtxt says"}
    return {}


@contextlib.contextmanager
def open_target(
    choice: TargetChoice, family: Family, settings: PeerSettings, model: str, progress: Callable[[str], None]
) -> Iterator[OpenTarget]:
    """Start (and afterwards stop) what ``choice`` names; yield it as something the bench can measure."""
    desc = {"target": choice.label, "protocol": choice.protocol, **_describe(choice, settings)}
    if choice.name == "inprocess-ort":
        arts = family.artefacts("onnxruntime")
        if arts.onnx is None:
            raise InvalidArgument(f"inprocess-ort needs model.onnx for {family.base!r}")
        shapes = {t.name: t.dims for t in arts.inputs}
        yield OpenTarget(
            TargetSpec("inprocess", str(arts.onnx)), family.base, shapes, {**desc, "protocol": "in-process"}
        )
        return
    if choice.name == "oip":
        assert choice.url is not None
        kind, url = (
            ("oip-grpc", choice.url.removeprefix("grpc://"))
            if choice.protocol == "grpc"
            else ("oip-http", choice.url)
        )
        yield OpenTarget(TargetSpec(kind, url), model, {}, desc)  # type: ignore[arg-type]
        return
    peer, arts = _make_peer(choice, family, settings, progress)
    with peer:
        peer.install()
        peer.prepare(arts)
        progress(f"{choice.label}: starting")
        ep: Endpoint = peer.start()
        progress(f"{choice.label}: ready at {ep.url} (pid {ep.pid})")
        inputs = arts.inputs if arts is not None else family.member(_SERVELAB_RUNTIMES[choice.name]).inputs
        spec = TargetSpec(ep.kind, ep.url, binary=ep.binary, server_pid=ep.pid)  # type: ignore[arg-type]
        yield OpenTarget(
            spec, ep.model, {t.name: t.dims for t in inputs}, {**desc, "url": ep.url, **ep.extra}
        )

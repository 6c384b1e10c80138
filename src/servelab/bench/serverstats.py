"""Server-side view of a run: the statistics extension (Triton's JSON format) and the server's RSS.

``StatsReader.snapshot()`` returns cumulative ``{stage: (count, ns)}``; the difference of two snapshots
divided by the successful request count gives the per-request queue / compute times of a window.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import psutil

from servelab.bench.specs import TargetSpec

__all__ = ["STAGES", "StatsReader", "rss_bytes", "split_per_request_us"]

STAGES: tuple[str, ...] = ("success", "queue", "compute_input", "compute_infer", "compute_output")
Snapshot = dict[str, tuple[int, int]]


def rss_bytes(pid: int) -> int | None:
    """Resident memory of ``pid`` plus its children (worker processes); None when it is gone."""
    try:
        proc = psutil.Process(pid)
        total = proc.memory_info().rss
        for child in proc.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                continue
        return total
    except psutil.Error:
        return None


def split_per_request_us(before: Snapshot, after: Snapshot) -> dict[str, float] | None:
    """Per-request microseconds spent in each stage between two snapshots (None if no success)."""
    n = after["success"][0] - before["success"][0]
    if n <= 0:
        return None
    out = {f"{s}_us": (after[s][1] - before[s][1]) / n / 1e3 for s in STAGES[1:]}
    out["requests"] = float(n)
    return out


def _parse_http_stats(doc: dict[str, Any], model: str, version: str) -> Snapshot:
    entries = [e for e in doc.get("model_stats", []) if e.get("name") == model]
    if version:
        entries = [e for e in entries if str(e.get("version", "")) == version]
    snap: Snapshot = {s: (0, 0) for s in STAGES}
    for e in entries:
        stats = e.get("inference_stats", {})
        for s in STAGES:
            d = stats.get(s, {})
            c, ns = snap[s]
            snap[s] = (c + int(d.get("count", 0)), ns + int(d.get("ns", 0)))
    return snap


class StatsReader:
    """Reads the statistics extension of an OIP server over HTTP or gRPC, if it offers one."""

    def __init__(self, target: TargetSpec, model: str) -> None:
        self.target = target
        self.model = model
        self.available = False
        self._session: aiohttp.ClientSession | None = None
        self._stub: Any = None
        self._channel: Any = None

    async def open(self) -> bool:
        """Probe server metadata for the ``statistics`` extension; returns whether it is there."""
        try:
            if self.target.kind == "oip-http":
                self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5.0))
                async with self._session.get(f"{self.target.http_base()}/v2") as resp:
                    meta = await resp.json(content_type=None) if resp.status == 200 else {}
                self.available = "statistics" in meta.get("extensions", [])
            elif self.target.kind == "oip-grpc":
                import grpc.aio

                from servelab.protocol import grpc_service_pb2, grpc_service_pb2_grpc

                self._channel = grpc.aio.insecure_channel(self.target.grpc_address())
                self._stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
                meta = await self._stub.ServerMetadata(grpc_service_pb2.ServerMetadataRequest(), timeout=5.0)
                self.available = "statistics" in list(meta.extensions)
        except Exception:
            self.available = False
        return self.available

    async def snapshot(self) -> Snapshot | None:
        if not self.available:
            return None
        try:
            if self._session is not None:
                version = f"/versions/{self.target.model_version}" if self.target.model_version else ""
                url = f"{self.target.http_base()}/v2/models/{self.model}{version}/stats"
                async with self._session.get(url) as resp:
                    if resp.status != 200:
                        return None
                    return _parse_http_stats(
                        await resp.json(content_type=None), self.model, self.target.model_version
                    )
            return await self._grpc_snapshot()
        except Exception:
            return None

    async def _grpc_snapshot(self) -> Snapshot:
        from google.protobuf.json_format import MessageToDict

        from servelab.protocol import grpc_service_pb2

        req = grpc_service_pb2.ModelStatisticsRequest(name=self.model, version=self.target.model_version)
        resp = await self._stub.ModelStatistics(req, timeout=5.0)
        doc = MessageToDict(resp, preserving_proto_field_name=True)
        return _parse_http_stats(doc, self.model, self.target.model_version)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._channel is not None:
            await self._channel.close()

"""GPU utilisation and memory through NVML (Triton's ``nv_gpu_*`` names); absent GPU = no samples.

``pynvml`` (pip ``nvidia-ml-py``) is imported only when the collector is built, and every NVML failure
(no library, no driver, no device) leaves the collector empty instead of failing the scrape.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["NVML_METRICS", "NvmlCollector"]

#: The families this collector writes when a GPU is present.
NVML_METRICS = ("nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes")

log = logging.getLogger("servelab.metrics")


class NvmlCollector(Collector):
    """Per-GPU utilisation (0..1), total and used memory (bytes), labelled by ``gpu_uuid``."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: list[tuple[str, Any]] = []
        try:
            import pynvml  # type: ignore[import-not-found]

            pynvml.nvmlInit()
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                uuid = pynvml.nvmlDeviceGetUUID(handle)
                self._handles.append((uuid.decode() if isinstance(uuid, bytes) else str(uuid), handle))
            self._nvml = pynvml
        except Exception as exc:  # ImportError, NVMLError (no driver / no device)
            log.debug("GPU metrics off: %s", exc)
            self._handles = []

    @property
    def available(self) -> bool:
        return bool(self._handles)

    def collect(self) -> Iterator[Metric]:
        if not self._handles:
            return
        util = GaugeMetricFamily("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", labels=["gpu_uuid"])
        total = GaugeMetricFamily("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", labels=["gpu_uuid"])
        used = GaugeMetricFamily("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", labels=["gpu_uuid"])
        nvml = self._nvml
        for uuid, handle in self._handles:
            try:
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception as exc:  # a GPU that fell off the bus must not fail the scrape
                log.debug("NVML read failed for %s: %s", uuid, exc)
                continue
            util.add_metric([uuid], rates.gpu / 100.0)
            total.add_metric([uuid], float(memory.total))
            used.add_metric([uuid], float(memory.used))
        yield util
        yield total
        yield used

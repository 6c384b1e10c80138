"""What every request sender is: the :class:`Client` interface and the :class:`RequestFailed` it raises.

Bodies are encoded once in ``prepare``; ``send`` only ships bytes and raises ``RequestFailed`` with a
short error kind (``http_503``, ``grpc_UNAVAILABLE``, ``timeout``, ``connection``) that the statistics
count. The senders (:mod:`servelab.bench.clients`, ``_grpc_client``, ``_inprocess_client``) build on it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from servelab.bench.inputs import Request
from servelab.bench.specs import TargetSpec

__all__ = ["Client", "RequestFailed"]


class RequestFailed(Exception):
    """One request failed; ``kind`` is the error bucket it is counted in."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


class Client(ABC):
    """Sends pre-encoded requests to one model on one target."""

    def __init__(self, target: TargetSpec, model: str, max_inflight: int) -> None:
        self.target = target
        self.model = model
        self.max_inflight = max_inflight

    @abstractmethod
    def prepare(self, requests: list[Request]) -> None:
        """Encode the requests to cycle through (called once, before ``start``)."""

    @abstractmethod
    async def start(self) -> None:
        """Open connections / sessions inside the running event loop."""

    @abstractmethod
    async def send(self, index: int) -> None:
        """Send prepared request ``index`` and wait for its full response."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections."""

    @property
    @abstractmethod
    def n_prepared(self) -> int:
        """How many distinct requests were prepared."""

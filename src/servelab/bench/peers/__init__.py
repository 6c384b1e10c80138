"""Peer servers that ``servelab compare`` starts and measures: one module per peer.

``fastapi_ort`` (FastAPI + onnxruntime baseline), ``torchserve`` (TorchServe 0.12 in its own venv),
``mlserver`` (Seldon MLServer 1.7.1 in its own venv), ``triton`` (Triton 2.51's ``tritonserver``, python
backend, unpacked under ``.peers/triton``), ``servelab_target`` (``servelab serve`` itself).
Each module is imported by name when needed; ``base`` holds the shared ``Peer`` interface.
"""

from __future__ import annotations

from servelab.bench.peers.base import Endpoint, ModelArtefacts, Peer, TensorInfo

__all__ = ["Endpoint", "ModelArtefacts", "Peer", "TensorInfo"]

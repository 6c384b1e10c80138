"""Triton's classification extension: top-k classes of an output as BYTES "value:index[:label]".

The labels come with the loaded model version (read from ``label_filename`` inside the model's
folder when the model loads, see :func:`servelab.repository.repository.read_labels`), so a reload
reads them again and an unload drops them.
"""

from __future__ import annotations

import numpy as np

from servelab.errors import InvalidArgument

__all__ = ["classify"]


def classify(array: np.ndarray, count: int, batched: bool, labels: list[str], name: str) -> np.ndarray:
    """Top ``count`` entries per row: per batch item when the model batches, per leading-dimension row for a
    non-batched output of rank >= 2 (e.g. logits [nodes, classes]), else of the whole 1-D tensor."""
    if array.dtype.kind not in "biuf":
        raise InvalidArgument(f"output '{name}' has datatype {array.dtype}; classification needs a numeric output")
    per_row = batched or array.ndim >= 2
    rows = array.reshape(array.shape[0], -1) if per_row else array.reshape(1, -1)
    k = min(count, rows.shape[1])
    order = np.argsort(-rows.astype(np.float64), axis=1, kind="stable")[:, :k]
    out = np.empty((rows.shape[0], k), dtype=object)
    for r in range(rows.shape[0]):
        for j, idx in enumerate(order[r]):
            value = rows[r, idx]
            text = f"{float(value):f}:{idx}"
            if idx < len(labels):
                text += f":{labels[idx]}"
            out[r, j] = text.encode()
    return out if per_row else out.reshape(k)

"""TF Serving's ``--enable_batching`` / ``--batching_parameters_file`` -> servelab's dynamic batching.

What maps (per batching signature model; TF Serving batches every model with the same parameters):

====================================  ==================================================================
TF Serving (BatchingParameters)       servelab / Triton config.pbtxt
====================================  ==================================================================
``max_batch_size`` (default 1000)     ``max_batch_size`` (requests with more rows are refused, as there)
``batch_timeout_micros`` (0)          ``dynamic_batching.max_queue_delay_microseconds``
``allowed_batch_sizes``               ``dynamic_batching.preferred_batch_size`` (servelab does not pad a
                                      batch up to one of them: they are sizes to wait for)
``max_enqueued_batches`` (10)         ``default_queue_policy.max_queue_size`` = batches x max_batch_size
                                      (a bound in requests, not rows: an approximation)
====================================  ==================================================================

Not mapped, and said so in the server log and the import report: ``num_batch_threads`` (servelab
runs one instance; raise ``instance_group`` count in an imported config for parallel batches),
``thread_pool_name`` (no meaning here), ``pad_variable_length_inputs`` (servelab never pads), and any
field of a newer TF Serving that this schema does not know.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format

from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc
from servelab.protocol import tfserving as tfs

__all__ = ["TF_SERVING_DEFAULTS", "BatchingPlan", "read_batching_parameters"]

_FIELD = re.compile(r"^\s*([A-Za-z_]\w*)\s*[:{]", re.MULTILINE)
_NOT_MAPPED = {
    "num_batch_threads": "num_batch_threads is not mapped: servelab runs one instance per model "
    "(raise instance_group count in a config.pbtxt for batches in parallel)",
    "thread_pool_name": "thread_pool_name has no meaning in servelab and is ignored",
}


@dataclass(frozen=True)
class BatchingPlan:
    """Dynamic batching for every batching model of a TF Serving config, and what did not map."""

    max_batch_size: int = 1000
    max_queue_delay_us: int = 0
    preferred: tuple[int, ...] = ()
    max_enqueued_batches: int = 10
    notes: tuple[str, ...] = field(default_factory=tuple)

    def apply(self, config: mc.ModelConfig) -> None:
        """Turn dynamic batching on in ``config`` (a model whose tensors all batch on their first axis)."""
        config.max_batch_size = self.max_batch_size
        batching = config.dynamic_batching
        batching.max_queue_delay_microseconds = self.max_queue_delay_us
        del batching.preferred_batch_size[:]
        batching.preferred_batch_size.extend(self.preferred)
        batching.default_queue_policy.max_queue_size = self.max_enqueued_batches * self.max_batch_size


#: TF Serving's batching with ``--enable_batching`` and no parameters file (BasicBatchScheduler's defaults)
TF_SERVING_DEFAULTS = BatchingPlan()


def read_batching_parameters(path: Path) -> BatchingPlan:
    """Parse a batching parameters file; fields servelab cannot honour become :attr:`BatchingPlan.notes`."""
    where = f"batching parameters file {path.name}"
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidArgument(f"{where}: cannot be read ({exc.strerror})") from None
    message = tfs.session_bundle_config_pb2.BatchingParameters()
    try:
        text_format.Parse(text, message, allow_unknown_field=True)
    except text_format.ParseError as exc:
        raise InvalidArgument(
            f"{where}: {exc} (expected TF Serving's BatchingParameters text format, e.g. "
            "max_batch_size { value: 32 } batch_timeout_micros { value: 1000 })"
        ) from None
    known = {f.name for f in message.DESCRIPTOR.fields}
    notes = [f"{where}: {name} is not known to servelab and is ignored"
             for name in dict.fromkeys(_FIELD.findall(text)) if name not in known]
    return _plan(message, where, notes)


def _plan(message: tfs.session_bundle_config_pb2.BatchingParameters, where: str, notes: list[str]) -> BatchingPlan:
    default = TF_SERVING_DEFAULTS
    max_batch = message.max_batch_size.value if message.HasField("max_batch_size") else default.max_batch_size
    delay = message.batch_timeout_micros.value if message.HasField("batch_timeout_micros") else 0
    enqueued = (message.max_enqueued_batches.value if message.HasField("max_enqueued_batches")
                else default.max_enqueued_batches)
    if max_batch < 1 or delay < 0 or enqueued < 1:
        raise InvalidArgument(
            f"{where}: max_batch_size ({max_batch}) and max_enqueued_batches ({enqueued}) must be >= 1, "
            f"batch_timeout_micros ({delay}) >= 0"
        )
    allowed = list(message.allowed_batch_sizes)
    if allowed and (allowed != sorted(set(allowed)) or allowed[-1] != max_batch or allowed[0] < 1):
        raise InvalidArgument(
            f"{where}: allowed_batch_sizes {allowed} must increase and end with max_batch_size ({max_batch}), "
            "as TF Serving requires"
        )
    for name, note in _NOT_MAPPED.items():
        if message.HasField(name):
            notes.append(f"{where}: {note}")
    if message.pad_variable_length_inputs:
        notes.append(f"{where}: pad_variable_length_inputs is not supported: servelab batches only requests "
                     "whose inner dimensions agree")
    return BatchingPlan(max_batch, delay, tuple(allowed), enqueued, tuple(notes))

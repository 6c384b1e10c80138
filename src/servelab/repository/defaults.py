"""The defaults Triton fills into every loaded config, so that the config a client reads back is Triton's.

Triton normalises a config after auto-complete (and also with auto-complete off): a model without
``instance_group`` gets one group named after the model (``<model>_<i>`` for unnamed given groups), count
1, kind CPU on a host without GPUs; ``version_policy`` becomes ``latest { num_versions: 1 }``;
``optimization`` gets pinned input/output memory on; a dynamic batcher without preferred sizes prefers
``max_batch_size``; a sequence batcher's idle limit becomes 1 s. Each rule below changes nothing about
how servelab runs the model (each is the value the schedulers already assume when the field is absent);
they make ``GET /v2/models/<m>/config`` and ``ModelConfig`` over gRPC say what is in effect.

Checked against Triton 2.51 (python backend) on this machine: the same config.pbtxt files read back the
same JSON from both servers (tests/integration/test_config_json.py).
"""

from __future__ import annotations

from servelab.protocol import model_config_pb2 as mc

__all__ = ["DEFAULT_SEQUENCE_IDLE_US", "fill_defaults"]

#: Triton's ``max_sequence_idle_microseconds`` when the config gives 0 (or nothing)
DEFAULT_SEQUENCE_IDLE_US = 1_000_000


def fill_defaults(config: mc.ModelConfig) -> None:
    """Fill Triton's defaults into ``config`` in place (after auto-complete, before the load)."""
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if config.platform != "ensemble" and config.backend != "ensemble":
        _instance_groups(config)
    for pinned in ("input_pinned_memory", "output_pinned_memory"):
        if not config.optimization.HasField(pinned):  # ``enable: false`` given stays false
            getattr(config.optimization, pinned).enable = True
    db = config.dynamic_batching
    if config.HasField("dynamic_batching") and config.max_batch_size > 0 and not db.preferred_batch_size:
        db.preferred_batch_size.append(config.max_batch_size)
    if config.HasField("sequence_batching") and not config.sequence_batching.max_sequence_idle_microseconds:
        config.sequence_batching.max_sequence_idle_microseconds = DEFAULT_SEQUENCE_IDLE_US


def _instance_groups(config: mc.ModelConfig) -> None:
    if not config.instance_group:
        config.instance_group.add(name=config.name, kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
        return
    for i, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{i}"
        if group.count < 1:
            group.count = 1
        if group.kind == mc.ModelInstanceGroup.KIND_AUTO:
            group.kind = mc.ModelInstanceGroup.KIND_CPU

"""The GraphSAGE backends' typed parameters: read what the export writes, refuse bad values naming the key,
and are found by backend name (so ``servelab select`` writes them through the same schema)."""

from __future__ import annotations

import pytest

from servelab.advisor.configs import threads_parameters
from servelab.backends import backend_parameters
from servelab.backends.parameters import OnnxRuntimeParameters
from servelab.errors import InvalidArgument
from servelab.graph import configs
from servelab.graph.parameters import FusedSageParameters, GraphSamplerParameters
from servelab.protocol import model_config_pb2 as mc


def _config(**params: str) -> mc.ModelConfig:
    cfg = mc.ModelConfig(name="m", backend="graphsage")
    for key, value in params.items():
        cfg.parameters[key].string_value = value
    return cfg


def test_the_export_writes_what_the_backends_read() -> None:
    sampler = configs.sampler_config("_graphs/g", 8, (10, 10))
    assert dict((k, v.string_value) for k, v in sampler.parameters.items()) == {"graph_dir": "_graphs/g", "fanouts": "10,10"}
    read = GraphSamplerParameters.read(sampler)
    assert (read.graph_dir, read.fanouts, read.sampler, read.seed, read.threads) == ("_graphs/g", (10, 10), "numba", 0, None)
    fused = FusedSageParameters.read(configs.fused_config("openvino", "_graphs/g", 8, 16, 3, (5, 4)))
    assert (fused.runtime, fused.fanouts, fused.layers_threads, fused.parallel_from) == ("openvino", (5, 4), 1, 64)
    layers = configs.layers_config("onnxruntime", 8, 16, 3, (5, 4))
    assert OnnxRuntimeParameters.read(layers).allow_spinning is False


def test_the_fused_models_instance_count_is_written_as_an_instance_group() -> None:
    two = configs.fused_config("onnxruntime", "_graphs/g", 8, 16, 3, (5, 4), instances=2)
    assert [(g.count, g.kind) for g in two.instance_group] == [(2, mc.ModelInstanceGroup.KIND_CPU)]
    assert not configs.fused_config("onnxruntime", "_graphs/g", 8, 16, 3, (5, 4), instances=None).instance_group
    with pytest.raises(ValueError, match="instances must be at least 1, got 0"):
        configs.fused_config("onnxruntime", "_graphs/g", 8, 16, 3, (5, 4), instances=0)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("fanouts", "10", r"'fanouts' must be 'hop1,hop2' \(e.g. '10,10'\), got '10'"),
        ("fanouts", "0,3", r"'fanouts' must be 'hop1,hop2' with two positive integers"),
        ("sampler", "dgl", r"'sampler' must be 'numba' or 'python', got 'dgl'"),
        ("runtime", "tvm", r"'runtime' must be 'onnxruntime' or 'openvino', got 'tvm'"),
        ("layers_threads", "0", r"graphsage parameter 'layers_threads' must be greater than or equal to 1"),
        ("seed", "x", r"'seed' must be a valid integer"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        FusedSageParameters.read(_config(**{key: value}))


def test_plugin_schemas_are_found_by_backend_name_and_take_the_threads() -> None:
    assert backend_parameters("graphsage") is FusedSageParameters
    assert backend_parameters("graphsage_sampler") is GraphSamplerParameters
    assert backend_parameters("onnxruntime") is OnnxRuntimeParameters
    cfg = _config(graph_dir="_graphs/g", runtime="Openvino")
    threads_parameters(cfg, 2).write(cfg)
    assert cfg.parameters["layers_threads"].string_value == "2" and cfg.parameters["runtime"].string_value == "openvino"
    assert FusedSageParameters.read(cfg).layers_threads == 2
    with pytest.raises(InvalidArgument, match="declares no parameter schema"):
        backend_parameters("ensemble")  # python has one now (execute_never_blocks)

"""SageLayers: parity with torch_geometric's SAGEConv, padding semantics, exports within 1e-5."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.nn import SAGEConv

from servelab.graph.export import export_artifact
from servelab.graph.model import SageConfig, SageLayer, SageLayers, load_model, save_model
from servelab.graph.parity import ParityError, check_parity, example_block
from servelab.graph.sessions import eager_runner, load_runner

F, C, H = 12, 5, 16
FANOUTS = (4, 3)


def _model(aggregator: str, seed: int = 0) -> SageLayers:
    torch.manual_seed(seed)
    return SageLayers(SageConfig(F, C, hidden=H, aggregator=aggregator, fanouts=FANOUTS)).eval()


def _edges(nbr: np.ndarray, num_src: int) -> torch.Tensor:
    """edge_index (source -> target) of the real, non-padding entries of a neighbour matrix."""
    rows, cols = np.nonzero(nbr < num_src)
    return torch.from_numpy(np.stack([nbr[rows, cols], rows]).astype(np.int64))


def _pyg_conv(layer: SageLayer, aggregator: str) -> SAGEConv:
    in_f, out_f = layer.lin_l.in_features, layer.lin_l.out_features
    if aggregator == "pool":
        conv = SAGEConv(in_f, out_f, aggr="max", project=True)
    else:
        conv = SAGEConv(in_f, out_f, aggr="mean")
    conv.load_state_dict(layer.state_dict())
    return conv.eval()


@pytest.mark.parametrize("aggregator", ["mean", "pool"])
def test_matches_torch_geometric_sageconv(aggregator: str) -> None:
    model = _model(aggregator)
    x, nbr1, nbr2 = example_block(F, FANOUTS, batch=5, hop1=11, hop2=30, seed=3)
    n_all, n1, b = len(x), len(nbr1), len(nbr2)
    conv1, conv2 = _pyg_conv(model.conv1, aggregator), _pyg_conv(model.conv2, aggregator)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        h1 = torch.relu(conv1((xt, xt[:n1]), _edges(nbr1, n_all), size=(n_all, n1)))
        emb = conv2((h1, h1[:b]), _edges(nbr2, n1), size=(n1, b))
        logits = model.head(torch.relu(emb))
        got_logits, got_emb = model(xt, torch.from_numpy(nbr1), torch.from_numpy(nbr2))
    assert torch.allclose(got_emb, emb, atol=1e-5, rtol=0)
    assert torch.allclose(got_logits, logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("aggregator", ["mean", "pool"])
def test_padding_position_and_width_do_not_matter(aggregator: str) -> None:
    model = _model(aggregator)
    x, nbr1, nbr2 = example_block(F, FANOUTS, batch=3, seed=1)
    n_all, n1 = len(x), len(nbr1)
    # Shuffle each row's entries (padding moves around) and add one more all-padding column.
    rng = np.random.default_rng(0)
    shuffled1 = np.take_along_axis(nbr1, rng.permuted(np.tile(np.arange(nbr1.shape[1]), (n1, 1)), axis=1), 1)
    wider1 = np.concatenate([shuffled1, np.full((n1, 1), n_all)], axis=1)
    wider2 = np.concatenate([nbr2[:, ::-1], np.full((len(nbr2), 2), n1)], axis=1)
    run = eager_runner(model)
    base, other = run(x, nbr1, nbr2), run(x, wider1, np.ascontiguousarray(wider2))
    np.testing.assert_allclose(other[0], base[0], atol=1e-6)
    np.testing.assert_allclose(other[1], base[1], atol=1e-6)


def test_mean_divides_by_real_neighbour_count() -> None:
    layer = SageLayer(3, 2).eval()
    src = torch.tensor([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0], [100.0, 100.0, 100.0]])
    nbr = torch.tensor([[1, 3, 3], [0, 1, 3]])  # 3 == len(src) is padding
    with torch.no_grad():
        got = layer(src, nbr)
        want_agg = torch.stack([src[1], (src[0] + src[1]) / 2])
        want = layer.lin_l(want_agg) + layer.lin_r(src[:2])
    assert torch.allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("aggregator", ["mean", "pool"])
def test_degree_zero_node_uses_only_itself(aggregator: str) -> None:
    layer = SageLayer(4, 3, aggregator).eval()
    src = torch.randn(5, 4)
    nbr = torch.full((2, 3), 5)  # no neighbours at all
    with torch.no_grad():
        got = layer(src, nbr)
        want = layer.lin_l.bias + layer.lin_r(src[:2])
    assert torch.allclose(got, want, atol=1e-6)


def test_single_isolated_seed_block() -> None:
    model = _model("mean")
    x = np.ones((1, F), np.float32)
    logits, emb = eager_runner(model)(x, np.full((1, FANOUTS[1]), 1), np.full((1, FANOUTS[0]), 1))
    assert logits.shape == (1, C) and emb.shape == (1, H)
    assert np.isfinite(logits).all()


def test_bad_config_is_rejected_with_expected_values() -> None:
    with pytest.raises(ValueError, match="aggregator must be one of"):
        SageConfig(F, C, aggregator="lstm")
    with pytest.raises(ValueError, match="fanouts"):
        SageConfig(F, C, fanouts=(10, 0))


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    model = _model("pool", seed=4)
    save_model(model, tmp_path, extra={"accuracy": 0.5})
    loaded, meta = load_model(tmp_path)
    assert loaded.config == model.config and meta["accuracy"] == 0.5
    block = example_block(F, FANOUTS)
    np.testing.assert_array_equal(eager_runner(loaded)(*block)[0], eager_runner(model)(*block)[0])
    with pytest.raises(FileNotFoundError, match=r"meta\.json"):
        load_model(tmp_path / "missing")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, SageLayers], Path]:
    root = tmp_path_factory.mktemp("exports")
    models = {"mean": _model("mean", 1), "pool": _model("pool", 2)}
    for agg, model in models.items():
        for runtime in ("onnxruntime", "openvino", "torch"):
            export_artifact(model, runtime, root / agg / runtime)
    return models, root


PARITY_BLOCKS = [
    example_block(F, FANOUTS, batch=1, hop1=0, hop2=0, seed=5),
    example_block(F, FANOUTS, batch=1, seed=6),
    example_block(F, FANOUTS, batch=32, hop1=200, hop2=900, seed=7),
]


@pytest.mark.parametrize("aggregator", ["mean", "pool"])
@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino", "torch"])
def test_export_parity(exported: tuple[dict[str, SageLayers], Path], aggregator: str, runtime: str) -> None:
    models, root = exported
    files = {"onnxruntime": "model.onnx", "openvino": "model.xml", "torch": "model.pt"}
    runner = load_runner(runtime, root / aggregator / runtime / files[runtime])
    assert check_parity(models[aggregator], runner, PARITY_BLOCKS, atol=1e-5) <= 1e-5


def test_parity_check_catches_a_different_model(exported: tuple[dict[str, SageLayers], Path]) -> None:
    _, root = exported
    runner = load_runner("onnxruntime", root / "mean" / "onnxruntime" / "model.onnx")
    with pytest.raises(ParityError, match="differs from eager"):
        check_parity(_model("mean", seed=99), runner, PARITY_BLOCKS[1:2])


def test_unknown_runtime_names_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="onnxruntime"):
        export_artifact(_model("mean"), "tensorrt", tmp_path)

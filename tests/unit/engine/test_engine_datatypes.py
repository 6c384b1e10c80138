"""Every Open Inference Protocol datatype round-trips through the Engine (BYTES via the Python backend)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.data import sample
from harness.repository import build_echo_models, echo_name
from servelab import Engine
from servelab.types import DataType


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with Engine(build_echo_models(tmp_path_factory.mktemp("echo"))) as eng:
        yield eng


@pytest.mark.parametrize("dt", list(DataType), ids=lambda d: d.value)
def test_round_trip(engine: Engine, dt: DataType) -> None:
    name = echo_name(dt.value)
    x = sample(dt.value, any_bytes=True)  # the Python backend keeps any bytes
    out = engine.infer(name, {"INPUT": x})["OUTPUT"]
    assert out.dtype == x.dtype
    assert out.shape == x.shape
    assert out.tolist() == x.tolist()
    assert engine.get_model_metadata(name)["inputs"][0]["datatype"] == dt.value

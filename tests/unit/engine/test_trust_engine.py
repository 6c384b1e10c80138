"""The trust boundary in process: labels go with the model, uploads live as long as the model serves
from them, custom backends need the operator's permission, and failed loads name no server path."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness.ident import ident_model, ident_onnx_bytes, ident_override
from harness.models import unary_onnx
from servelab import Engine
from servelab.errors import InvalidArgument, NotFound, ServelabError
from servelab.types import InferRequest, RequestedOutput, Tensor

X = np.array([[0.1, 0.9, 0.3, 0.2]], np.float32)


def _override(**fields: object) -> str:
    """The JSON config of a load request: :func:`harness.ident.ident_override` of ``fields``."""
    return json.dumps(ident_override(**fields))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    ident_model(root)
    return root


def _top_label(engine: Engine, name: str = "ident") -> str:
    request = InferRequest(name, [Tensor.from_numpy("x", X)], outputs=[RequestedOutput("y", class_count=1)])
    [out] = engine.dataplane.infer(request).outputs
    return str(out.data.reshape(-1)[0].decode())


def test_labels_are_read_again_when_the_model_reloads(repo: Path) -> None:
    with Engine(repo) as engine:
        assert _top_label(engine) == "0.900000:1:b"
        (repo / "ident" / "labels.txt").write_text("cat\ndog\nbird\nfish\n")
        assert _top_label(engine) == "0.900000:1:b"  # the loaded version keeps the labels it loaded with
        engine.load_model("ident")
        assert _top_label(engine) == "0.900000:1:dog"
        (repo / "ident" / "labels.txt").write_text("w\nx\ny\nz\n")
        engine.unload_model("ident")
        engine.load_model("ident")
        assert _top_label(engine) == "0.900000:1:x"


def test_a_label_file_outside_the_model_folder_fails_the_load(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("root:x:0:0\n")
    bad = {"label_filename": "../../secret.txt", "name": "y", "data_type": "TYPE_FP32", "dims": [4]}
    with Engine(repo, load_models=[]) as engine:
        with pytest.raises(InvalidArgument, match="output 'y' label_filename '../../secret.txt' leads outside"):
            engine.load_model("ident", _override(output=[bad]))
        bad["label_filename"] = str(tmp_path / "secret.txt")
        with pytest.raises(InvalidArgument, match="output 'y' label_filename .* is not allowed"):
            engine.load_model("ident", _override(output=[bad]))
        assert not engine.is_model_ready("ident")


def test_default_model_filename_outside_the_model_folder_fails_the_load(repo: Path, tmp_path: Path) -> None:
    unary_onnx(tmp_path / "elsewhere" / "model.onnx", io=("x", "y"))
    with Engine(repo, load_models=[]) as engine:
        for name in ("../../elsewhere/model.onnx", str(tmp_path / "elsewhere" / "model.onnx")):
            with pytest.raises(InvalidArgument, match="default_model_filename") as info:
                engine.load_model("ident", _override(default_model_filename=name))
            assert str(repo) not in info.value.message  # names what was sent, not the server's folders
        (repo / "ident" / "1" / "linked.onnx").symlink_to(tmp_path / "elsewhere" / "model.onnx")
        with pytest.raises(InvalidArgument, match="default_model_filename 'linked.onnx' leads outside"):
            engine.load_model("ident", _override(default_model_filename="linked.onnx"))


def test_bad_model_names_are_refused_on_load_unload_and_infer(repo: Path) -> None:
    with Engine(repo, load_models=[]) as engine:
        for name in ("..", ".", "ident/../ident", "a\0b", ""):
            with pytest.raises(InvalidArgument, match="must not be empty or '.'"):
                engine.load_model(name)
            with pytest.raises(InvalidArgument, match="must not be empty or '.'"):
                engine.unload_model(name)
            with pytest.raises(InvalidArgument, match="must not be empty or '.'"):
                engine.infer(name, {"x": X})
        engine.load_model("ident")
        with pytest.raises(InvalidArgument, match="expected a version number"):
            engine.infer("ident", {"x": X}, version="../1")
        with pytest.raises(NotFound, match="version 7 is not found"):
            engine.infer("ident", {"x": X}, version=7)


def test_data_folders_are_not_models(repo: Path) -> None:
    unary_onnx(repo / "_data" / "1" / "model.onnx", io=("x", "y"))
    with Engine(repo, load_models=[]) as engine, pytest.raises(NotFound, match="hold data"):
        engine.load_model("_data")


def test_custom_backends_need_the_operators_permission(repo: Path, tmp_path: Path) -> None:
    custom = _override(backend="servelab.backends.onnxruntime:OnnxRuntimeBackend")
    with Engine(repo, load_models=[], allow_custom_backends=False) as engine, pytest.raises(
        InvalidArgument, match="--allow-custom-backends"
    ):
        engine.load_model("ident", custom)
    with Engine(repo, load_models=[]) as engine:  # the embedding program allows them by default
        engine.load_model("ident", custom)
        assert engine.infer("ident", {"x": X})["y"].tolist() == X.tolist()


def _upload_folder(caplog: pytest.LogCaptureFixture) -> Path:
    found = re.findall(r"uploaded file\(s\) written to (\S+)", caplog.text)
    assert found, caplog.text
    return Path(found[-1])


def test_uploaded_files_form_the_model_folder_while_it_serves(
    repo: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "servelab.repository")
    files = {"1/model.onnx": ident_onnx_bytes(), "labels.txt": b"up0\nup1\nup2\nup3\n"}
    labelled = _override(output=[{"name": "y", "data_type": "TYPE_FP32", "dims": [4], "label_filename": "labels.txt"}])
    with Engine(repo, load_models=[]) as engine:
        engine.dataplane.load_model("ident", labelled, files)
        first = _upload_folder(caplog)
        assert first.is_dir() and _top_label(engine) == "0.900000:1:up1"
        engine.dataplane.load_model("ident", labelled, files)  # a new upload replaces the old one
        second = _upload_folder(caplog)
        assert second != first and second.is_dir() and not first.exists()
        engine.load_model("ident")  # from the repository again: the upload goes
        assert not second.exists() and _top_label(engine) == "0.900000:1:b"
        engine.dataplane.load_model("ident", labelled, files)
        third = _upload_folder(caplog)
        engine.unload_model("ident")
        assert not third.exists()


def test_a_failed_upload_leaves_no_folder_and_keeps_the_old_version(
    repo: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "servelab.repository")
    with Engine(repo) as engine:
        with pytest.raises(ServelabError):
            engine.dataplane.load_model("ident", _override(), {"1/model.onnx": b"not onnx"})
        assert not _upload_folder(caplog).exists()
        assert _top_label(engine) == "0.900000:1:b"  # still serving from the repository


@pytest.mark.parametrize(
    "key",
    ["../planted.txt", "1/../../planted.txt", "/tmp/planted.txt", "../../../../../../../../{outside}/planted.txt", "a\0b"],
)
def test_upload_paths_leaving_the_model_folder_are_refused(repo: Path, tmp_path: Path, key: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    key = key.replace("{outside}", str(outside).lstrip("/"))
    files = {"1/model.onnx": ident_onnx_bytes(), key: b"planted"}
    with Engine(repo, load_models=[]) as engine:
        with pytest.raises(InvalidArgument, match=r"parameter 'file:.*' (leads outside|is not allowed)") as info:
            engine.dataplane.load_model("ident", _override(), files)
        assert "/tmp/servelab-upload" not in info.value.message
    assert not (outside / "planted.txt").exists() and not Path("/tmp/planted.txt").exists()


def test_uploads_need_a_config_and_may_not_carry_code(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    code = f"open({str(marker)!r}, 'w').write('ran')\nclass TritonPythonModel:\n    pass\n".encode()
    python = _override(backend="python")
    with Engine(repo, load_models=[]) as engine:
        with pytest.raises(InvalidArgument, match="needs parameters.config"):
            engine.dataplane.load_model("ident", None, {"1/model.onnx": ident_onnx_bytes()})
        with pytest.raises(InvalidArgument, match="runs code from its files"):
            engine.dataplane.load_model("ident", python, {"1/model.py": code})
        custom = _override(backend="servelab.backends.python:PythonBackend")
        with pytest.raises(InvalidArgument, match="runs code from its files"):
            engine.dataplane.load_model("ident", custom, {"1/model.py": code})
    assert not marker.exists()


def _external_data_model(path: Path, location: str) -> None:
    """y = x + w where w's bytes live in an external file at ``location`` (relative to the model)."""
    w = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("length", "16")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        initializer=[w],
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)


def test_runtime_errors_reach_clients_without_server_paths(
    repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """ONNX Runtime's own message names the resolved path; the client reads it relative, the log in full."""
    _external_data_model(repo / "ext" / "1" / "model.onnx", "../weights.bin")
    (repo / "ext" / "weights.bin").write_bytes(b"\0" * 16)
    caplog.set_level(logging.WARNING, "servelab.registry")
    with Engine(repo, load_models=[]) as engine:
        with pytest.raises(ServelabError) as info:
            engine.load_model("ext")
        reason = next(r["reason"] for r in engine.get_model_repository_index() if r["name"] == "ext")
    root = str(repo.resolve())
    assert "External data path" in info.value.message and "ext/weights.bin" in info.value.message
    assert root not in info.value.message and root not in reason and "ext/weights.bin" in reason
    assert f"{root}/ext/weights.bin" in caplog.text  # the log keeps the full path

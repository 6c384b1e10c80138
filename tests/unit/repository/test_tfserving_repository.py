"""A TF Serving model config as a repository: parsing, versions, labels, signatures, polling, batching,
reloads and the import, on SavedModel files written here from servelab's own protos (no TensorFlow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import text_format

from servelab.errors import InvalidArgument, NotFound
from servelab.protocol import tfserving as tfs
from servelab.repository.tfserving import TfServingRepository
from servelab.repository.tfserving_batching import read_batching_parameters
from servelab.repository.tfserving_import import import_tfserving
from servelab.repository.tfserving_layout import NO_ROW_LIMIT, PARAM_LABELS, PARAM_SIGNATURES

DT = tfs.types_pb2


def _signature(method: str, inputs: dict[str, tuple[int, list[int]]], outputs: dict[str, tuple[int, list[int]]]
               ) -> tfs.meta_graph_pb2.SignatureDef:
    sig = tfs.meta_graph_pb2.SignatureDef(method_name=method)
    for field, tensors in ((sig.inputs, inputs), (sig.outputs, outputs)):
        for key, (dtype, shape) in tensors.items():
            info = field[key]
            info.name, info.dtype = f"{key}:0", dtype  # type: ignore[assignment]
            for d in shape:
                info.tensor_shape.dim.add(size=d)
    return sig


PREDICT = _signature(tfs.PREDICT_METHOD, {"x": (DT.DT_FLOAT, [-1, 3])}, {"y": (DT.DT_FLOAT, [-1, 2])})
CLASSIFY = _signature(tfs.CLASSIFY_METHOD, {"inputs": (DT.DT_STRING, [-1])},
                      {"classes": (DT.DT_STRING, [-1, 2]), "scores": (DT.DT_FLOAT, [-1, 2])})


def write_saved_model(folder: Path, signatures: dict[str, tfs.meta_graph_pb2.SignatureDef]) -> None:
    saved = tfs.saved_model_pb2.SavedModel()
    graph = saved.meta_graphs.add()
    graph.meta_info_def.tags.append("serve")
    for key, sig in signatures.items():
        graph.signature_def[key].CopyFrom(sig)
    folder.mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(saved.SerializeToString())


def config_text(**entries: str) -> str:
    return "model_config_list {\n" + "".join(f"  config {{ name: '{n}' {body} }}\n" for n, body in entries.items()) + "}\n"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    for version in (1, 2):
        write_saved_model(tmp_path / "m" / str(version), {"serving_default": PREDICT, "classify": CLASSIFY})
    (tmp_path / "models.config").write_text(config_text(
        m="base_path: 'm' model_version_policy { all {} } version_labels { key: 'stable' value: 1 } "
          "version_labels { key: 'canary' value: 2 }"))
    return tmp_path


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_servelab_model_per_signature(store: Path) -> None:
    repo = TfServingRepository(store / "models.config")
    assert repo.model_names() == ["m", "m:classify"]
    primary = repo.read("m")
    assert sorted(primary.versions) == [1, 2] and primary.directory == (store / "m").resolve()
    assert json.loads(primary.config.parameters[PARAM_SIGNATURES].string_value) == {
        "classify": "m:classify", "serving_default": "m"}
    assert json.loads(primary.config.parameters[PARAM_LABELS].string_value) == {"canary": 2, "stable": 1}
    assert primary.config.max_batch_size == NO_ROW_LIMIT and list(primary.config.input[0].dims) == [3]
    classify = repo.read("m:classify").config
    assert classify.parameters["TF_SIGNATURE_DEF"].string_value == "classify"
    assert list(classify.input[0].dims) == [1] and classify.input[0].HasField("reshape")
    with pytest.raises(NotFound, match="not in the TF Serving model config"):
        repo.read("other")
    with pytest.raises(InvalidArgument, match="HandleReloadConfigRequest"):
        repo.read("m", files={"1/saved_model.pb": b""})


@pytest.mark.parametrize(("policy", "folders", "served"), [
    ("", ["1", "2"], [2]),
    ("model_version_policy { latest { num_versions: 2 } }", ["1", "2", "3"], [2, 3]),
    ("model_version_policy { specific { versions: 1 versions: 9 } }", ["1", "2"], [1]),
    ("", ["00000123", "7"], [123]),  # TF Serving's zero-padded folder names are numbers too
])
def test_version_policies(tmp_path: Path, policy: str, folders: list[str], served: list[int]) -> None:
    for name in folders:
        write_saved_model(tmp_path / "m" / name, {"serving_default": PREDICT})
    (tmp_path / "m" / "5").mkdir()  # no saved_model.pb yet: skipped, as TF Serving does
    (tmp_path / "models.config").write_text(config_text(m=f"base_path: '{tmp_path / 'm'}' {policy}"))
    assert sorted(TfServingRepository(tmp_path / "models.config").read("m").versions) == served


def test_broken_entries_are_unavailable_models_with_reasons(tmp_path: Path) -> None:
    write_saved_model(tmp_path / "ok" / "1", {"serving_default": PREDICT})
    write_saved_model(tmp_path / "lab" / "1", {"serving_default": PREDICT})
    sparse = tfs.meta_graph_pb2.SignatureDef()
    sparse.CopyFrom(PREDICT)
    sparse.inputs["x"].coo_sparse.values_tensor_name = "v:0"
    write_saved_model(tmp_path / "odd" / "1", {"serving_default": PREDICT, "sparse": sparse})
    (tmp_path / "models.config").write_text(config_text(
        ok="base_path: 'ok'", missing="base_path: 'nowhere'",
        lab="base_path: 'lab' version_labels { key: 'canary' value: 2 }", odd="base_path: 'odd'"))
    repo = TfServingRepository(tmp_path / "models.config")
    assert repo.model_names() == ["lab", "missing", "odd", "odd:sparse", "ok"]
    repo.read("ok")
    repo.read("odd")  # its other signature is fine
    for name, reason in (("missing", "base_path is not a folder"), ("lab", "point at versions that are not served"),
                         ("odd:sparse", "sparse or composite")):
        with pytest.raises(InvalidArgument, match=reason):
            repo.read(name)


def test_versions_whose_signature_changed_are_refused(tmp_path: Path) -> None:
    write_saved_model(tmp_path / "m" / "1", {"serving_default": PREDICT})
    wider = _signature(tfs.PREDICT_METHOD, {"x": (DT.DT_FLOAT, [-1, 4])}, {"y": (DT.DT_FLOAT, [-1, 2])})
    write_saved_model(tmp_path / "m" / "2", {"serving_default": wider})
    (tmp_path / "models.config").write_text(config_text(m="base_path: 'm' model_version_policy { all {} }"))
    with pytest.raises(InvalidArgument, match=r"versions \[1\] take or give other tensors than version 2"):
        TfServingRepository(tmp_path / "models.config").read("m")


@pytest.mark.parametrize(("text", "message"), [
    ("model_config_list { config { name: 'a' } }", "'base_path' is missing"),
    ("model_config_list { config { name: 'a' base_path: '/x' model_platform: 'onnx' } }", "model_platform 'onnx'"),
    ("model_config_list { config { name: 'a' base_path: '/x' } config { name: 'a' base_path: '/y' } }", "appears twice"),
    ("model_config_list { config { name: 'a' base_path: '/x' version_labels { key: 'l' value: 0 } } }", "expected >= 1"),
    ("model_config_list { config { name: '../a' base_path: '/x' } }", "is not valid"),
    ("model_config_list { config { nom: 'a' } }", "ModelServerConfig text format"),
])
def test_config_errors_name_the_entry(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "models.config").write_text(text)
    with pytest.raises(InvalidArgument, match=message) as err:
        TfServingRepository(tmp_path / "models.config")
    assert str(tmp_path) not in err.value.message


def test_polling_follows_tf_servings_intervals(store: Path) -> None:
    clock = Clock()
    repo = TfServingRepository(store / "models.config", file_system_poll_s=1.0, config_poll_s=5.0, clock=clock)
    before = repo.fingerprint("m")
    write_saved_model(store / "m" / "3", {"serving_default": PREDICT, "classify": CLASSIFY})
    assert repo.fingerprint("m") == before  # the snapshot is younger than file_system_poll_s
    clock.now += 1.0
    assert repo.fingerprint("m") != before and sorted(repo.read("m").versions) == [1, 2, 3]
    (store / "models.config").write_text(config_text(m="base_path: 'm'", n="base_path: 'm'"))
    clock.now += 1.0
    assert repo.model_names() == ["m", "m:classify"]  # the config file is re-read every 5 s only
    clock.now += 4.0
    assert repo.model_names() == ["m", "m:classify", "n", "n:classify"]
    (store / "models.config").write_text("not a config")
    clock.now += 5.0
    assert repo.model_names() == ["m", "m:classify", "n", "n:classify"]  # a broken file keeps the old one


def test_no_polling_with_zero(store: Path) -> None:
    clock = Clock()
    repo = TfServingRepository(store / "models.config", file_system_poll_s=0, clock=clock)
    before = repo.fingerprint("m")
    write_saved_model(store / "m" / "3", {"serving_default": PREDICT})
    clock.now += 3600
    assert repo.fingerprint("m") == before


def test_replace_config_and_its_base_path_rule(store: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    repo = TfServingRepository(store / "models.config")
    repo.model_names()
    def message(text: str) -> tfs.model_server_config_pb2.ModelServerConfig:
        return text_format.Parse(text, tfs.model_server_config_pb2.ModelServerConfig())

    changed, removed = repo.replace_config(message("model_config_list { config { name: 'm' base_path: 'm' } }"))
    assert changed == ["m", "m:classify"] and removed == []  # policy changed: all -> latest
    assert sorted(repo.read("m").versions) == [2]
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    write_saved_model(elsewhere / "1", {"serving_default": PREDICT})
    with pytest.raises(InvalidArgument, match="leads outside the folder of the server's TF Serving model config"):
        repo.replace_config(message(f"model_config_list {{ config {{ name: 'x' base_path: '{elsewhere}' }} }}"))
    write_saved_model(store / "new" / "1", {"serving_default": PREDICT})
    changed, removed = repo.replace_config(
        message(f"model_config_list {{ config {{ name: 'new' base_path: '{store / 'new'}' }} }}"))
    assert changed == ["new"] and removed == ["m", "m:classify"]


def test_batching_parameters_map_to_dynamic_batching(store: Path) -> None:
    path = store / "batching.config"
    path.write_text("max_batch_size { value: 16 }\nbatch_timeout_micros { value: 500 }\n"
                    "max_enqueued_batches { value: 4 }\nnum_batch_threads { value: 3 }\n"
                    "allowed_batch_sizes: 8\nallowed_batch_sizes: 16\npad_variable_length_inputs: true\n"
                    "enable_large_batch_splitting { value: true }\n")
    plan = read_batching_parameters(path)
    assert (plan.max_batch_size, plan.max_queue_delay_us, plan.preferred) == (16, 500, (8, 16))
    notes = " ".join(plan.notes)
    for field in ("num_batch_threads is not mapped", "pad_variable_length_inputs", "enable_large_batch_splitting"):
        assert field in notes
    config = TfServingRepository(store / "models.config", batching=plan).read("m").config
    assert config.max_batch_size == 16 and config.dynamic_batching.max_queue_delay_microseconds == 500
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 16]
    assert config.dynamic_batching.default_queue_policy.max_queue_size == 64
    path.write_text("max_batch_size { value: 16 }\nallowed_batch_sizes: 8\n")
    with pytest.raises(InvalidArgument, match="must increase and end with max_batch_size"):
        read_batching_parameters(path)


def test_import_writes_a_triton_layout(store: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    out = tmp_path_factory.mktemp("out") / "repo"
    report = import_tfserving(store / "models.config", out)
    assert sorted(p.name for p in out.iterdir()) == ["m", "m:classify"]
    assert (out / "m" / "1" / "model.savedmodel" / "saved_model.pb").samefile(store / "m" / "1" / "saved_model.pb")
    assert all(m.triton and not m.error for m in report.models)
    assert any("version labels" in n for n in report.models[0].triton_notes)
    with pytest.raises(InvalidArgument, match="not an empty folder"):
        import_tfserving(store / "models.config", out)


def test_specific_policy_of_an_import_lists_what_was_written(tmp_path: Path) -> None:
    write_saved_model(tmp_path / "m" / "1", {"serving_default": PREDICT})
    (tmp_path / "models.config").write_text(config_text(m="base_path: 'm' model_version_policy { specific { versions: 1 versions: 4 } }"))
    import_tfserving(tmp_path / "models.config", tmp_path / "out")
    assert "versions: 1\n" in (tmp_path / "out" / "m" / "config.pbtxt").read_text()
    assert "versions: 4" not in (tmp_path / "out" / "m" / "config.pbtxt").read_text()



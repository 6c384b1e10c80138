"""TorchServe model stores without a server: config.properties, archives (and hostile ones), the plan."""

from __future__ import annotations

import io
import json
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from servelab.backends.parameters import SchedulerParameters, TorchServeHandlerParameters
from servelab.errors import InvalidArgument, NotFound
from servelab.protocol import model_config_pb2 as mc
from servelab.repository.torchserve import TorchServeRepository
from servelab.repository.torchserve_archive import read_entry, scan_store, store_entry_name, unpack
from servelab.repository.torchserve_layout import plan_model, version_key
from servelab.repository.torchserve_properties import parse_properties

MANIFEST = "MAR-INF/MANIFEST.json"


def _mar(path: Path, name: str, version: str = "1.0", config: str | None = None, extra: dict[str, bytes] | None = None) -> Path:
    model = {"modelName": name, "modelVersion": version, "handler": "handler.py"}
    if config is not None:
        model["configFile"] = "model-config.yaml"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(MANIFEST, json.dumps({"runtime": "python", "model": model}))
        z.writestr("handler.py", "def handle(data, context):\n    return data\n")
        if config is not None:
            z.writestr("model-config.yaml", config)
        for member, data in (extra or {}).items():
            z.writestr(member, data)
    return path


# ----- config.properties -----
def test_properties_continuations_separators_and_models_json(tmp_path: Path) -> None:
    text = (
        "# a comment\n! another\ninference_address=http://0.0.0.0:9080\nmanagement_address: http://0.0.0.0:9081\n"
        "model_store model-store\nload_models=a=a.mar, b.mar\nmodels={\\\n  \"a\": {\\\n    \"1.0\": {\\\n"
        "      \"defaultVersion\": true,\\\n      \"batchSize\": 8\\\n    }\\\n  }\\\n}\nodd\\=key=v\\u00e9\n"
    )
    props = parse_properties(text, tmp_path)
    assert props.address("inference_address").port == 9080 and props.address("management_address").host == "0.0.0.0"
    assert props.address("metrics_address").port == 8082  # TorchServe's default
    assert props.model_store == (tmp_path / "model-store").resolve()
    assert props.load_models == ["a=a.mar", "b.mar"]
    assert props.models() == {"a": {"1.0": {"defaultVersion": True, "batchSize": 8}}}
    assert props.values["odd=key"] == "vé" and props.ignored == ["odd=key"]
    assert props.grpc_address("inference").port == 7070


@pytest.mark.parametrize(("text", "words"), [
    ("inference_address=https://127.0.0.1:8443\n", "HTTPS"),
    ("keystore=src/test/resources/keystore.p12\n", "keystore"),
    ("inference_address=localhost\n", "expected http://host:port"),
    ("models={not json\n", "'models' is not JSON"),
    ("default_response_timeout=soon\n", "must be an integer"),
])  # fmt: skip
def test_properties_refusals_say_what_to_do(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(InvalidArgument, match=words):
        props = parse_properties(text, tmp_path)
        props.address("inference_address")
        props.models()
        props.integer("default_response_timeout")


# ----- the store and its archives -----
def test_scan_reads_mar_tgz_and_folders_and_reports_broken_ones(tmp_path: Path) -> None:
    _mar(tmp_path / "a.mar", "alpha", "2.0", config="batchSize: 4\nmaxBatchDelay: 50\n")
    folder = tmp_path / "folder_model" / "MAR-INF"
    folder.mkdir(parents=True)
    (folder / "MANIFEST.json").write_text(json.dumps({"model": {"handler": "h.py"}}))
    with tarfile.open(tmp_path / "t.tar.gz", "w:gz") as t:
        data = json.dumps({"model": {"modelName": "tee", "handler": "h.py"}}).encode()
        info = tarfile.TarInfo("tee/" + MANIFEST)
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    (tmp_path / "broken.mar").write_bytes(b"not a zip")
    (tmp_path / ".hidden.mar").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not a model")
    entries, errors = scan_store(tmp_path)
    found = {e.model_name: (e.kind, e.version) for e in entries}
    assert found == {"alpha": ("zip", "2.0"), "folder_model": ("folder", "1.0"), "tee": ("tgz", "1.0")}
    assert list(errors) == ["broken.mar"] and "torch-model-archiver" in errors["broken.mar"].message
    alpha = next(e for e in entries if e.model_name == "alpha")
    assert alpha.model_config == {"batchSize": 4, "maxBatchDelay": 50}
    unpacked = unpack(next(e for e in entries if e.kind == "tgz"), tmp_path / "out", 1 << 20)
    assert (unpacked / MANIFEST).is_file() and unpacked.name == "tee"


@pytest.mark.parametrize("name", ["https://example.com/m.mar", "../m.mar", "a/b.mar", "/etc/passwd", "..", ""])
def test_store_entries_are_names_of_the_store(name: str) -> None:
    with pytest.raises(InvalidArgument):
        store_entry_name(name)


def test_missing_entry_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        read_entry(tmp_path, "nope.mar")


@pytest.mark.parametrize("member", ["../escape.py", "/abs.py", "a/../../escape.py"])
def test_zip_members_cannot_leave_the_model_folder(tmp_path: Path, member: str) -> None:
    store = tmp_path / "store"
    store.mkdir()
    entry = read_entry(store, _mar(store / "m.mar", "m", extra={member: b"x"}).name)
    with pytest.raises(InvalidArgument, match="outside"):
        unpack(entry, tmp_path / "out", 1 << 20)
    assert not (tmp_path / "escape.py").exists()


def test_zip_symlinks_and_bombs_are_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    path = _mar(store / "link.mar", "link")
    with zipfile.ZipFile(path, "a") as z:
        info = zipfile.ZipInfo("evil")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        z.writestr(info, "/etc/passwd")
    with pytest.raises(InvalidArgument, match="symbolic link"):
        unpack(read_entry(store, "link.mar"), tmp_path / "out1", 1 << 20)
    bomb = _mar(store / "bomb.mar", "bomb", extra={"zeros.bin": bytes(2 << 20)})
    with pytest.raises(InvalidArgument, match="max_unpacked_bytes"):
        unpack(read_entry(store, bomb.name), tmp_path / "out2", 1 << 20)
    assert not (tmp_path / "out2").exists()


def test_tar_links_are_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    with tarfile.open(store / "l.tar.gz", "w:gz") as t:
        data = json.dumps({"model": {"modelName": "l", "handler": "h.py"}}).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        t.addfile(link)
    with pytest.raises(InvalidArgument, match="not a file or folder"):
        unpack(read_entry(store, "l.tar.gz"), tmp_path / "out", 1 << 20)


# ----- the plan: TorchServe's precedence -> one servelab config -----
def test_yaml_wins_over_properties_over_defaults_and_versions_order_naturally(tmp_path: Path) -> None:
    for version in ("1.10", "1.2", "2.0"):
        _mar(tmp_path / f"m-{version}.mar", "m", version, config="batchSize: 4\nminWorkers: 2\nmaxWorkers: 3\n"
             if version == "1.2" else None)  # fmt: skip
    entries, _ = scan_store(tmp_path)
    plan = plan_model("m", entries, properties_models={"1.2": {"defaultVersion": True, "batchSize": 16, "maxBatchDelay": 7}},
                      default_workers=1)  # fmt: skip
    params = TorchServeHandlerParameters.read(plan.config)
    assert params.version_numbers == {"1.2": 1, "1.10": 2, "2.0": 3} and params.default_version == "1.2"
    assert (plan.config.max_batch_size, plan.config.dynamic_batching.max_queue_delay_microseconds) == (4, 7000)
    assert plan.config.instance_group[0].count == 2 and params.max_workers == 3
    assert SchedulerParameters.read(plan.config).instance_mode == "process"
    assert plan.config.version_policy.HasField("all")
    assert [i.name for i in plan.config.input] == ["body", "request"] and plan.config.input[1].optional
    assert any("maxWorkers" in n for n in plan.notes) and any("other batching" in n for n in plan.notes)
    assert version_key("1.2") < version_key("1.10") < version_key("2.0")


def test_parallelism_is_left_out_with_a_message(tmp_path: Path) -> None:
    _mar(tmp_path / "p.mar", "p", config="parallelType: pp\nparallelLevel: 2\ndeviceType: gpu\n")
    entries, _ = scan_store(tmp_path)
    notes = plan_model("p", entries).notes
    assert any("model parallelism" in n and "left out" in n for n in notes)
    assert any("deviceType 'gpu'" in n for n in notes)


def test_repository_renames_and_refuses_uploads(tmp_path: Path) -> None:
    _mar(tmp_path / "a.mar", "alpha")
    repo = TorchServeRepository(tmp_path, renames={"a.mar": "renamed"}, default_workers=1)
    assert repo.model_names() == ["renamed"] and repo.model_for_url("a.mar") == "renamed"
    source = repo.read("renamed")
    assert (source.versions[1] / MANIFEST).is_file() and source.backend == "torchserve_handler"
    with pytest.raises(InvalidArgument, match="model store"):
        repo.read("renamed", files={"1/x.py": b""})
    scaled = mc.ModelConfig(instance_group=[mc.ModelInstanceGroup(count=3)])
    assert repo.read("renamed", scaled).config.instance_group[0].count == 3
    with pytest.raises(InvalidArgument, match="backend"):
        repo.read("renamed", mc.ModelConfig(backend="onnxruntime"))
    assert repo.startup_models(["all"]) == ["*"] and repo.startup_models(["x=a.mar"]) == ["x"]

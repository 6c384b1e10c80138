"""servelab.trust: the one rule for model names, versions and file paths, and the custom-backend gate."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.backends import backend_class
from servelab.backends.onnxruntime import OnnxRuntimeBackend
from servelab.errors import InvalidArgument
from servelab.trust import (
    check_custom_backend,
    check_model_name,
    check_uploadable,
    check_version,
    redact,
    resolve_inside,
    version_file,
)


@pytest.mark.parametrize("name", ["simple", "resnet-50", "m_1.onnx", "Ünïcode", "a b", "x.y"])
def test_valid_model_names_pass(name: str) -> None:
    assert check_model_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "/etc", "../x", "x/..", "a..b", "a\0b", "\0"])
def test_invalid_model_names_are_refused_with_the_rule(name: str) -> None:
    with pytest.raises(InvalidArgument, match="must not be empty or '.', and must contain no '/', no '..' and no NUL"):
        check_model_name(name, "model name")


def test_a_long_name_is_cut_in_the_message() -> None:
    with pytest.raises(InvalidArgument) as info:
        check_model_name("x" * 10_000 + "/")
    assert len(info.value.message) < 300


@pytest.mark.parametrize("version", ["", "1", "12", "007"])
def test_valid_versions_pass(version: str) -> None:
    assert check_version(version) == version


@pytest.mark.parametrize("version", ["-1", "1.0", "abc", " 1", "\u0661", "../1", "1\0"])
def test_invalid_versions_are_refused(version: str) -> None:
    with pytest.raises(InvalidArgument, match="expected a version number"):
        check_version(version)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``model/`` with a version folder, a file, a symlink inside and symlinks leading out."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    model = tmp_path / "repo" / "model"
    (model / "1" / "sub").mkdir(parents=True)
    (model / "labels.txt").write_text("a\nb\n")
    (model / "1" / "model.onnx").write_bytes(b"x")
    (model / "in_link").symlink_to(model / "labels.txt")
    (model / "out_link").symlink_to(outside / "secret.txt")
    (model / "out_dir").symlink_to(outside)
    (model / "loop").symlink_to(model / "loop")
    return model


def test_relative_names_inside_resolve(tree: Path) -> None:
    assert resolve_inside(tree, "labels.txt", "label_filename") == (tree / "labels.txt").resolve()
    assert resolve_inside(tree, "1/../labels.txt", "f") == (tree / "labels.txt").resolve()
    assert resolve_inside(tree, "in_link", "f") == (tree / "labels.txt").resolve()
    assert resolve_inside(tree, "not/yet/written.bin", "f") == tree.resolve() / "not" / "yet" / "written.bin"
    assert version_file(tree / "1", "model.onnx", "default_model_filename") == (tree / "1" / "model.onnx").resolve()
    assert version_file(tree / "1", "../labels.txt", "default_model_filename") == (tree / "labels.txt").resolve()


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "is empty"),
        ("../outside/secret.txt", "leads outside"),
        ("1/../../outside/secret.txt", "leads outside"),
        ("/etc/passwd", "is not allowed"),
        ("labels.txt\0.png", "is not allowed"),
        ("out_link", "leads outside"),
        ("out_dir/secret.txt", "leads outside"),
        ("loop", "cannot be resolved|leads outside"),
    ],
)
def test_names_leaving_the_folder_are_refused_naming_field_and_rule(tree: Path, name: str, why: str) -> None:
    with pytest.raises(InvalidArgument, match=why) as info:
        resolve_inside(tree, name, "output 'y' label_filename")
    message = info.value.message
    assert message.startswith("output 'y' label_filename")
    assert "stays inside the model's folder" in message
    assert str(tree) not in message and str(tree.parent) not in message  # no server path


def test_version_file_may_not_leave_the_model_folder(tree: Path) -> None:
    with pytest.raises(InvalidArgument, match="default_model_filename '../../outside/secret.txt' leads outside"):
        version_file(tree / "1", "../../outside/secret.txt", "default_model_filename")


_SEGMENTS = st.sampled_from(["a", "1", "sub", "..", ".", "", "in_link", "out_link", "out_dir", "labels.txt", "x y"])
_NAMES = st.builds(
    lambda lead, parts: lead + "/".join(parts), st.sampled_from(["", "/", "./"]), st.lists(_SEGMENTS, max_size=7)
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=_NAMES, start_in_version=st.booleans())
def test_any_generated_name_resolves_inside_or_is_refused(tree: Path, name: str, start_in_version: bool) -> None:
    """Property: a name is accepted exactly when the OS resolves it to a place inside the folder."""
    start = tree / "1" if start_in_version else tree
    base = os.path.realpath(tree)
    real = os.path.realpath(os.path.join(start, name)) if name and not name.startswith("/") else None
    inside = real is not None and (real == base or real.startswith(base + os.sep))
    try:
        got = resolve_inside(tree, name, "f", start=start)
    except InvalidArgument:
        assert not inside, f"{name!r} resolves inside ({real}) but was refused"
        return
    assert inside, f"{name!r} was accepted but resolves to {real}"
    assert str(got) == real


def test_custom_backends_are_refused_unless_allowed() -> None:
    name = "servelab.backends.onnxruntime:OnnxRuntimeBackend"
    with pytest.raises(InvalidArgument, match="--allow-custom-backends"):
        check_custom_backend(name, False)
    with pytest.raises(InvalidArgument, match="custom backends are off"):
        backend_class(name)
    assert backend_class(name, allow_custom=True) is OnnxRuntimeBackend
    assert backend_class("onnxruntime") is OnnxRuntimeBackend  # named backends need no permission


def test_a_custom_backend_that_is_no_backend_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="not a servelab Backend subclass"):
        backend_class("servelab.trust:NoSuchThing", allow_custom=True)


@pytest.mark.parametrize("backend", ["python", "pytorch", "tensorflow", "tensorrt", "pkg.mod:Class"])
def test_uploads_of_code_carrying_models_are_refused(backend: str) -> None:
    with pytest.raises(InvalidArgument, match="put it in the model repository"):
        check_uploadable(backend)
    check_uploadable("onnxruntime")
    check_uploadable("openvino")


def test_redact_replaces_folders_longest_first() -> None:
    prefixes = {"/srv/repo": "", "/data/real/m": "m"}
    text = "cannot open /srv/repo/m/1/model.onnx or /data/real/m/1/x.bin in /srv/repo"
    assert redact(text, prefixes) == "cannot open m/1/model.onnx or m/1/x.bin in <repository>"

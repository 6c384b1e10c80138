"""TF Serving's ``--model_config_file``: ModelServerConfig text format -> checked :class:`ServedModel` entries.

A config lists models by ``name`` and ``base_path`` (a folder of numbered version folders), with an
optional ``model_version_policy`` (``latest { num_versions }``, ``all {}``, ``specific { versions }``;
default: the latest one) and ``version_labels`` (``stable -> 1``). ``model_platform`` must be
``tensorflow`` (or absent). The operator's file is trusted: its base paths may be anywhere, and a
relative one is read from the folder of the config file. A config that arrives over the wire
(``ModelService.HandleReloadConfigRequest``) may only name base paths the operator's file names or
folders inside the config file's folder (:func:`servelab.trust.resolve_inside`), since loading a
SavedModel runs its graph. Errors name the entry and the field, never a server path.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format

from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc
from servelab.protocol import tfserving as tfs
from servelab.trust import check_model_name, resolve_inside

__all__ = ["ServedModel", "TfServingConfig", "parse_model_server_config", "read_model_server_config"]

log = logging.getLogger("servelab.tfserving")

_PLATFORMS = ("", "tensorflow")
_LABEL_FORBIDDEN = ("/", ":", "\0")


@dataclass(frozen=True)
class ServedModel:
    """One ``config { ... }`` entry of a ModelServerConfig, checked."""

    name: str
    base_path: Path
    #: Triton's policy message, which has TF Serving's three choices with the same meaning
    policy: mc.ModelVersionPolicy
    labels: dict[str, int] = field(default_factory=dict)

    def key(self) -> str:
        """Everything that, when changed, changes what this entry serves (for fingerprints)."""
        labels = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        return f"{self.base_path}|{text_format.MessageToString(self.policy, as_one_line=True)}|{labels}"


@dataclass(frozen=True)
class TfServingConfig:
    """The models of a config file, in file order, and the folder its relative base paths start from."""

    models: tuple[ServedModel, ...]
    folder: Path

    def by_name(self) -> dict[str, ServedModel]:
        return {m.name: m for m in self.models}


def read_model_server_config(path: Path) -> TfServingConfig:
    """Parse the operator's config file (its base paths are trusted)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidArgument(f"TF Serving model config {path.name}: cannot be read ({exc.strerror})") from None
    message = tfs.model_server_config_pb2.ModelServerConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as exc:
        raise InvalidArgument(
            f"TF Serving model config {path.name}: {exc} (expected TF Serving's ModelServerConfig text format, "
            'e.g. model_config_list { config { name: "m" base_path: "/models/m" model_platform: "tensorflow" } })'
        ) from None
    return parse_model_server_config(message, path.parent.resolve(), path.name)


def parse_model_server_config(
    message: tfs.model_server_config_pb2.ModelServerConfig,
    folder: Path,
    where: str,
    *,
    trusted: TfServingConfig | None = None,
) -> TfServingConfig:
    """Check a ModelServerConfig message; ``trusted`` (the operator's config) bounds a wire config's paths."""
    if message.WhichOneof("config") == "custom_model_config":
        raise InvalidArgument(f"{where}: custom_model_config is not supported; use model_config_list")
    models: list[ServedModel] = []
    seen: set[str] = set()
    for i, entry in enumerate(message.model_config_list.config):
        model = _served_model(entry, folder, f"{where}: config #{i + 1}", trusted)
        if model.name in seen:
            raise InvalidArgument(f"{where}: model name {model.name!r} appears twice; names must be unique")
        seen.add(model.name)
        models.append(model)
    return TfServingConfig(tuple(models), folder)


def _served_model(
    entry: tfs.model_server_config_pb2.ModelConfig, folder: Path, where: str, trusted: TfServingConfig | None
) -> ServedModel:
    if not entry.name:
        raise InvalidArgument(f"{where}: 'name' is missing")
    check_model_name(entry.name, f"{where}: name")
    where = f"{where} ({entry.name!r})"
    if not entry.base_path:
        raise InvalidArgument(f"{where}: 'base_path' is missing (the folder of its numbered version folders)")
    if entry.model_platform not in _PLATFORMS:
        raise InvalidArgument(
            f"{where}: model_platform {entry.model_platform!r} is not supported; servelab serves 'tensorflow' "
            "SavedModels from a TF Serving config (other runtimes: use a model repository)"
        )
    if entry.HasField("logging_config"):
        log.warning("%s: logging_config is ignored (servelab does not log requests to files)", where)
    base_path = _base_path(entry.base_path, folder, where, trusted)
    return ServedModel(entry.name, base_path, _policy(entry, where), _labels(entry, where))


def _base_path(given: str, folder: Path, where: str, trusted: TfServingConfig | None) -> Path:
    path = (folder / given).resolve() if not Path(given).is_absolute() else Path(given).resolve()
    if trusted is None or path in {m.base_path for m in trusted.models}:
        return path
    relative = os.path.relpath(given, trusted.folder) if Path(given).is_absolute() else given
    return resolve_inside(
        trusted.folder, relative, f"{where}: base_path {given!r}",
        within="the folder of the server's TF Serving model config",
    )


def _policy(entry: tfs.model_server_config_pb2.ModelConfig, where: str) -> mc.ModelVersionPolicy:
    given = entry.model_version_policy
    policy = mc.ModelVersionPolicy()
    which = given.WhichOneof("policy_choice")
    if which == "all":
        policy.all.SetInParent()
    elif which == "specific":
        if not given.specific.versions:
            raise InvalidArgument(f"{where}: model_version_policy specific lists no versions")
        bad = [v for v in given.specific.versions if v <= 0]
        if bad:
            raise InvalidArgument(f"{where}: model_version_policy specific versions {bad} must be positive")
        policy.specific.versions.extend(sorted(set(given.specific.versions)))
    else:  # latest, TF Serving's default; num_versions 0 means 1 there too
        policy.latest.num_versions = max(1, given.latest.num_versions) if which == "latest" else 1
    return policy


def _labels(entry: tfs.model_server_config_pb2.ModelConfig, where: str) -> dict[str, int]:
    labels: dict[str, int] = {}
    for label, version in sorted(entry.version_labels.items()):
        if not label or any(c in label for c in _LABEL_FORBIDDEN):
            raise InvalidArgument(f"{where}: version label {label!r} must be non-empty, without '/', ':' or NUL")
        if version <= 0:
            raise InvalidArgument(f"{where}: version label {label!r} points at version {version}; expected >= 1")
        labels[label] = int(version)
    return labels

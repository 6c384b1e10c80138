"""Write ``servelab deploy k8s``'s output folder: one YAML file per object group, the Dockerfile.

The keys of the Secret come from the settings (``auth.management_key`` / ``inference_key``, or the key
file, read or generated as ``servelab serve`` would), else they are generated here; the Secret's file is
written with mode 0600 and no key is ever printed.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from servelab.config.settings import ServerSettings
from servelab.deploy.dockerfile import dockerfile, repository_extras
from servelab.deploy.k8s import deployment_objects
from servelab.deploy.kserve import kserve_objects
from servelab.errors import InvalidArgument
from servelab.frontends.auth import load_keys

__all__ = ["cluster_keys", "manifests", "write_manifests"]


class _PlainDumper(yaml.SafeDumper):
    """No ``&id001`` anchors: each manifest reads on its own."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def cluster_keys(settings: ServerSettings) -> dict[str, str]:
    """The Secret's keys: the configured ones where set, fresh random ones elsewhere."""
    keys = load_keys(settings.auth)
    return {
        "management-key": keys.management or secrets.token_urlsafe(32),
        "inference-key": keys.inference or secrets.token_urlsafe(32),
    }


def manifests(settings: ServerSettings, keys: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """File name -> objects: the Kubernetes objects, then the KServe pair."""
    k = settings.deploy.kubernetes
    return {**deployment_objects(k, keys), **kserve_objects(k)}


def _in_context(repository: Path, context: Path) -> PurePosixPath:
    try:
        return PurePosixPath(repository.resolve().relative_to(context.resolve()).as_posix())
    except ValueError:
        raise InvalidArgument(
            f"the model repository {repository} is outside the build context {context}: the image copies it "
            "from there. Pass --context with a folder that holds both the servelab checkout and the repository"
        ) from None


def write_manifests(settings: ServerSettings, out: Path, context: Path) -> list[Path]:
    """Write every file into ``out`` (created); returns the paths written."""
    if len(settings.model_repository) != 1:
        raise InvalidArgument(f"deploy k8s bakes one model repository into the image; got {len(settings.model_repository)}")
    repository = Path(settings.model_repository[0])
    image_path = _in_context(repository, context)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name, objects in manifests(settings, cluster_keys(settings)).items():
        path = out / name
        text = yaml.dump_all(objects, Dumper=_PlainDumper, sort_keys=False)
        if name.endswith("secret.yaml"):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
            path.chmod(0o600)
        else:
            path.write_text(text)
        written.append(path)
    docker = out / "Dockerfile"
    docker.write_text(dockerfile(repository_extras([repository]), image_path))
    written.append(docker)
    return written

"""The server image: a Dockerfile whose commands are the README's install commands.

``servelab deploy k8s`` writes it with the model repository as the image's last layer (``/models``), so
a pod needs no volume; ``deploy/Dockerfile`` is the same image without a repository. The extras come
from the backends the repository's models use (``servelab[torch]`` for TorchScript, ...), read from
each config.pbtxt the way the server resolves them. Build from a servelab checkout (the context):
``docker build -f DIR/Dockerfile -t IMAGE .``.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from servelab.backends import BACKENDS, plugin_backends
from servelab.errors import InvalidArgument, ServelabError
from servelab.repository import ModelRepository
from servelab.repository.config import read_config
from servelab.repository.repository import resolve_backend

__all__ = ["INSTALL_COMMANDS", "dockerfile", "install_commands", "repository_extras"]

_EXTRA = re.compile(r"servelab\[([a-z0-9_,-]+)\]")


def _model_extras(repo: ModelRepository, name: str) -> set[str]:
    directory = repo.model_dir(name)
    config, _ = read_config(directory)
    versions = sorted((p for p in directory.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    try:
        backend = resolve_backend(config, versions[-1] if versions else directory)
    except ServelabError:
        return set()  # the server says what is wrong with this model when it loads it
    if backend in BACKENDS:
        extra = BACKENDS[backend][1]
        return {extra} if extra else set()
    needs = plugin_backends().get(backend, ("", None))[1] or ""
    found = _EXTRA.search(needs)
    return set(found.group(1).split(",")) if found else set()


def repository_extras(roots: list[Path]) -> list[str]:
    """The servelab extras the repository's backends need, sorted."""
    repo = ModelRepository(list(roots))
    return sorted({extra for name in repo.model_names() for extra in _model_extras(repo, name)})


def install_commands(extras: list[str]) -> list[str]:
    """The shell commands that install the server from a checkout (the README's, word for word)."""
    spec = f"'.[{','.join(extras)}]'" if extras else "."
    return [f"python -m pip install --no-cache-dir {spec}", 'python -c "import servelab.protocol"']


#: the commands of the image without a repository (deploy/Dockerfile)
INSTALL_COMMANDS = install_commands([])


def dockerfile(extras: list[str], repository: PurePosixPath | None) -> str:
    """The Dockerfile text; ``repository`` is the repository's path inside the build context."""
    if repository is not None and (repository.is_absolute() or ".." in repository.parts):
        raise InvalidArgument(f"the model repository must lie inside the build context; got {repository}")
    lines = [
        "# servelab server image (written by `servelab deploy k8s`; build from a servelab checkout:",
        "#   docker build -f <this file> -t <image> .)",
        "FROM python:3.11-slim",
        "ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1",
        "WORKDIR /opt/servelab",
        "COPY pyproject.toml README.md ./",
        "COPY src ./src",
        *(f"RUN {command}" for command in install_commands(extras)),
        "RUN useradd --uid 1000 --user-group --no-create-home servelab",
    ]
    if repository is not None:
        lines.append(f"COPY --chown=1000:1000 {repository.as_posix()} /models")
    lines += [
        "USER 1000:1000",
        "EXPOSE 8000 8001 8002",
        'ENTRYPOINT ["servelab"]',
        'CMD ["serve", "/models", "--host", "0.0.0.0"]',
    ]
    return "\n".join(lines) + "\n"

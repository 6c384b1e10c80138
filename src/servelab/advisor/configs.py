"""A candidate as a config.pbtxt: the artefact's config with batching, instances and threads set.

Threads go through the backend's parameter schema (its ``threads_field``: ``intra_op_thread_count`` for
ONNX Runtime and torch, ``INFERENCE_NUM_THREADS`` for OpenVINO, ``layers_threads`` for the fused GraphSAGE
backend; plug-ins' schemas found by backend name), instances through ``instance_group``, batching through
``dynamic_batching`` -- the fields and keys the server reads, written by the code that reads them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from servelab.advisor.grid import Candidate
from servelab.backends import backend_parameters
from servelab.backends.parameters import ModelParameters
from servelab.protocol import model_config_pb2 as mc
from servelab.repository import config_to_text
from servelab.repository.config import read_config

__all__ = ["candidate_config", "install_model", "threads_parameters"]


def threads_parameters(config: mc.ModelConfig, threads: int) -> ModelParameters:
    """The backend's parameters of ``config`` with its runtime threads per instance set to ``threads``."""
    return backend_parameters(config.backend).read(config).with_threads(threads)


def candidate_config(artefact_config: mc.ModelConfig, candidate: Candidate, name: str) -> mc.ModelConfig:
    """The config that serves ``candidate`` under ``name``."""
    config = mc.ModelConfig()
    config.CopyFrom(artefact_config)
    config.name = name
    config.ClearField("dynamic_batching")
    batching = candidate.batching
    if batching.on:
        config.max_batch_size = batching.max_batch_size
        config.dynamic_batching.max_queue_delay_microseconds = batching.max_queue_delay_us
    config.ClearField("instance_group")
    config.instance_group.add(count=candidate.instances, kind=mc.ModelInstanceGroup.KIND_CPU)
    threads_parameters(config, candidate.threads).write(config)
    return config


def _link_or_copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, copy_function=_link_file)
    else:
        _link_file(str(src), str(dst))


def _link_file(src: str, dst: str) -> None:
    """A hard link where the file system allows it (big weights are not copied per candidate), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def install_model(artefact_folder: Path, config: mc.ModelConfig, repository: Path) -> Path:
    """``repository/<config.name>/`` with the artefact's version-1 files and ``config``; replaces what was there."""
    folder = repository / config.name
    if folder.exists():
        shutil.rmtree(folder)
    version = folder / "1"
    version.mkdir(parents=True)
    for item in sorted((artefact_folder / "1").iterdir()):
        _link_or_copy(item, version / item.name)
    (folder / "config.pbtxt").write_text(config_to_text(config))
    return folder


def artefact_config(folder: Path) -> mc.ModelConfig:
    """The config.pbtxt convert wrote for an artefact."""
    config, _ = read_config(folder)
    return config

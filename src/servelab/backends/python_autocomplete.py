"""A python model's ``auto_complete_config``, run in a process of its own (as Triton runs it in a stub).

The server never imports a user's ``model.py`` itself: when the file defines ``auto_complete_config``
(checked by parsing it, not importing it), ``python -m servelab.backends.python_autocomplete MODEL_PY``
imports it in a fresh interpreter, hands the static method a ``pb_utils.ModelConfig`` of the config so
far (Triton's JSON, on stdin) and prints the completed config as JSON; the server reads it back. The
process is gone afterwards, so nothing the method creates lives on (as the Triton docs promise).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from google.protobuf import json_format

from servelab.backends.pb_utils._config import ModelConfig, config_json
from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc

__all__ = ["autocomplete_python", "defines_auto_complete"]

_SRC = str(Path(__file__).resolve().parents[2])  # the folder holding the servelab package
_TIMEOUT_S = 120.0
#: what auto_complete_config may change (Triton: max_batch_size, inputs, outputs, batching, policy)
_FIELDS = ("max_batch_size", "input", "output", "dynamic_batching", "model_transaction_policy")


def defines_auto_complete(model_py: Path) -> bool:
    """Whether ``model_py`` has a class TritonPythonModel (or Model) with ``auto_complete_config``."""
    try:
        tree = ast.parse(model_py.read_bytes(), str(model_py))
    except (OSError, SyntaxError, ValueError):
        return False  # loading the model reports the problem
    return any(
        isinstance(node, ast.ClassDef) and node.name in ("TritonPythonModel", "Model")
        and any(isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and f.name == "auto_complete_config"
                for f in node.body)
        for node in tree.body
    )  # fmt: skip


def autocomplete_python(config: mc.ModelConfig, model_py: Path) -> None:
    """Complete ``config`` in place with the model's ``auto_complete_config``, if it defines one."""
    if not model_py.is_file() or not defines_auto_complete(model_py):
        return
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_SRC, *sys.path, env.get("PYTHONPATH", "")) if p)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "servelab.backends.python_autocomplete", str(model_py)],
            input=config_json(config).encode(), capture_output=True, env=env, timeout=_TIMEOUT_S, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise InvalidArgument(
            f"model '{config.name}': auto_complete_config did not return within {_TIMEOUT_S:g} s"
        ) from None
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip().splitlines()
        raise InvalidArgument(
            f"model '{config.name}': auto_complete_config failed: {reason[-1] if reason else f'exit {done.returncode}'}"
        )
    completed = mc.ModelConfig()
    try:
        json_format.ParseDict(json.loads(done.stdout), completed, ignore_unknown_fields=False)
    except (json_format.ParseError, ValueError) as exc:
        raise InvalidArgument(f"model '{config.name}': auto_complete_config returned an invalid config: {exc}") from None
    for name in _FIELDS:
        config.ClearField(name)
    for name in _FIELDS:
        value = getattr(completed, name)
        if name in ("input", "output"):
            getattr(config, name).extend(value)
        elif name == "max_batch_size":
            config.max_batch_size = value
        elif completed.HasField(name):
            getattr(config, name).CopyFrom(value)


def _run(model_py: str) -> int:
    """In the child: import the model, complete the config read from stdin, print it (what the model
    itself prints goes to stderr)."""
    out, sys.stdout = sys.stdout, sys.stderr
    spec = importlib.util.spec_from_file_location("servelab_autocomplete_model", model_py)
    if spec is None or spec.loader is None:
        print(f"cannot import {model_py}", file=sys.stderr)
        return 2
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls = getattr(module, "TritonPythonModel", None) or module.Model
    given = ModelConfig(sys.stdin.read())
    result = cls.auto_complete_config(given)
    if not isinstance(result, ModelConfig):
        print(f"auto_complete_config must return the pb_utils.ModelConfig it got, not {type(result).__name__}",
              file=sys.stderr)  # fmt: skip
        return 2
    out.write(json.dumps(result.as_dict()))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(_run(sys.argv[1]))
    except Exception as exc:  # the server reads the last line of stderr
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)

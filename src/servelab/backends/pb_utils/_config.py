"""Reading a model's configuration in ``model.py``, and ``auto_complete_config``'s ``pb_utils.ModelConfig``.

The configuration a model reads (``json.loads(args["model_config"])``) is Triton's JSON form: field
names as in model_config.proto, integers as numbers, and every list and plain field present with its
default, so ``config["input"]`` and ``config["max_batch_size"]`` are always there.

``auto_complete_config(auto_complete_model_config)`` may add inputs and outputs, set max_batch_size,
dynamic batching and the transaction policy; each setter refuses what contradicts the config file, with
the message Triton gives.
"""

from __future__ import annotations

import json
from typing import Any

from servelab.protocol import model_config_pb2 as mc
from servelab.protocol.config_json import config_to_dict

__all__ = [
    "ModelConfig",
    "config_json",
    "get_input_config_by_name",
    "get_output_config_by_name",
    "using_decoupled_model_transaction_policy",
]

def config_json(config: mc.ModelConfig) -> str:
    """A ModelConfig as Triton hands it to a python model: JSON with defaults and numeric integers."""
    return json.dumps(config_to_dict(config))


def _by_name(model_config: dict[str, Any], key: str, name: str) -> dict[str, Any] | None:
    for properties in model_config.get(key, ()):
        if properties.get("name") == name:
            return properties  # type: ignore[no-any-return]
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The ``input`` entry called ``name`` of a parsed model config, or None."""
    return _by_name(model_config, "input", name)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The ``output`` entry called ``name`` of a parsed model config, or None."""
    return _by_name(model_config, "output", name)


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """Whether the config sets ``model_transaction_policy { decoupled: true }``."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


_INPUT_KEYS = ("name", "data_type", "dims", "optional")
_OUTPUT_KEYS = ("name", "data_type", "dims")


class ModelConfig:
    """The configuration ``auto_complete_config`` completes (built from Triton's JSON form)."""

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        self._model_config: dict[str, Any] = (
            json.loads(model_config) if isinstance(model_config, str) else dict(model_config)
        )
        self._model_config.setdefault("input", [])
        self._model_config.setdefault("output", [])
        self._model_config.setdefault("max_batch_size", 0)

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def as_dict(self) -> dict[str, Any]:
        """The configuration as a dict (read it; change it through the setters)."""
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = int(self._model_config.get("max_batch_size", 0))
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config function for "
                f"model '{self._name}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = int(max_batch_size)

    def set_dynamic_batching(self) -> None:
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{scheduler}', but auto-complete-config "
                    f"function for model '{self._name}' tries to set scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add("input", input, _INPUT_KEYS)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output, _OUTPUT_KEYS)

    def _add(self, kind: str, tensor: dict[str, Any], allowed: tuple[str, ...]) -> None:
        name = tensor.get("name", "")
        where = f"auto-complete-config function for model '{self._name}'"
        extra = sorted(set(tensor) - set(allowed))
        if extra:
            raise ValueError(f"{kind} '{name}' in {where} contains property other than {list(allowed)}: {extra}")
        for key in ("name", "data_type", "dims"):
            if key not in tensor:
                raise ValueError(f"{kind} '{name}' in {where} is missing '{key}' property.")
        for current in self._model_config[kind]:
            if current.get("name") != name:
                continue
            known = current.get("data_type", "TYPE_INVALID")
            if known != "TYPE_INVALID" and known != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{self._name}', configuration expects datatype {known} for {kind} "
                    f"'{name}', model provides {tensor['data_type']}"
                )
            if current.get("dims") and list(current["dims"]) != list(tensor["dims"]):
                raise ValueError(
                    f"model '{self._name}', tensor '{name}': the model expects dims {list(tensor['dims'])} but "
                    f"the model configuration specifies dims {list(current['dims'])}"
                )
            if "optional" in current and "optional" in tensor and current["optional"] != tensor["optional"]:
                raise ValueError(
                    f"model '{self._name}', tensor '{name}': the model expects optional {tensor['optional']} but "
                    f"the model configuration specifies optional {current['optional']}"
                )
            current.update({k: tensor[k] for k in allowed if k in tensor and k != "name"})
            return
        self._model_config[kind].append(dict(tensor))

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        extra = sorted(set(transaction_policy_dict) - {"decoupled"})
        if extra:
            raise ValueError(
                f"model transaction property in auto-complete-config function for model '{self._name}' contains "
                f"property other than 'decoupled': {extra}"
            )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = bool(transaction_policy_dict["decoupled"])
            if "decoupled" in policy and bool(policy["decoupled"]) != wanted:
                raise ValueError(
                    f"trying to change decoupled property in auto-complete-config for model '{self._name}', "
                    f"which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted

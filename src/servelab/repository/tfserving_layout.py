"""How a TF Serving model becomes servelab models: one per signature, with a Triton-valid config.

servelab (like Triton) serves one signature per model, so a SavedModel with ``serving_default``,
``classify`` and ``regress`` signatures is three servelab models: the *primary* signature
(``serving_default``, else the first by name) under the TF Serving model's own name ``m``, and each
other signature ``s`` as ``m:s``. Every config says which signature it runs in Triton's own
parameter ``TF_SIGNATURE_DEF`` (Triton's tensorflow backend and servelab's read it), which TF Serving
model it belongs to, and the SignatureDef itself (for GetModelMetadata); the primary also carries
the signature -> servelab model map and the version labels. The TF Serving front doors read these
parameters only, so they work the same on a ``--tfserving-config`` and on the Triton-layout
repository that ``servelab import tfserving`` writes.

Tensors follow Triton's rules: a signature whose inputs and outputs all have a -1 first dimension
batches (``max_batch_size`` > 0, dims without the batch axis); a tensor with no other dimension is
``dims: [1]`` with ``reshape { shape: [] }``, as Triton requires. Unknown rank, sparse tensors,
dtypes without an OIP datatype and unbatched scalars are refused with a message saying so.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import json_format

from servelab.errors import InvalidArgument
from servelab.protocol import model_config_pb2 as mc
from servelab.protocol import tfserving as tfs
from servelab.repository.tfserving_batching import BatchingPlan
from servelab.trust import check_model_name, resolve_inside
from servelab.types import DataType

__all__ = [
    "NO_ROW_LIMIT",
    "PARAM_LABELS",
    "PARAM_MODEL",
    "PARAM_SIGNATURE",
    "PARAM_SIGNATURES",
    "PARAM_SIGNATURE_DEF",
    "SignatureTensor",
    "datatype_of",
    "primary_signature",
    "same_interface",
    "select_versions",
    "set_primary",
    "signature_config",
    "signature_model_names",
    "signature_tensors",
    "version_folders",
]

log = logging.getLogger("servelab.tfserving")

#: Triton's tensorflow backend parameter naming the signature a model runs
PARAM_SIGNATURE = "TF_SIGNATURE_DEF"
PARAM_MODEL = "tfserving_model"
#: the SignatureDef as JSON (TF Serving's GetModelMetadata answers with it)
PARAM_SIGNATURE_DEF = "tfserving_signature_def"
#: on the primary model: JSON {signature: servelab model}
PARAM_SIGNATURES = "tfserving_signatures"
#: on the primary model: JSON {label: version}
PARAM_LABELS = "tfserving_version_labels"
#: max_batch_size of a batching signature without TF Serving batching: TF Serving has no row limit
NO_ROW_LIMIT = 2**31 - 1
_SEPARATOR = ":"

_DATATYPES = {
    tfs.types_pb2.DT_BOOL: DataType.BOOL, tfs.types_pb2.DT_UINT8: DataType.UINT8,
    tfs.types_pb2.DT_UINT16: DataType.UINT16, tfs.types_pb2.DT_UINT32: DataType.UINT32,
    tfs.types_pb2.DT_UINT64: DataType.UINT64, tfs.types_pb2.DT_INT8: DataType.INT8,
    tfs.types_pb2.DT_INT16: DataType.INT16, tfs.types_pb2.DT_INT32: DataType.INT32,
    tfs.types_pb2.DT_INT64: DataType.INT64, tfs.types_pb2.DT_HALF: DataType.FP16,
    tfs.types_pb2.DT_FLOAT: DataType.FP32, tfs.types_pb2.DT_DOUBLE: DataType.FP64,
    tfs.types_pb2.DT_BFLOAT16: DataType.BF16, tfs.types_pb2.DT_STRING: DataType.BYTES,
}


@dataclass(frozen=True)
class SignatureTensor:
    """One input or output of a signature: its key, datatype and full shape (-1 where unknown)."""

    key: str
    datatype: DataType
    shape: tuple[int, ...]


def datatype_of(dtype: int, where: str) -> DataType:
    """The OIP datatype of a TensorFlow ``DT_*`` value."""
    found = _DATATYPES.get(dtype)  # type: ignore[call-overload]
    if found is None:
        name = tfs.types_pb2.DataType.Name(dtype) if dtype in tfs.types_pb2.DataType.values() else str(dtype)
        raise InvalidArgument(f"{where}: dtype {name} has no Open Inference Protocol datatype; servelab cannot serve it")
    return found


def _tensors(infos: Iterable[tuple[str, tfs.meta_graph_pb2.TensorInfo]], where: str) -> list[SignatureTensor]:
    tensors = []
    for key, info in sorted(infos):
        here = f"{where} tensor {key!r}"
        if info.WhichOneof("encoding") != "name":
            raise InvalidArgument(f"{here}: sparse or composite tensors are not supported (dense tensors only)")
        if info.tensor_shape.unknown_rank:
            raise InvalidArgument(f"{here}: its rank is unknown; servelab needs a known rank (export with a shape)")
        shape = tuple(int(d.size) if d.size >= 0 else -1 for d in info.tensor_shape.dim)
        tensors.append(SignatureTensor(key, datatype_of(info.dtype, here), shape))
    return tensors


def signature_tensors(
    sig: tfs.meta_graph_pb2.SignatureDef, where: str
) -> tuple[list[SignatureTensor], list[SignatureTensor]]:
    return _tensors(sig.inputs.items(), f"{where} input"), _tensors(sig.outputs.items(), f"{where} output")


def same_interface(a: tfs.meta_graph_pb2.SignatureDef, b: tfs.meta_graph_pb2.SignatureDef) -> bool:
    """Whether two versions' signatures take and give the same tensors (names in the graph may differ)."""
    def view(sig: tfs.meta_graph_pb2.SignatureDef) -> tuple[object, ...]:
        def side(infos: object) -> list[tuple[str, int, str]]:
            return [(k, v.dtype, v.tensor_shape.SerializeToString(deterministic=True))
                    for k, v in sorted(infos.items())]  # type: ignore[attr-defined]
        return sig.method_name, side(sig.inputs), side(sig.outputs)
    return view(a) == view(b)


def primary_signature(keys: Iterable[str]) -> str:
    """The signature served under the TF Serving model's own name."""
    keys = sorted(keys)
    return tfs.DEFAULT_SIGNATURE if tfs.DEFAULT_SIGNATURE in keys else keys[0]


def signature_model_names(model: str, keys: Iterable[str]) -> dict[str, str]:
    """signature -> servelab model name (``m`` for the primary, ``m:s`` for the others)."""
    keys = sorted(keys)
    primary = primary_signature(keys)
    names = {}
    for key in keys:
        name = model if key == primary else f"{model}{_SEPARATOR}{key}"
        names[key] = check_model_name(name, f"model {model!r} signature {key!r} (as servelab model name)")
    return names


def signature_config(
    name: str,
    model: str,
    key: str,
    sig: tfs.meta_graph_pb2.SignatureDef,
    *,
    batching: BatchingPlan | None = None,
    policy: mc.ModelVersionPolicy | None = None,
) -> mc.ModelConfig:
    """The config.pbtxt of servelab model ``name``: signature ``key`` of TF Serving model ``model``."""
    where = f"model {model!r} signature {key!r}"
    inputs, outputs = signature_tensors(sig, where)
    if not inputs or not outputs:
        raise InvalidArgument(f"{where}: a signature needs at least one input and one output")
    config = mc.ModelConfig(name=name, platform="tensorflow_savedmodel", backend="tensorflow")
    batched = all(t.shape and t.shape[0] == -1 for t in inputs + outputs)
    config.max_batch_size = NO_ROW_LIMIT if batched else 0
    for kind, tensors, field in (("input", inputs, config.input), ("output", outputs, config.output)):
        for t in tensors:
            _add_tensor(field.add(), t, batched, f"{where} {kind} {t.key!r}")
    if batched and batching is not None:
        batching.apply(config)
    if policy is not None:
        config.version_policy.CopyFrom(policy)
    _set(config, PARAM_SIGNATURE, key)
    _set(config, PARAM_MODEL, model)
    _set(config, PARAM_SIGNATURE_DEF, json_format.MessageToJson(sig, indent=None, sort_keys=True))
    return config


def _add_tensor(t: mc.ModelInput | mc.ModelOutput, spec: SignatureTensor, batched: bool, where: str) -> None:
    t.name = spec.key
    t.data_type = mc.DataType.Value(spec.datatype.triton_name)
    dims = spec.shape[1:] if batched else spec.shape
    if dims:
        t.dims.extend(dims)
    elif batched:  # Triton's form of a tensor that is only the batch axis
        t.dims.append(1)
        t.reshape.SetInParent()
    else:
        raise InvalidArgument(f"{where}: scalar tensors of a signature that does not batch are not supported")


def set_primary(config: mc.ModelConfig, names: dict[str, str], labels: dict[str, int]) -> None:
    """Mark ``config`` as the primary: which servelab model serves each signature, and the labels."""
    _set(config, PARAM_SIGNATURES, json.dumps(names, sort_keys=True))
    _set(config, PARAM_LABELS, json.dumps(labels, sort_keys=True))


def _set(config: mc.ModelConfig, key: str, value: str) -> None:
    config.parameters[key].string_value = value


def version_folders(base_path: Path, model: str) -> dict[int, Path]:
    """Numbered folders of ``base_path`` holding a SavedModel, as TF Serving reads them ('00123' is 123).

    Each goes through :func:`servelab.trust.resolve_inside`: a version folder linked out of the base
    path is refused (the base path itself is the operator's).
    """
    if not base_path.is_dir():
        raise InvalidArgument(f"model {model!r}: its base_path is not a folder (yet); expected <base_path>/<version>/")
    found: dict[int, Path] = {}
    for child in sorted(base_path.iterdir()):
        if not (child.name.isascii() and child.name.isdigit()) or not child.is_dir():
            continue
        version = int(child.name)
        if version == 0:
            continue  # TF Serving ignores version 0 too
        folder = resolve_inside(base_path, child.name, f"model {model!r} version folder {child.name}",
                                within="the model's base_path")
        if not any((folder / f).is_file() for f in ("saved_model.pb", "saved_model.pbtxt")):
            continue  # still being written, or not a SavedModel: TF Serving skips it as well
        if version in found:
            raise InvalidArgument(f"model {model!r}: folders {found[version].name} and {child.name} are both version {version}")
        found[version] = child
    return found


def select_versions(policy: mc.ModelVersionPolicy, available: list[int], model: str) -> list[int]:
    """The versions a TF Serving policy serves, ascending; a listed version that is missing is skipped
    (TF Serving waits for it), and none at all is an error."""
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        chosen = sorted(available)
    elif which == "specific":
        chosen = [v for v in sorted(set(policy.specific.versions)) if v in available]
        missing = sorted(set(policy.specific.versions) - set(available))
        if missing and chosen:
            log.warning("model %s: versions %s of its specific policy have no SavedModel yet", model, missing)
    else:
        chosen = sorted(available)[-max(1, policy.latest.num_versions):]
    if not chosen:
        wanted = f" (policy asks for {list(policy.specific.versions)})" if which == "specific" else ""
        raise InvalidArgument(
            f"model {model!r}: no servable version under its base_path{wanted}; "
            f"found versions {sorted(available)}; expected <base_path>/<version>/saved_model.pb"
        )
    return chosen

"""TF Serving names -> servelab models: signatures, version labels, status and signature metadata.

A TF Serving model ``m`` is the servelab model ``m`` (its primary signature) plus one servelab model
per other signature; which is which is a parameter of ``m``'s config
(:mod:`servelab.repository.tfserving_layout`). Any other servelab model (ONNX, TorchScript ...)
answers too, as a model with one ``serving_default`` predict signature made from its metadata.
Version labels and the default ("latest") version are the router's (:mod:`servelab.core.routing`):
a models.config's ``version_labels`` are one source of its labels, a policy file and rollouts others.
Parsed views are cached per config object, so a request costs dict lookups, not JSON parsing; a
reload brings a new config object and so a new view.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format

from servelab.core.dataplane import DataPlane
from servelab.errors import InvalidArgument, NotFound
from servelab.protocol import model_config_pb2 as mc
from servelab.protocol import tfserving as tfs
from servelab.repository.tfserving_layout import PARAM_SIGNATURE, PARAM_SIGNATURE_DEF, PARAM_SIGNATURES
from servelab.types import DataType

__all__ = ["Catalog", "InputView", "ModelView", "SignatureView", "Target", "VersionStatus"]

#: OIP datatype -> TensorFlow DT_* value
TF_DTYPES: dict[DataType, int] = {
    DataType.BOOL: tfs.types_pb2.DT_BOOL, DataType.UINT8: tfs.types_pb2.DT_UINT8,
    DataType.UINT16: tfs.types_pb2.DT_UINT16, DataType.UINT32: tfs.types_pb2.DT_UINT32,
    DataType.UINT64: tfs.types_pb2.DT_UINT64, DataType.INT8: tfs.types_pb2.DT_INT8,
    DataType.INT16: tfs.types_pb2.DT_INT16, DataType.INT32: tfs.types_pb2.DT_INT32,
    DataType.INT64: tfs.types_pb2.DT_INT64, DataType.FP16: tfs.types_pb2.DT_HALF,
    DataType.FP32: tfs.types_pb2.DT_FLOAT, DataType.FP64: tfs.types_pb2.DT_DOUBLE,
    DataType.BF16: tfs.types_pb2.DT_BFLOAT16, DataType.BYTES: tfs.types_pb2.DT_STRING,
}
_STATES = {"READY": "AVAILABLE", "LOADING": "LOADING", "UNLOADING": "UNLOADING", "UNAVAILABLE": "END"}


@dataclass(frozen=True)
class InputView:
    """One signature input as the servelab model takes it."""

    datatype: DataType
    #: the config's dims (after the batch axis when batched); Triton's ``[1]`` + empty reshape for a
    #: tensor that is only the batch axis, in which case TF Serving's [N] tensor is sent as [N, 1]
    dims: tuple[int, ...]
    expand: bool


@dataclass(frozen=True)
class SignatureView:
    """One signature: the servelab model that runs it and its TF Serving SignatureDef."""

    key: str
    servelab_name: str
    signature_def: tfs.meta_graph_pb2.SignatureDef
    inputs: dict[str, InputView]
    batched: bool

    @property
    def method(self) -> str:
        return self.signature_def.method_name


@dataclass(frozen=True)
class ModelView:
    """A TF Serving model: signature -> servelab model."""

    name: str
    signatures: dict[str, str]


@dataclass(frozen=True)
class Target:
    """What a ModelSpec resolved to: the model, the signature, the version ("" = the newest)."""

    model: ModelView
    signature: SignatureView
    version: str


@dataclass(frozen=True)
class VersionStatus:
    """One row of GetModelStatus."""

    version: int
    state: str  #: AVAILABLE, LOADING, UNLOADING or END
    error_code: str  #: OK, or UNKNOWN with a message
    error_message: str


class Catalog:
    """The TF Serving view of a data plane; one per front door (it only caches parsed configs)."""

    def __init__(self, dataplane: DataPlane) -> None:
        self.dataplane = dataplane
        self._models: dict[str, tuple[mc.ModelConfig, ModelView]] = {}
        self._signatures: dict[str, tuple[mc.ModelConfig, SignatureView]] = {}

    def model(self, name: str) -> ModelView:
        """The TF Serving model ``name`` (NotFound as TF Serving words it)."""
        try:
            config = self.dataplane.model_config(name)
        except NotFound:
            raise NotFound(f"Servable not found for request: Latest({name})") from None
        cached = self._models.get(name)
        if cached is not None and cached[0] is config:
            return cached[1]
        view = _model_view(name, config)
        self._models[name] = (config, view)
        return view

    def label_version(self, name: str, label: str) -> str:
        """The version ``label`` names now (the router's labels), NotFound as TF Serving words it."""
        try:
            return self.dataplane.resolve_version(name, label)
        except NotFound as exc:
            raise NotFound(f"Unrecognized servable version label: {label} ({exc.message})") from None

    def resolve(self, name: str, version: str = "", label: str = "", signature: str = "") -> Target:
        """A ModelSpec's name, version (number) or label, and signature_name ("" = serving_default)."""
        model = self.model(name)
        if label:
            version = self.label_version(name, label)
        key = signature or tfs.DEFAULT_SIGNATURE
        servelab_name = model.signatures.get(key)
        if servelab_name is None:
            raise InvalidArgument(
                f"Serving signature name: {key!r} not found in signature def; model {name!r} has "
                f"{sorted(model.signatures)}"
            )
        return Target(model, self.signature(servelab_name, version, name), version)

    def signature(self, servelab_name: str, version: str = "", model: str = "") -> SignatureView:
        try:
            config = self.dataplane.model_config(servelab_name, version)
        except NotFound:
            where = f"Specific({model or servelab_name}, {version})" if version else f"Latest({model or servelab_name})"
            raise NotFound(f"Servable not found for request: {where}") from None
        cached = self._signatures.get(servelab_name)
        if cached is not None and cached[0] is config:
            return cached[1]
        view = _signature_view(servelab_name, config, self.dataplane)
        self._signatures[servelab_name] = (config, view)
        return view

    def version(self, name: str, version: str = "", label: str = "") -> str:
        """The version a (version, label) pair names; the default (routing's; else the newest) when neither is."""
        self.model(name)  # NotFound for an unknown model, whatever the version
        if label:
            return self.label_version(name, label)
        return version or self.dataplane.resolve_version(name)

    def signature_def_map(self, name: str, version: str) -> tfs.get_model_metadata_pb2.SignatureDefMap:
        """Every signature of the model (GetModelMetadata's ``signature_def``)."""
        model = self.model(name)
        self.signature(name, version, name)  # the version must exist (NotFound otherwise)
        result = tfs.get_model_metadata_pb2.SignatureDefMap()
        for key, servelab_name in sorted(model.signatures.items()):
            try:
                view = self.signature(servelab_name, version, name)
            except NotFound:
                continue  # a signature that this version does not have
            result.signature_def[key].CopyFrom(view.signature_def)
        return result

    def status(self, name: str, version: str = "", label: str = "") -> list[VersionStatus]:
        """GetModelStatus: every version of the model, or the one asked for (by number or label)."""
        rows = [r for r in self.dataplane.repository_index()
                if r["name"] == name and not (r["state"] == "UNAVAILABLE" and r["reason"] == "unloaded")]
        if not rows:
            raise NotFound(f"Servable not found for request: Latest({name})")
        if label:
            version = self.label_version(name, label)
        if version:
            rows = [r for r in rows if r["version"] == version]
            if not rows:
                raise NotFound(f"Servable not found for request: Specific({name}, {version})")
        return [_status_row(r) for r in rows]


def _status_row(row: dict[str, str]) -> VersionStatus:
    state = _STATES.get(row["state"], "START" if not row["state"] else "UNKNOWN")
    failed = row["state"] == "UNAVAILABLE" and row["reason"] not in ("", "unloaded")
    return VersionStatus(int(row["version"] or 0), state, "UNKNOWN" if failed else "OK",
                         row["reason"] if failed else "")


def _param(config: mc.ModelConfig, key: str) -> str | None:
    return config.parameters[key].string_value if key in config.parameters else None


def _model_view(name: str, config: mc.ModelConfig) -> ModelView:
    signatures = _param(config, PARAM_SIGNATURES)
    if signatures is None:  # a servelab model of another kind: one predict signature
        own = _param(config, PARAM_SIGNATURE) or tfs.DEFAULT_SIGNATURE
        return ModelView(name, {own: name})
    return ModelView(name, dict(json.loads(signatures)))


def _signature_view(name: str, config: mc.ModelConfig, dataplane: DataPlane) -> SignatureView:
    batched = config.max_batch_size > 0
    inputs = {
        t.name: InputView(
            DataType.from_triton(mc.DataType.Name(t.data_type)),
            tuple(t.dims),
            t.HasField("reshape") and not t.reshape.shape and tuple(t.dims) == (1,),
        )
        for t in config.input
    }
    text = _param(config, PARAM_SIGNATURE_DEF)
    sig = tfs.meta_graph_pb2.SignatureDef()
    if text is not None:
        json_format.Parse(text, sig)
    else:
        _synthesise(sig, dataplane.model_metadata(name))
    key = _param(config, PARAM_SIGNATURE) or tfs.DEFAULT_SIGNATURE
    return SignatureView(key, name, sig, inputs, batched)


def _synthesise(sig: tfs.meta_graph_pb2.SignatureDef, meta: dict[str, Any]) -> None:
    """A predict SignatureDef from OIP metadata, for models that came without one."""
    sig.method_name = tfs.PREDICT_METHOD
    for field, tensors in ((sig.inputs, meta["inputs"]), (sig.outputs, meta["outputs"])):
        for t in tensors:
            info = field[t["name"]]
            info.name = t["name"]
            info.dtype = TF_DTYPES[DataType(t["datatype"])]  # type: ignore[assignment]
            for d in t["shape"]:
                info.tensor_shape.dim.add(size=int(d))

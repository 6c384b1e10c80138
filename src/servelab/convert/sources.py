"""What ``servelab convert SOURCE`` starts from, loaded into one shape: inputs, outputs, and a reference.

A SOURCE is a TorchScript file (``.pt``/``.ts``), a ``torch.export`` program (``.pt2``), a Python file
exposing a module factory (``model.py`` or ``model.py:make_model``), an ONNX file, or a scikit-learn /
LightGBM / XGBoost model (a pickle or joblib file of the estimator; LightGBM's text model ``.txt``;
XGBoost's ``.json``/``.ubj``). The *reference* is the source run as it is (eager torch, ONNX Runtime on
the original file, the estimator's own ``predict``): every artefact is checked against it.

Most models batch: the first axis of every input and output is the batch. A model whose inputs have
leading dimensions of their own (GraphSAGE layers: x [n_all, F], nbr1 [n1, k], nbr2 [B, k]) does not: its
Python file says ``max_batch_size = 0`` (and may give ``dynamic_axes``), or ``--max-batch-size 0`` says
so for any source; it is then served with ``max_batch_size: 0`` and fed whole requests.

Pickles run code when loaded: give convert only files you would import.
"""

from __future__ import annotations

import importlib.util
import pickle
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from servelab.errors import InvalidArgument, Unsupported
from servelab.types import DataType

__all__ = ["TORCH_KINDS", "Source", "SourceKind", "TensorInfo", "load_source", "parse_input_option"]

SourceKind = Literal["torchscript", "torch_export", "python", "onnx", "sklearn", "lightgbm", "xgboost"]
TORCH_KINDS: tuple[str, ...] = ("torchscript", "torch_export", "python")
TABULAR_KINDS: tuple[str, ...] = ("sklearn", "lightgbm", "xgboost")
Task = Literal["classifier", "regressor", "other"]


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One model tensor: full shape with -1 for a dynamic dimension (the batch axis first when it batches)."""

    name: str
    dtype: DataType
    shape: tuple[int, ...]

    @property
    def dims(self) -> tuple[int, ...]:
        """The shape without the batch dimension (config.pbtxt ``dims`` when the model batches)."""
        return self.shape[1:]


@dataclass
class Source:
    """A loaded source model and how to run it as the reference."""

    kind: SourceKind
    path: Path
    inputs: list[TensorInfo]
    output_names: list[str]
    task: Task = "other"
    module: Any = None  # torch.nn.Module for torch kinds
    estimator: Any = None  # the fitted scikit-learn / LightGBM / XGBoost model
    #: False when the first axis is not a batch axis shared by every tensor (the file's max_batch_size = 0)
    batches: bool = True
    #: the file's own example request (``example_inputs()``), in input order: export traces it
    examples: list[np.ndarray] | None = None
    #: the file's ``dynamic_axes`` ({tensor: {axis: name}}), for export
    dynamic_axes: dict[str, dict[int, str]] | None = None
    _run: Callable[[dict[str, np.ndarray]], list[np.ndarray]] | None = field(default=None, repr=False)

    @property
    def is_torch(self) -> bool:
        return self.kind in TORCH_KINDS

    def reference(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The source's own outputs for ``feed`` (one array per output name, batch axis first)."""
        assert self._run is not None
        return self._run(feed)


def parse_input_option(text: str) -> TensorInfo:
    """``NAME:DTYPE:d1,d2`` (dims without the batch axis; DTYPE like FP32 or INT64) as a batched TensorInfo."""
    parts = text.split(":")
    if len(parts) != 3 or not parts[0]:
        raise InvalidArgument(f"--input {text!r}: expected NAME:DTYPE:d1,d2 (e.g. x:FP32:16)")
    name, dtype, dims = parts
    try:
        parsed = DataType.parse(dtype.upper().removeprefix("TYPE_"))
        shape = tuple(int(d) for d in dims.split(",") if d.strip())
    except (ValueError, InvalidArgument):
        raise InvalidArgument(
            f"--input {text!r}: DTYPE must be an OIP datatype (FP32, INT64, ...) and dims whole numbers"
        ) from None
    return TensorInfo(name, parsed, (-1, *shape))


def _torch_run(module: Any, inputs: list[TensorInfo]) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    import torch

    def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        tensors = [torch.from_numpy(np.ascontiguousarray(feed[t.name])) for t in inputs]
        with torch.inference_mode():
            out = module(*tensors)
        if isinstance(out, torch.Tensor):
            out = (out,)
        elif isinstance(out, dict):
            out = tuple(out.values())
        return [o.detach().cpu().numpy() for o in out]

    return run


def _probe_outputs(
    run: Callable[[dict[str, np.ndarray]], list[np.ndarray]], inputs: list[TensorInfo], examples: list[np.ndarray] | None
) -> int:
    if examples is not None:
        feed = {t.name: e for t, e in zip(inputs, examples, strict=True)}
    else:
        feed = {t.name: _zeros(t, 2) for t in inputs}
    return len(run(feed))


def _zeros(info: TensorInfo, batch: int) -> np.ndarray:
    shape = [batch if i == 0 and d < 0 else (1 if d < 0 else d) for i, d in enumerate(info.shape)]
    return np.zeros(shape, dtype=info.dtype.numpy_dtype)


def _names(given: list[str] | None, count: int, prefix: str) -> list[str]:
    if given:
        if len(given) != count:
            raise InvalidArgument(f"got {len(given)} {prefix.lower()} names {given} for {count} tensors")
        return list(given)
    return [f"{prefix}__{i}" for i in range(count)]


def _torch_source(
    kind: SourceKind, path: Path, module: Any, inputs: list[TensorInfo], output_names: list[str] | None, task: Task,
    batching: _Batching | None = None,
) -> Source:  # fmt: skip
    run = _torch_run(module, inputs)
    b = batching or _Batching()
    outputs = _names(output_names, _probe_outputs(run, inputs, b.examples), "OUTPUT")
    return Source(kind, path, inputs, outputs, task, module=module, batches=b.batches, examples=b.examples,
                  dynamic_axes=b.dynamic_axes, _run=run)  # fmt: skip


@dataclass
class _Batching:
    """What a Python source file says about batching: whether it does, its example request, its dynamic axes."""

    batches: bool = True
    examples: list[np.ndarray] | None = None
    dynamic_axes: dict[str, dict[int, str]] | None = None


def _file_dynamic_axes(code: Any, path: Path) -> dict[str, dict[int, str]] | None:
    axes = getattr(code, "dynamic_axes", None)
    if axes is None:
        return None
    try:
        return {str(name): {int(a): str(n) for a, n in dims.items()} for name, dims in axes.items()}
    except (AttributeError, TypeError, ValueError):
        raise InvalidArgument(f"{path}: dynamic_axes must map tensor names to {{axis: name}}, e.g. {{'x': {{0: 'rows'}}}}") from None


def _unbatched_info(name: str, example: np.ndarray, dtype: DataType, axes: dict[int, str] | None) -> TensorInfo:
    """A tensor of a model that does not batch: the example's shape, -1 at its dynamic axes (default axis 0)."""
    dynamic = set(axes) if axes is not None else {0}
    return TensorInfo(name, dtype, tuple(-1 if i in dynamic else d for i, d in enumerate(example.shape)))


def _need_inputs(inputs: list[TensorInfo] | None, path: Path) -> list[TensorInfo]:
    if not inputs:
        raise InvalidArgument(
            f"{path}: a TorchScript file does not record its input shapes; give --input NAME:DTYPE:dims "
            "per forward argument (e.g. --input INPUT__0:FP32:16)"
        )
    return inputs


def _load_torchscript(path: Path, inputs: list[TensorInfo] | None, outputs: list[str] | None, task: Task) -> Source:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(str(path), map_location="cpu").eval()
    return _torch_source("torchscript", path, module, _need_inputs(inputs, path), outputs, task)


def _load_program(path: Path, inputs: list[TensorInfo] | None, outputs: list[str] | None, task: Task) -> Source:
    import torch

    program = torch.export.load(str(path))
    if not inputs:
        nodes = {n.name: n for n in program.graph.nodes}
        inputs = []
        for i, name in enumerate(program.graph_signature.user_inputs):
            val = nodes[name].meta.get("val")
            dtype = DataType.from_triton(f"TYPE_{_TORCH_DTYPES.get(str(val.dtype), 'FP32')}")
            shape = tuple(d if isinstance(d, int) else -1 for d in val.shape)
            inputs.append(TensorInfo(f"INPUT__{i}", dtype, shape))
    return _torch_source("torch_export", path, _ProgramModule.wrap(program.module()), inputs, outputs, task)


def _program_module_class() -> type:
    import torch

    class ProgramModule(torch.nn.Module):
        """A torch.export program's module behind a plain Module: exporters call ``train(False)``, which
        the program's GraphModule refuses, so it is held outside the submodule tree."""

        def __init__(self, graph_module: Any) -> None:
            super().__init__()
            for param in graph_module.parameters():  # traced as constants: no autograd state
                param.requires_grad_(False)
            object.__setattr__(self, "_program", graph_module)

        def forward(self, *args: Any) -> Any:
            return self.__dict__["_program"](*args)

    return ProgramModule


class _ProgramModule:
    @staticmethod
    def wrap(graph_module: Any) -> Any:
        return _program_module_class()(graph_module)


_TORCH_DTYPES = {
    "torch.float32": "FP32", "torch.float16": "FP16", "torch.float64": "FP64", "torch.int64": "INT64",
    "torch.int32": "INT32", "torch.int8": "INT8", "torch.uint8": "UINT8", "torch.bool": "BOOL",
}  # fmt: skip


def _import_file(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"servelab_convert_source_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise InvalidArgument(f"{path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_python(
    path: Path, factory: str, inputs: list[TensorInfo] | None, outputs: list[str] | None, task: Task
) -> Source:
    """``make_model()`` (or the named factory) returns the module; the file may also define
    ``example_inputs()`` (tensors), ``input_names``, ``output_names``, ``task``, and for a model that does
    not batch ``max_batch_size = 0`` and ``dynamic_axes`` (default: axis 0 of every tensor, each its own)."""
    import torch

    code = _import_file(path)
    make = getattr(code, factory, None)
    if not callable(make):
        raise InvalidArgument(f"{path} defines no callable {factory!r}; expected a function returning a torch module")
    module = make()
    if not isinstance(module, torch.nn.Module):
        raise InvalidArgument(f"{path}:{factory} returned {type(module).__name__}, expected a torch.nn.Module")
    module.eval()
    batching = _Batching(batches=int(getattr(code, "max_batch_size", 1)) > 0, dynamic_axes=_file_dynamic_axes(code, path))
    if hasattr(code, "example_inputs"):
        examples = code.example_inputs()
        examples = (examples,) if isinstance(examples, torch.Tensor) else tuple(examples)
        names = _names(getattr(code, "input_names", None), len(examples), "INPUT")
        dtypes = [DataType.from_triton(f"TYPE_{_TORCH_DTYPES[str(t.dtype)]}") for t in examples]
        if not batching.batches:
            batching.examples = [t.detach().cpu().numpy() for t in examples]
        if not inputs and batching.batches:
            inputs = [TensorInfo(n, d, (-1, *t.shape[1:])) for n, d, t in zip(names, dtypes, examples, strict=True)]
        elif not inputs:
            axes = batching.dynamic_axes
            inputs = [_unbatched_info(n, e, d, None if axes is None else axes.get(n, {}))
                      for n, d, e in zip(names, dtypes, batching.examples or [], strict=True)]  # fmt: skip
    outputs = outputs or getattr(code, "output_names", None)
    task = getattr(code, "task", task) if task == "other" else task
    return _torch_source("python", path, module, _need_inputs(inputs, path), outputs, task, batching)


def _load_onnx(path: Path, task: Task) -> Source:
    import onnxruntime as ort

    from servelab.backends.onnxruntime import onnx_specs

    specs, outs = onnx_specs(path)
    inputs = [TensorInfo(s.name, s.dtype, s.shape) for s in specs]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in outs]

    def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(a) for a in session.run(names, feed)]

    return Source("onnx", path, inputs, names, task, _run=run)


def _load_estimator(path: Path) -> tuple[SourceKind, Any]:
    suffix = path.suffix.lower()
    if suffix == ".txt":
        import lightgbm

        return "lightgbm", lightgbm.Booster(model_file=str(path))
    if suffix in (".json", ".ubj"):
        try:
            import xgboost
        except ImportError as exc:
            raise Unsupported(f"{path}: an XGBoost model needs xgboost (pip install xgboost-cpu): {exc}") from exc
        booster = xgboost.Booster()
        booster.load_model(str(path))
        return "xgboost", booster
    if suffix == ".joblib":
        import joblib

        estimator = joblib.load(path)
    else:
        with path.open("rb") as f:
            estimator = pickle.load(f)  # the user's own file, named on the command line
    return _estimator_kind(estimator), estimator


def _estimator_kind(estimator: Any) -> SourceKind:
    module = type(estimator).__module__.split(".")[0]
    if module == "lightgbm":
        return "lightgbm"
    if module == "xgboost":
        return "xgboost"
    if module == "sklearn" or hasattr(estimator, "predict"):
        return "sklearn"
    raise InvalidArgument(f"a pickled {type(estimator).__name__} is not a scikit-learn, LightGBM or XGBoost model")


def _n_features(estimator: Any) -> int:
    for attr in ("n_features_in_", "n_features_"):
        if isinstance(getattr(estimator, attr, None), int):
            return int(getattr(estimator, attr))
    if hasattr(estimator, "num_feature"):  # lightgbm.Booster / xgboost.Booster
        return int(estimator.num_feature() if callable(estimator.num_feature) else estimator.num_feature)
    if hasattr(estimator, "num_features"):
        return int(estimator.num_features())
    raise InvalidArgument(f"cannot tell how many features {type(estimator).__name__} takes")


def _is_classifier(estimator: Any, path: Path) -> bool:
    """Estimators with ``predict_proba`` classify; a bare booster must be a regression model."""
    if hasattr(estimator, "predict_proba"):
        return True
    params = getattr(estimator, "params", None)
    objective = str(params.get("objective", "")) if isinstance(params, dict) else ""
    if objective.startswith(("binary", "multiclass", "multi:", "binary:", "lambdarank", "rank:")):
        raise Unsupported(
            f"{path}: a bare booster with objective {objective!r}; save the classifier as a pickled "
            "LGBMClassifier / XGBClassifier so its classes are known, or use a regression objective"
        )
    return False


def _load_tabular(path: Path) -> Source:
    kind, estimator = _load_estimator(path)
    features = _n_features(estimator)
    classifier = _is_classifier(estimator, path)
    inputs = [TensorInfo("input", DataType.FP32, (-1, features))]
    if classifier:
        outputs = ["label", "probabilities"]

        def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
            x = feed["input"]
            proba = np.asarray(estimator.predict_proba(x), dtype=np.float32)
            return [np.asarray(estimator.predict(x)).astype(np.int64), proba]
    else:
        outputs = ["variable"]

        def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
            pred = np.asarray(_predict(estimator, feed["input"]), dtype=np.float32)
            return [pred.reshape(len(pred), -1)]

    return Source(kind, path, inputs, outputs, "classifier" if classifier else "regressor", estimator=estimator, _run=run)


def _predict(estimator: Any, x: np.ndarray) -> Any:
    if type(estimator).__name__ == "Booster" and type(estimator).__module__.startswith("xgboost"):
        import xgboost

        return estimator.predict(xgboost.DMatrix(x))
    return estimator.predict(x)


def load_source(
    source: str,
    inputs: list[TensorInfo] | None = None,
    output_names: list[str] | None = None,
    task: Task = "other",
) -> Source:
    """Load SOURCE (see the module docstring); ``inputs`` are needed for TorchScript files."""
    text, _, factory = source.partition(".py:")
    path = Path(text + ".py") if factory else Path(source)
    if not path.exists():
        raise InvalidArgument(f"source {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".py":
        return _load_python(path, factory or "make_model", inputs, output_names, task)
    if suffix in (".pt", ".ts", ".torchscript"):
        return _load_torchscript(path, inputs, output_names, task)
    if suffix == ".pt2":
        return _load_program(path, inputs, output_names, task)
    if suffix == ".onnx":
        return _load_onnx(path, task)
    if suffix in (".pkl", ".pickle", ".joblib", ".txt", ".json", ".ubj"):
        return _load_tabular(path)
    raise InvalidArgument(
        f"source {path}: unknown kind {suffix!r}; expected .pt (TorchScript), .pt2 (torch.export), .py (a module "
        "factory), .onnx, or a scikit-learn/LightGBM/XGBoost model (.pkl/.joblib, LightGBM .txt, XGBoost .json/.ubj)"
    )

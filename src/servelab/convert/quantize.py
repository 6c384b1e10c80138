"""Lower precisions of an fp32 ONNX model, for ONNX Runtime and OpenVINO.

- FP16: ONNX Runtime's float16 converter, inputs and outputs kept fp32 (clients send the same tensors);
  OpenVINO IR with fp16 weights (and ``INFERENCE_PRECISION_HINT f16`` in the config, where the CPU has it).
- INT8 dynamic (ONNX Runtime): weights int8, activations quantised per call; no calibration data.
- INT8 static: ONNX Runtime QDQ with activation ranges calibrated on samples (MinMax), or NNCF's
  post-training quantisation for OpenVINO on the same samples.

Each function returns False when the model has nothing the precision applies to (a tree ensemble has no
fp16 or int8 kernels), so the caller can say "skipped: this model cannot take int8" instead of writing a
copy under another name.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx

from servelab.errors import InvalidArgument

__all__ = [
    "MIN_CALIBRATION_SAMPLES",
    "onnx_fp16",
    "onnx_int8_dynamic",
    "onnx_int8_static",
    "openvino_int8",
    "openvino_ir",
]

Feed = dict[str, np.ndarray]
#: below this many calibration samples the converter still runs, but says the ranges may be too narrow
MIN_CALIBRATION_SAMPLES = 32
_QUANT_OPS = {"QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "QLinearConv",
              "QLinearMatMul", "DynamicQuantizeMatMul", "QGemm"}  # fmt: skip


def _has_fp16(model: onnx.ModelProto) -> bool:
    fp16 = onnx.TensorProto.FLOAT16
    if any(init.data_type == fp16 for init in model.graph.initializer):
        return True
    return any(
        a.name == "to" and a.i == fp16 for n in model.graph.node if n.op_type == "Cast" for a in n.attribute
    )


def _has_int8(model: onnx.ModelProto) -> bool:
    return any(n.op_type in _QUANT_OPS for n in model.graph.node)


def onnx_fp16(src: Path, dst: Path) -> bool:
    """fp16 weights and compute, fp32 inputs/outputs; False when no operator of the model runs in fp16."""
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    model = onnx.load(str(src))
    blocked = {*DEFAULT_OP_BLOCK_LIST, "Identity", "Cast"}
    if all(n.op_type in blocked for n in model.graph.node):
        return False  # every operator stays fp32 (e.g. a tree ensemble): only casts would be added
    half = convert_float_to_float16(model, keep_io_types=True, disable_shape_infer=False)
    if not _has_fp16(half):
        return False
    onnx.save(half, str(dst))
    return True


def onnx_int8_dynamic(src: Path, dst: Path) -> bool:
    """int8 weights, activations quantised at run time (MatMul/Gemm/Conv/attention ops). Weights use 7 bits
    (``reduce_range``): on a CPU without VNNI (AVX2 only, the AMD EPYC hosts here) ONNX Runtime's u8 x s8 kernels
    add pairs of products in 16 bits, which saturate with full-range weights (ONNX Runtime's quantization docs);
    there a small MLP's dynamic int8 came out at 0.111 relative error against 0.1 tolerated, with it under."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet():
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, reduce_range=True)
    if not _has_int8(onnx.load(str(dst))):
        dst.unlink(missing_ok=True)
        return False
    return True


class _Reader:
    """ONNX Runtime's CalibrationDataReader protocol over a list of feeds."""

    def __init__(self, feeds: list[Feed]) -> None:
        self._it: Iterator[Feed] = iter(feeds)

    def get_next(self) -> Feed | None:
        return next(self._it, None)

    def rewind(self) -> None:  # pragma: no cover - only some calibrators call it
        pass


def _calibration_feeds(samples: list[Feed], batched: bool = True) -> list[Feed]:
    """One feed per sample: a batch of one item, or (a model that does not batch) the whole request."""
    if not samples:
        raise InvalidArgument("static int8 needs calibration samples (--calibration FILE or --data FILE)")
    return [{k: np.ascontiguousarray(v[None] if batched else v) for k, v in s.items()} for s in samples]


def onnx_int8_static(src: Path, dst: Path, samples: list[Feed], batched: bool = True) -> bool:
    """QDQ int8 with MinMax activation ranges from ``samples`` (one item each without the batch axis, or
    whole requests of a model that does not batch); 7-bit weights, as in :func:`onnx_int8_dynamic`."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    feeds = _calibration_feeds(samples, batched)
    with tempfile.TemporaryDirectory() as tmp, _quiet():
        prepared = Path(tmp) / "prepared.onnx"
        try:
            quant_pre_process(str(src), str(prepared), skip_symbolic_shape=True)
        except Exception:  # pre-processing only helps; quantise the original when it fails
            prepared = src
        quantize_static(
            str(prepared), str(dst), _Reader(feeds), quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True, reduce_range=True,
        )  # fmt: skip
    if not _has_int8(onnx.load(str(dst))):
        dst.unlink(missing_ok=True)
        return False
    return True


def openvino_ir(src: Path, dst: Path, fp16: bool = False) -> Path:
    """OpenVINO IR (``model.xml`` + ``model.bin``) from ONNX; fp16 weights when asked."""
    import openvino as ov

    from servelab.backends.openvino_convert import convert_onnx

    dst.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(convert_onnx(src), str(dst), compress_to_fp16=fp16)
    return dst


def openvino_int8(src: Path, dst: Path, samples: list[Feed], batched: bool = True) -> Path:
    """NNCF post-training quantisation of the ONNX model for OpenVINO, calibrated on ``samples``."""
    import openvino as ov

    from servelab.backends.openvino_convert import convert_onnx, quiet_openvino

    feeds = _calibration_feeds(samples, batched)
    model = convert_onnx(src)
    with quiet_openvino(), _quiet():
        import nncf  # first imported here, NNCF reads its telemetry switch inside quiet_openvino

        quantized = nncf.quantize(model, nncf.Dataset(feeds), subset_size=len(feeds))
    dst.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(quantized, str(dst), compress_to_fp16=False)
    return dst


class _quiet:
    """Silence the quantisers' INFO logging and progress bars for the duration."""

    def __enter__(self) -> None:
        self._levels = {}
        for name in ("root", "nncf", "onnxruntime"):
            logger = logging.getLogger(None if name == "root" else name)
            self._levels[name] = logger.level
            logger.setLevel(logging.ERROR)

    def __exit__(self, *exc: object) -> None:
        for name, level in self._levels.items():
            logging.getLogger(None if name == "root" else name).setLevel(level)

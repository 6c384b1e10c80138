"""MLServer custom runtime: one ONNX model on onnxruntime (runs inside MLServer's own venv).

Copied next to ``model-settings.json`` as ``servelab_ort_runtime.py``; MLServer imports it through the
``implementation`` setting. Adaptive batching is MLServer's own (``max_batch_size``, ``max_batch_time``):
it hands ``predict`` one request whose tensors are the merged batch.
"""

from __future__ import annotations

import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse
from mlserver.utils import get_model_uri


class OrtRuntime(MLModel):
    """Decodes each input with NumpyCodec, runs the session once, encodes every output."""

    async def load(self) -> bool:
        path = await get_model_uri(self._settings, wellknown_filenames=["model.onnx"])
        extra = (self._settings.parameters.extra or {}) if self._settings.parameters else {}
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(extra.get("intra_op_threads", 0))
        self._session = ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])
        self._output_names = [o.name for o in self._session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {inp.name: NumpyCodec.decode_input(inp) for inp in payload.inputs}
        results = self._session.run(None, feeds)
        return InferenceResponse(
            model_name=self.name,
            model_version=self.version,
            id=payload.id,
            outputs=[
                NumpyCodec.encode_output(n, r) for n, r in zip(self._output_names, results, strict=True)
            ],
        )

"""A python-backend ``model.py`` that runs the ``model.onnx`` beside it with onnxruntime.

Triton's python backend has no ONNX Runtime inside it here (the nvidia-pytriton wheel ships only the
python backend), so ``servelab compare --targets triton`` serves an ONNX model through this file, and the
table says so. It is also the onnxruntime-inside model of ``examples/triton_models`` and
``benchmarks/vs_triton.py``: the same file loads on Triton and on servelab, each of which provides
``triton_python_backend_utils``.

Config ``parameters`` it reads: ``onnx_file`` (default ``model.onnx`` in the version folder) and
``intra_op_threads`` (default 1: one request runs on one core, on both servers alike). When Triton or
servelab hands ``execute`` several requests of a batching model, they run as one concatenated batch.
"""

import json
import os

import numpy as np
import onnxruntime as ort

import triton_python_backend_utils as pb_utils


def _parameter(config, key, default):
    value = config.get("parameters", {}).get(key, {}).get("string_value")
    return default if value in (None, "") else value


class TritonPythonModel:
    """initialize / execute / finalize, one response per request (each with its own error)."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        folder = os.path.join(args["model_repository"], args["model_version"])
        path = os.path.join(folder, _parameter(config, "onnx_file", "model.onnx"))
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(_parameter(config, "intra_op_threads", "1"))
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [o["name"] for o in config["output"]]
        self.batching = int(config.get("max_batch_size", 0)) > 0

    def _feeds(self, request):
        feeds = {}
        for name in self.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                raise ValueError(f"input {name!r} is missing; the model takes {self.inputs}")
            feeds[name] = tensor.as_numpy()
        return feeds

    def _respond(self, arrays):
        tensors = [pb_utils.Tensor(n, np.ascontiguousarray(a)) for n, a in zip(self.outputs, arrays, strict=True)]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests):
        good, failed = [], {}
        for i, request in enumerate(requests):
            try:
                good.append(self._feeds(request))
            except ValueError as exc:
                failed[i] = pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(exc)))
        if self.batching and len(good) > 1:
            merged = {n: np.concatenate([f[n] for f in good]) for n in self.inputs}
            outs = self.session.run(self.outputs, merged)
            cuts = np.cumsum([len(f[self.inputs[0]]) for f in good])[:-1]
            parts = [np.split(o, cuts) for o in outs]
            answers = [self._respond([p[k] for p in parts]) for k in range(len(good))]
        else:
            answers = [self._respond(self.session.run(self.outputs, f)) for f in good]
        it = iter(answers)
        return [failed[i] if i in failed else next(it) for i in range(len(requests))]

    def finalize(self):
        self.session = None

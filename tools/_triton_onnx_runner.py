"""A python-backend model.py for Triton that runs the ONNX file beside it (``runner.onnx``) with onnxruntime.

Used only on the Triton side of tools/triton_client_examples.py (servelab serves the ONNX files itself):
Triton here has no ONNX Runtime backend. Unlike the runner ``servelab compare`` generates, it feeds every
input the ONNX session declares (a sequence model's file also takes the control inputs START, END, READY,
CORRID that Triton's sequence batcher adds), turns BYTES tensors into the str tensors onnxruntime wants and
back, and keeps its file under a name Triton's auto-complete does not take for an ONNX Runtime model (the
model-control examples load it with a config override that names no backend).
"""

import os

import numpy as np
import onnxruntime as ort

import triton_python_backend_utils as pb_utils

ONNX_FILE = "runner.onnx"


def _to_ort(array, kind):
    if kind == "tensor(string)":
        return np.array([v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in array.reshape(-1)],
                        dtype=object).reshape(array.shape)
    if kind == "tensor(uint64)":
        return array.astype(np.uint64)
    return array


def _from_ort(array):
    if array.dtype == object:
        return np.array([v.encode("utf-8") if isinstance(v, str) else v for v in array.reshape(-1)],
                        dtype=object).reshape(array.shape)
    return np.ascontiguousarray(array)


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], ONNX_FILE)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
        self.inputs = [(i.name, i.type) for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def execute(self, requests):
        responses = []
        for request in requests:
            feeds = {}
            for name, kind in self.inputs:
                feeds[name] = _to_ort(pb_utils.get_input_tensor_by_name(request, name).as_numpy(), kind)
            arrays = self.session.run(self.outputs, feeds)
            tensors = [pb_utils.Tensor(n, _from_ort(a)) for n, a in zip(self.outputs, arrays, strict=True)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses

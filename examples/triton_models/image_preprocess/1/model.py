"""A numpy pre-processing step: scale UINT8 pixels to [0, 1], normalise per channel, HWC -> CHW.

Runs unchanged on Triton's python backend and on servelab's: both provide ``triton_python_backend_utils``.
"""

import numpy as np

import triton_python_backend_utils as pb_utils

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


class TritonPythonModel:
    def initialize(self, args):
        self.scale = (1.0 / (255.0 * STD)).astype(np.float32)
        self.shift = (MEAN / STD).astype(np.float32)

    def execute(self, requests):
        responses = []
        for request in requests:
            image = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            pixels = image.astype(np.float32) * self.scale - self.shift
            chw = np.ascontiguousarray(np.moveaxis(pixels, -1, -3))
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("PIXELS", chw)]))
        return responses

    def finalize(self):
        pass

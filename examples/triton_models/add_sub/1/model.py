"""OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1 (the behaviour of Triton's add_sub example).

Written for servelab; runs unchanged on Triton's python backend and on servelab's: both provide
``triton_python_backend_utils``.
"""

import json

import numpy as np

import triton_python_backend_utils as pb_utils

_NUMPY = {"TYPE_FP32": np.float32, "TYPE_FP64": np.float64, "TYPE_INT32": np.int32, "TYPE_INT64": np.int64}


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dtypes = {o["name"]: _NUMPY[o["data_type"]] for o in config["output"]}

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            total = pb_utils.Tensor("OUTPUT0", (a + b).astype(self.dtypes["OUTPUT0"]))
            difference = pb_utils.Tensor("OUTPUT1", (a - b).astype(self.dtypes["OUTPUT1"]))
            responses.append(pb_utils.InferenceResponse(output_tensors=[total, difference]))
        return responses

    def finalize(self):
        self.dtypes = None

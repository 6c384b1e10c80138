"""OUTPUT = the running sum of INPUT in this request's sequence; CONTROLS = [START, END, READY, CORRID].

Written for servelab; runs unchanged on Triton's python backend and on servelab's. The sequence batcher
of either server hands the control inputs in; the sums live in this model, one per correlation id (the
direct strategy keeps a sequence on one instance).
"""

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # servelab's python backend
    import servelab.backends.python_api as pb_utils


def _scalar(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            start, end, ready, corrid = (_scalar(request, n) for n in ("START", "END", "READY", "CORRID"))
            if ready:
                total = (0 if start else self.sums.get(corrid, 0)) + int(x.reshape(-1)[0])
                self.sums[corrid] = total
                if end:
                    del self.sums[corrid]
            else:
                total = 0
            controls = np.array([[start, end, ready, corrid]], dtype=np.int64).reshape(x.shape[0], 4)
            out = pb_utils.Tensor("OUTPUT", np.full(x.shape, total, dtype=np.int32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out, pb_utils.Tensor("CONTROLS", controls)]))
        return responses

    def finalize(self):
        self.sums = None

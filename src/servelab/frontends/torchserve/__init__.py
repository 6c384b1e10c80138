"""TorchServe's APIs over the data plane, shared by its REST doors and its gRPC services.

- :mod:`.calls`: TorchServe's (model, version) -> servelab's, and predictions on a TorchServe archive
  (the handler's own answer, byte for byte).
- :mod:`.forms`: an HTTP request as TorchServe's frontend hands it to a handler (body, form fields, headers).
- :mod:`.tensors`: predictions on a model that is not an archive (JSON <-> its tensors).
- :mod:`.management`: list, describe, register, scale, set-default and unregister.
- :mod:`.wire`: TorchServe's JSON formatting and error bodies.
"""

from servelab.frontends.torchserve.calls import HANDLER_BACKEND, ModelView, model_view, predict

__all__ = ["HANDLER_BACKEND", "ModelView", "model_view", "predict"]

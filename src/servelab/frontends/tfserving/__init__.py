"""TensorFlow Serving's API over the data plane, shared by its REST door and its gRPC services.

- :mod:`.catalog`: a TF Serving (model, version or label, signature) -> the servelab model and version
  that serve it, read from the models' config parameters (:mod:`servelab.repository.tfserving_layout`),
  labels and the default version asked of the router (core/routing); model status and the
  SignatureDefMap of GetModelMetadata.
- :mod:`.calls`: Predict, Classify and Regress as data-plane calls on numpy tensors.
- :mod:`.examples`: ``tf.Example`` inputs: JSON examples (REST) and the Input message (gRPC).
- :mod:`.reload`: ModelService.HandleReloadConfigRequest.
"""

from servelab.frontends.tfserving.calls import classify, predict, regress
from servelab.frontends.tfserving.catalog import (
    Catalog,
    ModelView,
    SignatureView,
    Target,
    VersionStatus,
)

__all__ = [
    "Catalog",
    "ModelView",
    "SignatureView",
    "Target",
    "VersionStatus",
    "classify",
    "predict",
    "regress",
]

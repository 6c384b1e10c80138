"""REST front-end: Open Inference Protocol (+ Triton extensions), TF Serving and TorchServe APIs."""

from servelab.frontends.rest.app import create_app, create_management_app, create_metrics_app

__all__ = ["create_app", "create_management_app", "create_metrics_app"]

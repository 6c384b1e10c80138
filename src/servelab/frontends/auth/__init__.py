"""Keys, restricted APIs and TLS settings: checked once per request at the door of every front-end.

- :mod:`.routes`: the one table, REST route / gRPC method -> Triton API group -> protection level.
- :mod:`.keys`: the management and inference keys (settings, environment, or a generated 0600 key file).
- :mod:`.door`: :func:`build_door` decides at start what each group requires and refuses an exposed
  server without a management key; ``Requirement.check`` is the per-request check.
- :mod:`.rest` / :mod:`.interceptor`: the same check in front of Starlette routes and gRPC methods.
- :mod:`.tls`: uvicorn ssl options and gRPC server credentials from certificate files.
"""

from servelab.frontends.auth.door import Denial, Door, Requirement, build_door, is_loopback
from servelab.frontends.auth.interceptor import DoorInterceptor, grpc_interceptors
from servelab.frontends.auth.keys import AuthSetupError, Keys, load_keys
from servelab.frontends.auth.rest import check_scope, guard_routes, route_requirement
from servelab.frontends.auth.routes import GRPC_METHODS, LEVEL, REST_ROUTES, Level, UnclassifiedRoute
from servelab.frontends.auth.tls import grpc_server_credentials, grpc_ssl_context, http_ssl_options

__all__ = [
    "GRPC_METHODS",
    "LEVEL",
    "REST_ROUTES",
    "AuthSetupError",
    "Denial",
    "Door",
    "DoorInterceptor",
    "Keys",
    "Level",
    "Requirement",
    "UnclassifiedRoute",
    "build_door",
    "check_scope",
    "grpc_interceptors",
    "grpc_server_credentials",
    "grpc_ssl_context",
    "guard_routes",
    "http_ssl_options",
    "is_loopback",
    "load_keys",
    "route_requirement",
]

"""``import triton_python_backend_utils as pb_utils`` for model.py files served by servelab.

Triton's python backend API, implemented by :mod:`servelab.backends.pb_utils`; importable in a plain
``python`` too, so a model's unit tests run without a server.
"""

from servelab.backends.pb_utils import *  # noqa: F403
from servelab.backends.pb_utils import __all__ as __all__

"""The first name of servelab's python-model API, kept for models that import it: the same objects as
``triton_python_backend_utils`` (:mod:`servelab.backends.pb_utils`), plus servelab's errors, which a
``model.py`` may also return per request."""

from servelab.backends.pb_utils import *  # noqa: F403
from servelab.backends.pb_utils import __all__ as _PB_UTILS
from servelab.errors import InvalidArgument, ServelabError

__all__ = [*_PB_UTILS, "InvalidArgument", "ServelabError"]

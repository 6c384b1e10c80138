"""``ModelService.HandleReloadConfigRequest``: serve a new ModelServerConfig, as TF Serving does.

The new config replaces the served one in the repository (models it drops are unloaded, new or
changed ones loaded through the data plane, the others keep serving untouched), and the call returns
once every load finished. A config that does not parse changes nothing; a model that fails to load
is reported in the answer and is UNAVAILABLE with its reason, the others serve. Blocking: run it in
a worker thread.
"""

from __future__ import annotations

import contextlib
import logging

from servelab.core.dataplane import DataPlane
from servelab.errors import NotFound, ServelabError, Unsupported
from servelab.protocol import tfserving as tfs
from servelab.repository.tfserving import TfServingRepository

__all__ = ["reload_config"]

log = logging.getLogger("servelab.tfserving")


def reload_config(
    dataplane: DataPlane, repository: TfServingRepository | None, config: tfs.model_server_config_pb2.ModelServerConfig
) -> list[str]:
    """Apply ``config``; returns one message per model that failed to load (empty: all loaded)."""
    if repository is None:
        raise Unsupported("HandleReloadConfigRequest needs a server started with --tfserving-config; this one "
                          "serves a model repository (use the repository API to load and unload models)")
    changed, removed = repository.replace_config(config)
    log.info("TF Serving config reloaded: loading %s, unloading %s", changed or "nothing", removed or "nothing")
    for name in removed:
        with contextlib.suppress(NotFound):  # it never loaded
            dataplane.unload_model(name)
    failures = []
    for name in changed:
        try:
            dataplane.load_model(name)
        except ServelabError as exc:
            failures.append(exc.message)
    return failures

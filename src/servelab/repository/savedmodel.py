"""A SavedModel's signatures, read from ``saved_model.pb`` (or ``.pbtxt``) without importing TensorFlow.

TF Serving serves the meta graph tagged ``serve``; its ``signature_def`` map says, per signature, the
input and output keys, dtypes and shapes and the method (predict, classify, regress). The parse uses
servelab's restatement of ``saved_model.proto`` (:mod:`servelab.protocol.tfserving`), which keeps only
signatures and tags, and is cached by the file's size and modification time, so that polling a
repository every second re-reads nothing that did not change.
"""

from __future__ import annotations

import threading
from pathlib import Path

from google.protobuf import message, text_format

from servelab.errors import InvalidArgument
from servelab.protocol import tfserving as tfs
from servelab.trust import version_file

__all__ = ["SAVED_MODEL_FILES", "SERVE_TAG", "Signatures", "find_saved_model", "read_signatures"]

SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
SERVE_TAG = "serve"
_INTERNAL = "__saved_model"
#: signature key -> SignatureDef
Signatures = dict[str, tfs.meta_graph_pb2.SignatureDef]

_cache: dict[Path, tuple[tuple[int, int], Signatures]] = {}
_lock = threading.Lock()


def find_saved_model(version_dir: Path) -> Path | None:
    """The SavedModel file of a version folder (kept inside its model folder), or None."""
    for name in SAVED_MODEL_FILES:
        path = version_file(version_dir, name, "SavedModel file")
        if path.is_file():
            return path
    return None


def read_signatures(version_dir: Path, where: str) -> Signatures:
    """The signatures of the ``serve`` meta graph; ``where`` names the version for messages (no paths)."""
    path = find_saved_model(version_dir)
    if path is None:
        raise InvalidArgument(f"{where}: no saved_model.pb in the version folder")
    st = path.stat()
    stamp = (st.st_size, st.st_mtime_ns)
    with _lock:
        hit = _cache.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    signatures = _parse(path, where)
    with _lock:
        _cache[path] = (stamp, signatures)
    return signatures


def _parse(path: Path, where: str) -> Signatures:
    saved = tfs.saved_model_pb2.SavedModel()
    try:
        if path.suffix == ".pbtxt":
            text_format.Parse(path.read_text(), saved, allow_unknown_field=True)
        else:
            saved.ParseFromString(path.read_bytes())
    except (OSError, message.DecodeError, text_format.ParseError) as exc:
        raise InvalidArgument(f"{where}: {path.name} is not a readable SavedModel ({type(exc).__name__})") from None
    graphs = [g for g in saved.meta_graphs if SERVE_TAG in g.meta_info_def.tags]
    if not graphs:
        tags = [list(g.meta_info_def.tags) for g in saved.meta_graphs]
        raise InvalidArgument(f"{where}: the SavedModel has no meta graph tagged 'serve' (tags: {tags})")
    signatures: Signatures = {}
    for key, sig in graphs[0].signature_def.items():
        if key.startswith(_INTERNAL):
            continue  # TF2's __saved_model_init_op: run at load, not a signature to serve (TF Serving skips it)
        copy = tfs.meta_graph_pb2.SignatureDef()
        copy.CopyFrom(sig)
        signatures[key] = copy
    if not signatures:
        raise InvalidArgument(f"{where}: the SavedModel's 'serve' meta graph has no signatures")
    return signatures

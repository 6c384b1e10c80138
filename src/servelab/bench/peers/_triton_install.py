"""The real Triton Inference Server, unpacked under ``<peers_dir>/triton`` on first use.

The ``nvidia-pytriton`` wheel carries ``tritonserver`` (Triton 2.51.0) with its own libraries in
``nvidia_pytriton.libs/`` and only the python backend. Its python-backend stubs (one per Python version,
each linked against the *system* ``libpython3.X.so.1.0``) sit in ``python_backend_stubs/3.X/``; the stub is
copied into ``backends/python/``, which lies at the same depth, so its RPATH
``$ORIGIN/../../../../nvidia_pytriton.libs`` still finds the libraries. The stub runs that libpython in
isolated mode (PYTHONPATH is ignored, the backend folder is on ``sys.path``), so numpy and onnxruntime are
unpacked into the backend folder with ``pip install --target`` for that Python version. numpy must be
< 2 there: this backend returns empty output tensors with numpy 2.

Packages only some models need (:data:`MODEL_PACKAGES`, e.g. numba for the GraphSAGE peer) are added to
the same folder on demand by :meth:`TritonInstall.ensure_packages`, under a stamp of their own inside
``dist/`` (a rebuild of the base install drops them with it). Keeping them out of the base recipe means
the base install, shared by every checkout under one ``.peers``, is not rebuilt when they change.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from servelab.bench._fetch import UnpackedInstall
from servelab.errors import InvalidArgument, Unavailable

__all__ = [
    "BACKEND_PACKAGES", "MODEL_PACKAGES", "PYTRITON", "TRITON_VERSION", "TritonInstall", "system_python_version",
]

PYTRITON = "nvidia-pytriton==0.7.0"
TRITON_VERSION = "2.51.0"
#: importable by every python model Triton runs here; onnxruntime as in servelab's own environment
BACKEND_PACKAGES = ("numpy==1.26.4", "onnxruntime==1.32.0")
#: packages a kind of model needs besides BACKEND_PACKAGES, added without their dependencies (numpy is
#: there); numba as in servelab's own environment (it supports numpy 1.26), so both compile the same kernels
MODEL_PACKAGES = {"graphsage": ("numba==0.68.1", "llvmlite==0.50.0")}
_STUB_VERSIONS = ("3.11", "3.12", "3.10", "3.9", "3.8")  # the wheel's stubs, preferred first
_LIB_DIRS = (Path("/usr/lib/x86_64-linux-gnu"), Path("/lib/x86_64-linux-gnu"), Path("/usr/lib"), Path("/usr/local/lib"))
_KEEP = ("pytriton/tritonserver/", "nvidia_pytriton.libs/")


def _ldconfig_pythons() -> set[str]:
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return set(re.findall(r"libpython(3\.\d+)\.so\.1\.0 ", listing))


def system_python_version() -> str:
    """The X.Y of a system libpython (with its standard library) that a Triton stub can embed."""
    found = _ldconfig_pythons() | {
        v for v in _STUB_VERSIONS for d in _LIB_DIRS if (d / f"libpython{v}.so.1.0").is_file()
    }
    for version in _STUB_VERSIONS:
        if version in found and any(Path(p, f"python{version}", "os.py").is_file() for p in ("/usr/lib", "/usr/local/lib")):
            return version
    raise Unavailable(
        "Triton's python backend embeds the system's libpython (3.8-3.12) and none was found; on Debian: "
        "apt-get install -y libpython3.11"
    )


class TritonInstall:
    """Where ``tritonserver`` and its python backend lie once :meth:`ensure` has run."""

    def __init__(self, peers_dir: Path, python_version: str | None = None) -> None:
        self._peers_dir = peers_dir
        self._python_version = python_version

    @property
    def python_version(self) -> str:
        if self._python_version is None:
            self._python_version = system_python_version()
        return self._python_version

    @property
    def unpacked(self) -> UnpackedInstall:
        recipe = [PYTRITON, *BACKEND_PACKAGES, f"python-backend-stub=={self.python_version}"]
        return UnpackedInstall(self._peers_dir, "triton", recipe)

    @property
    def tritonserver_dir(self) -> Path:
        return self.unpacked.root / "dist" / "pytriton" / "tritonserver"

    @property
    def server(self) -> Path:
        return self.tritonserver_dir / "bin" / "tritonserver"

    @property
    def backends(self) -> Path:
        """The folder for ``--backend-directory``."""
        return self.tritonserver_dir / "backends"

    @property
    def python_backend(self) -> Path:
        return self.backends / "python"

    def is_ready(self) -> bool:
        return self.unpacked.is_ready() and self.server.is_file()

    def ensure(self, progress: Callable[[str], None] | None = None) -> None:
        """Download and unpack once (about 200 MB on disk); Unavailable says which step failed."""
        if self.is_ready():
            return
        say = progress or (lambda _m: None)
        inst = self.unpacked
        dist = inst.begin(say)
        wheel = inst.pip_download(PYTRITON)
        inst.unzip(wheel, dist, lambda name: name.startswith(_KEEP))
        stub = self.tritonserver_dir / "python_backend_stubs" / self.python_version / "triton_python_backend_stub"
        if not stub.is_file():
            raise Unavailable(f"{wheel.name} has no python backend stub for Python {self.python_version}")
        shutil.copy2(stub, self.python_backend / stub.name)  # same depth: the stub's RPATH still holds
        for exe in (self.server, self.python_backend / stub.name):
            exe.chmod(0o755)
        inst.pip_target(BACKEND_PACKAGES, self.python_backend, self.python_version)
        shutil.rmtree(self.tritonserver_dir / "python_backend_stubs")  # the other Pythons' stubs
        inst.finish()
        say(f"Triton {TRITON_VERSION} ready in {inst.root} (python backend, Python {self.python_version})")

    def ensure_packages(self, kind: str, progress: Callable[[str], None] | None = None) -> None:
        """The base install plus ``MODEL_PACKAGES[kind]`` in the python backend folder (added once)."""
        if kind not in MODEL_PACKAGES:
            raise InvalidArgument(f"no package set {kind!r} for Triton models; known: {sorted(MODEL_PACKAGES)}")
        self.ensure(progress)
        packages = MODEL_PACKAGES[kind]
        stamp = self.python_backend / f".servelab-{kind}-packages"
        if stamp.is_file() and stamp.read_text().split() == list(packages):
            return
        say = progress or (lambda _m: None)
        say(f"adding {' '.join(packages)} to Triton's python backend (first use only)")
        self.unpacked.pip_target(packages, self.python_backend, self.python_version, add=True)
        stamp.write_text("\n".join(packages) + "\n")

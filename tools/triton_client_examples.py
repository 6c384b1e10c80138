"""Run Triton's Python client examples, unchanged, against servelab and the real Triton; write the pass table.

    PYTHONPATH=src python tools/triton_client_examples.py [--client-repo DIR] [--server-repo DIR]
        [--servers servelab,triton] [--only NAME ...] [--out docs/triton-client-examples.md]

The examples (``src/python/examples`` of triton-inference-server/client) are copied from a checkout of
that repository at run time, and the models from triton-inference-server/server's
``docs/examples/model_repository`` (see ``tools/_triton_example_models.py``, which builds what those
folders only download, to the specs of their configs and Triton's qa); nothing of theirs is committed.
The examples hard-code localhost:8000 (HTTP) and :8001 (gRPC), so one server runs at a time on those
ports: servelab, then Triton 2.51 (the ``nvidia-pytriton`` build under ``.peers/triton``; python backend
only, so ONNX models run there through a generated onnxruntime python model, and the table says so).
Each example runs with a time limit; it passes when it exits 0. The model-control examples get a server of
their own (explicit mode, nothing loaded, a repository of exactly the eight models they count).
Not collected by pytest; it needs the two checkouts and, for the Triton column, the Triton peer.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _triton_example_models as models

ROOT = Path(__file__).resolve().parents[1]
#: clones of Triton's repositories, one folder each as ``<owner>+<name>/repo`` (or pass the paths as flags)
MIRRORS = ROOT / ".mirrors"
EXAMPLES = "src/python/examples"
PORTS = (8000, 8001)
TIMEOUT_S = 180.0
IMAGE = "image.ppm"
CLIENT_PYTHON = ROOT / ".venv-extra" / "bin" / "python"


@dataclass(frozen=True)
class Example:
    """One run of one example: its file, its arguments, the server it needs and what it depends on."""

    file: str
    args: tuple[str, ...] = ()
    server: str = "main"  # or "control7" / "control8": explicit mode, nothing loaded, the first 7 or all 8
    # models of MODEL_CONTROL_SET (the HTTP example counts seven, the gRPC one eight)
    needs: str = ""  # a reason it cannot pass here on either server (GPU ...)
    depends: str = ""  # servelab work another engineer is building (sequence batcher, pb_utils ...)
    note: str = ""  # a known difference, shown whatever the outcome

    @property
    def label(self) -> str:
        return " ".join([self.file, *self.args]).replace(IMAGE, "<image>")


NAME = ("checks that the server metadata says name 'triton': servelab runs with `--server-name triton`, as a "
        "Triton deployment moving in would")
LONG_FILE = ("expects INTERNAL 'failed to poll from model repository' for a 256-byte `file:` name (its own TODO says "
             "INVALID_ARGUMENT is right): servelab answers INVALID_ARGUMENT, Triton 2.51 UNAVAILABLE; every step before "
             "that passes on both")
ATTRDICT = ("imports attrdict (its HTTP path), which no longer imports on Python 3.11 (`collections.Mapping`); "
            "the gRPC variant below runs")
GPU = "needs a GPU and cuda-python (CUDA IPC handles); this machine has neither"
ROWS: tuple[Example, ...] = (
    Example("simple_http_infer_client.py"), Example("simple_grpc_infer_client.py"),
    Example("simple_http_async_infer_client.py"), Example("simple_grpc_async_infer_client.py"),
    Example("simple_http_aio_infer_client.py"), Example("simple_grpc_aio_infer_client.py"),
    Example("simple_http_infer_client.py", ("--request-compression-algorithm", "gzip",
            "--response-compression-algorithm", "deflate")),
    Example("simple_grpc_infer_client.py", ("-C", "gzip")),
    Example("simple_http_health_metadata.py", note=NAME), Example("simple_grpc_health_metadata.py", note=NAME),
    Example("simple_grpc_custom_args_client.py"), Example("simple_grpc_keepalive_client.py"),
    Example("simple_http_string_infer_client.py"), Example("simple_grpc_string_infer_client.py"),
    Example("grpc_explicit_int_content_client.py"), Example("grpc_explicit_int8_content_client.py"),
    Example("grpc_explicit_byte_content_client.py"),
    Example("simple_http_shm_client.py"), Example("simple_grpc_shm_client.py"),
    Example("simple_http_shm_string_client.py"), Example("simple_grpc_shm_string_client.py"),
    Example("reuse_infer_objects_client.py"), Example("reuse_infer_objects_client.py", ("-i", "grpc", "-u", "localhost:8001")),
    Example("memory_growth_test.py", ("-r", "20")), Example("memory_growth_test.py", ("-i", "grpc", "-r", "20")),
    Example("grpc_client.py"),
    Example("image_client.py", ("-m", "densenet_onnx", "-c", "3", "-s", "INCEPTION", IMAGE), needs=ATTRDICT),
    Example("image_client.py", ("-m", "inception_onnx", "-c", "3", "-s", "INCEPTION", "-i", "grpc", "-u",
                                "localhost:8001", IMAGE)),
    Example("grpc_image_client.py", ("-m", "densenet_onnx", "-c", "3", "-s", "INCEPTION", IMAGE)),
    Example("ensemble_image_client.py", ("-m", "preprocess_inception_ensemble", "-c", "3", IMAGE)),
    Example("ensemble_image_client.py", ("-m", "preprocess_inception_ensemble", "-c", "3", "-i", "grpc", "-u",
                                         "localhost:8001", IMAGE)),
    Example("simple_grpc_custom_repeat.py"),
    Example("simple_http_sequence_sync_infer_client.py"),
    Example("simple_grpc_sequence_sync_infer_client.py"),
    Example("simple_grpc_sequence_stream_infer_client.py"),
    Example("simple_grpc_aio_sequence_stream_infer_client.py"),
    Example("simple_http_cudashm_client.py", needs=GPU), Example("simple_grpc_cudashm_client.py", needs=GPU),
    Example("simple_http_model_control.py", server="control7"), Example("simple_grpc_model_control.py", server="control8",
                                                                            note=LONG_FILE),
)  # fmt: skip


@dataclass
class Outcome:
    passed: bool
    seconds: float
    tail: list[str] = field(default_factory=list)

    def cell(self) -> str:
        if self.passed:
            return "pass"
        reason = next((t for t in reversed(self.tail) if t.strip()), "no output")
        return "FAIL: " + reason.strip().replace("|", "\\|")[:160]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _wait_ready(process: subprocess.Popen[bytes], log: Path, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{PORTS[0]}/v2/health/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"server not ready within {timeout_s:.0f} s:\n{log.read_text(errors='replace')[-3000:]}")


def _servelab_argv(repo: Path, control: bool) -> list[str]:
    loads = [] if control else ["--load-model", "*"]
    return [sys.executable, "-m", "servelab.cli", "serve", "--model-repository", str(repo),
            "--http-port", str(PORTS[0]), "--grpc-port", str(PORTS[1]), "--metrics-port", "0",
            "--management-port", "0", "--model-control-mode", "explicit", *loads, "--strict-readiness", "false",
            "--server-name", "triton"]  # fmt: skip


def _triton_argv(repo: Path, control: bool) -> list[str]:
    from servelab.bench.peers._triton_install import TritonInstall

    triton = TritonInstall(ROOT / ".peers")
    if not triton.is_ready():
        raise RuntimeError("the Triton peer is not installed under .peers/triton (tests/integration/peers installs it)")
    loads = [] if control else ["--load-model", "*"]
    return [str(triton.server), "--model-repository", str(repo), "--backend-directory", str(triton.backends),
            "--http-address", "127.0.0.1", "--http-port", str(PORTS[0]), "--grpc-address", "127.0.0.1",
            "--grpc-port", str(PORTS[1]), "--allow-metrics", "false", "--model-control-mode", "explicit", *loads,
            "--strict-readiness", "false", "--exit-on-error", "false", "--pinned-memory-pool-byte-size", "0"]  # fmt: skip


@contextmanager
def _serving(name: str, argv: list[str], log: Path) -> Iterator[None]:
    for port in PORTS:
        if not _port_free(port):
            raise RuntimeError(f"port {port} is in use: the examples need 8000 and 8001 free")
    env = dict(os.environ)
    if name == "triton":  # its python stub embeds the system Python in isolated mode
        env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        _wait_ready(process, log)
        yield
    finally:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()


def _run(example: Example, work: Path, python: str) -> Outcome:
    argv = [python, str(work / "examples" / example.file), *example.args]
    t0 = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the clients use tritonclient only
    try:
        done = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return Outcome(False, time.monotonic() - t0, [f"timed out after {TIMEOUT_S:.0f} s"])
    # paths relative to the repository in the recorded output: the committed table names no machine's folders
    lines = (done.stdout + done.stderr).replace(f"{ROOT}/", "").splitlines()
    return Outcome(done.returncode == 0, time.monotonic() - t0, lines[-12:])


def run_server(name: str, work: Path, rows: list[Example], python: str) -> dict[str, Outcome]:
    results: dict[str, Outcome] = {}
    for server in ("main", "control7", "control8"):
        todo = [r for r in rows if r.server == server]
        if not todo:
            continue
        repo = work / f"repo-{name}-{server}"
        source = work / ("repo" if server == "main" else f"repo-{server}")
        if name == "triton":
            models.triton_repository(source, repo)
        else:
            shutil.copytree(source, repo)
        argv = (_triton_argv if name == "triton" else _servelab_argv)(repo, server != "main")
        with _serving(name, argv, work / f"{name}-{server}.log"):
            for example in todo:
                results[example.label] = outcome = _run(example, work, python)
                print(f"[{name}] {example.label}: {outcome.cell()} ({outcome.seconds:.1f} s)", flush=True)
    return results


def _prepare(work: Path, client_repo: Path, server_repo: Path) -> None:
    (work / "examples").mkdir(parents=True)
    listing = subprocess.run(["git", "-C", str(client_repo), "ls-tree", "--name-only", "HEAD", EXAMPLES + "/"],
                             capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    for path in listing:
        if path.endswith(".py"):
            text = subprocess.run(["git", "-C", str(client_repo), "show", f"HEAD:{path}"], capture_output=True,
                                  check=True).stdout  # fmt: skip
            (work / "examples" / Path(path).name).write_bytes(text)
    models.build_repository(work / "repo", server_repo)
    for count in (7, 8):
        control = work / f"repo-control{count}"
        control.mkdir()
        for name in models.MODEL_CONTROL_SET[:count]:
            shutil.copytree(work / "repo" / name, control / name)
    models.write_ppm(work / IMAGE)


def _commit(repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip


def _passed(results: dict[str, Outcome], row: Example) -> bool:
    outcome = results.get(row.label)
    return outcome is not None and outcome.passed


def markdown(rows: list[Example], results: dict[str, dict[str, Outcome]], commits: dict[str, str]) -> str:
    """The pass table: one row per example run, servelab and Triton side by side."""
    servelab, triton = results.get("servelab", {}), results.get("triton", {})
    lines = [
        "# Triton's Python client examples on servelab and on Triton",
        "",
        f"Produced by `tools/triton_client_examples.py` from triton-inference-server/client `{commits['client']}` "
        f"(`src/python/examples`, run unchanged) and the models of triton-inference-server/server "
        f"`{commits['server']}` (`docs/examples/model_repository`, plus models built to its configs and qa's specs: "
        "see `tools/_triton_example_models.py`). Triton is 2.51.0 (nvidia-pytriton 0.7.0, python backend only): "
        "there, ONNX models run through a python model that calls onnxruntime (`tools/_triton_onnx_runner.py`). "
        "Both servers serve the same repository in explicit mode with every model loaded at start and "
        "`--strict-readiness false` (the model-control examples get one of their own, nothing loaded). The "
        "examples run in a Python with tritonclient 2.73 and pillow (`--client-python`); servelab runs with "
        "`--server-name triton`, as a Triton deployment moving in would. A run passes "
        "when the example exits 0; a failure shows the example's last line. Regenerate with "
        "`PYTHONPATH=src python tools/triton_client_examples.py` (about 5 minutes; ports 8000 and 8001 must be free).",
        "",
        f"servelab: {sum(o.passed for o in servelab.values())}/{len(servelab)} pass; "
        f"Triton: {sum(o.passed for o in triton.values())}/{len(triton)} pass; "
        f"{sum(1 for r in rows if _passed(triton, r) and not _passed(servelab, r))} pass on Triton and fail on "
        "servelab. Each failure is explained in its note.",
        "",
        "| example | servelab | Triton | note |",
        "| --- | --- | --- | --- |",
    ]
    for r in rows:
        s, t = servelab.get(r.label), triton.get(r.label)
        note = r.needs or r.note or (r.depends if s is not None and not s.passed else "")
        lines.append(f"| `{r.label}` | {s.cell() if s else 'not run'} | {t.cell() if t else 'not run'} | {note} |")
    lines += ["", "How each model is served on Triton: " + ", ".join(
        f"`{k}` {v}" for k, v in sorted(models.TRITON_AS.items())) + "."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client-repo", type=Path, default=MIRRORS / "triton-inference-server+client/repo")
    parser.add_argument("--server-repo", type=Path, default=MIRRORS / "triton-inference-server+server/repo")
    parser.add_argument("--servers", default="servelab,triton")
    parser.add_argument("--only", nargs="*", help="run only the examples whose file names contain these")
    parser.add_argument("--client-python", default=str(CLIENT_PYTHON if CLIENT_PYTHON.is_file() else sys.executable),
                        help="the Python that runs the examples: tritonclient[http,grpc], pillow and attrdict "
                             "(image_client.py imports it) [.venv-extra/bin/python if present]")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "triton-client-examples.md")
    args = parser.parse_args()
    for flag, repo in (("--client-repo", args.client_repo), ("--server-repo", args.server_repo)):
        if not repo.exists():
            parser.error(f"{flag} {repo} does not exist: give a checkout (or bare clone) of that repository")
    rows = [r for r in ROWS if not args.only or any(o in r.file for o in args.only)]
    results: dict[str, dict[str, Outcome]] = {}
    with tempfile.TemporaryDirectory(prefix="servelab-triton-examples-") as tmp:
        work = Path(tmp)
        _prepare(work, args.client_repo, args.server_repo)
        for name in args.servers.split(","):
            results[name] = run_server(name, work, rows, args.client_python)
    commits = {"client": _commit(args.client_repo), "server": _commit(args.server_repo)}
    args.out.write_text(markdown(rows, results, commits))
    raw = {n: {k: asdict(v) for k, v in r.items()} for n, r in results.items()}
    args.out.with_suffix(".json").write_text(json.dumps({"commits": commits, "results": raw}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

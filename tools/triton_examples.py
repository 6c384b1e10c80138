"""Triton's python_backend examples, run unchanged with their own client.py on servelab and on the real Triton.

    PYTHONPATH=src python tools/triton_examples.py [--only add_sub,bls] [--servers servelab,triton]
                                                   [--out docs/triton_python_examples.md]

Each example's model.py, config.pbtxt and client.py are copied at run time from the fetched repositories
(triton-inference-server/python_backend, and /server for the qa ``error_code`` model) into a temporary
repository; nothing of theirs is kept in servelab. Each server serves it in turn on the ports the clients
hard-code (HTTP 8000, gRPC 8001, metrics 8002) inside a network namespace of its own (``unshare -n``),
so that neither the two servers nor anything else on the machine ever compete for those ports; without
``unshare`` the ports must be free. The clients run with this Python (tritonclient); the table of
results, with the reason for each failure or example not run, goes to ``--out``.

Triton is the one ``servelab.bench.peers.triton`` installs under ``.peers/`` (2.51, python backend only,
its stub on the system Python with numpy and onnxruntime only: no torch there).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: clones of Triton's repositories, one folder each as ``<owner>+<name>/repo`` (or pass the paths as flags)
MIRRORS = ROOT / ".mirrors"
PYTHON_BACKEND = "triton-inference-server+python_backend"
SERVER = "triton-inference-server+server"
START_TIMEOUT_S = 240.0
CLIENT_TIMEOUT_S = 180.0

#: the checks of qa/L0_backend_python/lifecycle/lifecycle_test.py::test_error_code (that test needs Triton's
#: qa harness), stated again as a client of the qa ``error_code`` model: each code's gRPC status and message
ERROR_CODE_CLIENT = '''\
import sys
import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

errors = [("UNKNOWN", "[StatusCode.UNKNOWN]"), ("INTERNAL", "[StatusCode.INTERNAL]"),
          ("NOT_FOUND", "[StatusCode.NOT_FOUND]"), ("INVALID_ARG", "[StatusCode.INVALID_ARGUMENT]"),
          ("UNAVAILABLE", "[StatusCode.UNAVAILABLE]"), ("UNSUPPORTED", "[StatusCode.UNIMPLEMENTED]"),
          ("ALREADY_EXISTS", "[StatusCode.ALREADY_EXISTS]"), ("CANCELLED", "[StatusCode.CANCELLED]"),
          ("(default)", "[StatusCode.INTERNAL] unrecognized")]
with grpcclient.InferenceServerClient("localhost:8001") as client:
    for error, start in errors:
        data = np.array([[error]], dtype=np.object_)
        inputs = [grpcclient.InferInput("ERROR_CODE", [1, 1], np_to_triton_dtype(data.dtype))]
        inputs[0].set_data_from_numpy(data)
        try:
            client.infer("error_code", inputs)
        except InferenceServerException as e:
            if str(e) != start + " error code: " + error:
                print(f"error_code: expected {start} error code: {error}, got {e}")
                sys.exit(1)
        else:
            print(f"error_code: {error} answered without an error")
            sys.exit(1)
print("PASS: error_code")
'''


@dataclass(frozen=True)
class Example:
    """One example: models (target name, model.py path, config.pbtxt path or None) and clients to run."""

    name: str
    models: tuple[tuple[str, str, str | None], ...] = ()
    clients: tuple[str, ...] = ()
    #: where the model files come from
    mirror: str = PYTHON_BACKEND
    #: why it cannot run here (on either server)
    not_run: str = ""
    #: a client written here (error_code), instead of the example's own
    own_client: str = ""
    notes: str = ""


ADD_SUB = ("add_sub", "examples/add_sub/model.py", "examples/add_sub/config.pbtxt")
PYTORCH = ("pytorch", "examples/pytorch/model.py", "examples/pytorch/config.pbtxt")
SQUARE = ("square_int32", "examples/decoupled/square_model.py", "examples/decoupled/square_config.pbtxt")
EXAMPLES = (
    Example("add_sub", (ADD_SUB,), ("examples/add_sub/client.py",)),
    Example("pytorch", (PYTORCH,), ("examples/pytorch/client.py",),
            notes="model.py imports torch: Triton's stub here has none (servelab's workers use its environment)"),
    Example("bls (sync)", (ADD_SUB, PYTORCH, ("bls_sync", "examples/bls/sync_model.py", "examples/bls/sync_config.pbtxt")),
            ("examples/bls/sync_client.py",), notes="BLS to add_sub and pytorch"),
    Example("bls (async)", (ADD_SUB, PYTORCH, ("bls_async", "examples/bls/async_model.py", "examples/bls/async_config.pbtxt")),
            ("examples/bls/async_client.py",), notes="async def execute, async_exec to add_sub and pytorch"),
    Example("bls_decoupled (sync)", (SQUARE, ("bls_decoupled_sync", "examples/bls_decoupled/sync_model.py",
                                              "examples/bls_decoupled/sync_config.pbtxt")),
            ("examples/bls_decoupled/sync_client.py",), notes="exec(decoupled=True) to square_int32"),
    Example("bls_decoupled (async)", (SQUARE, ("bls_decoupled_async", "examples/bls_decoupled/async_model.py",
                                               "examples/bls_decoupled/async_config.pbtxt")),
            ("examples/bls_decoupled/async_client.py",), notes="async_exec(decoupled=True)"),
    Example("decoupled (square)", (SQUARE,), ("examples/decoupled/square_client.py",),
            notes="gRPC stream, 0..n responses per request"),
    Example("decoupled (repeat)", (("repeat_int32", "examples/decoupled/repeat_model.py",
                                    "examples/decoupled/repeat_config.pbtxt"),),
            ("examples/decoupled/repeat_client.py",), notes="responses sent after execute returns"),
    Example("auto_complete", (("nobatch_auto_complete", "examples/auto_complete/nobatch_model.py", None),
                              ("batch_auto_complete", "examples/auto_complete/batch_model.py", None)),
            ("examples/auto_complete/client.py",),
            notes="no config.pbtxt; the client compares the REST config JSON's dims with [4], which servelab "
                  "writes as strings until Triton's config JSON (64-bit integers as numbers) is merged"),
    Example("custom_metrics", (("custom_metrics", "examples/custom_metrics/model.py",
                                "examples/custom_metrics/config.pbtxt"),),
            ("examples/custom_metrics/client.py",), notes="3 instances, one counter, read on :8002/metrics"),
    Example("error_code (qa)", (("error_code", "qa/python_models/error_code/model.py",
                                 "qa/python_models/error_code/config.pbtxt"),),
            mirror=SERVER, own_client=ERROR_CODE_CLIENT,
            notes="server repo's qa model; the client restates lifecycle_test.py::test_error_code"),
    Example("preprocessing", not_run="needs a TensorRT engine of ResNet-50 (resnet50_trt), TensorRT and a GPU, "
            "and torchvision, none of which is here"),
    Example("instance_kind", not_run="needs torchvision and downloads ResNet-50 weights (no network here)"),
    Example("jax", not_run="needs jax, which is not installed"),
)


# ----- the parent: lay out each example, run each server in its own network namespace -----
def _git_show(mirror: Path, path: str) -> bytes:
    return subprocess.run(["git", "-C", str(mirror), "show", f"HEAD:{path}"], capture_output=True, check=True).stdout


def layout(example: Example, mirrors: Path, work: Path) -> Path:
    """``work/models`` (the example's repository) and ``work/clients``; returns ``work``."""
    mirror = mirrors / example.mirror / "repo"
    for target, model_py, config in example.models:
        (work / "models" / target / "1").mkdir(parents=True, exist_ok=True)
        (work / "models" / target / "1" / "model.py").write_bytes(_git_show(mirror, model_py))
        if config is not None:
            (work / "models" / target / "config.pbtxt").write_bytes(_git_show(mirror, config))
    clients = work / "clients"
    clients.mkdir(parents=True, exist_ok=True)
    for client in example.clients:
        (clients / Path(client).name).write_bytes(_git_show(mirror, client))
    if example.own_client:
        (clients / "client.py").write_text(example.own_client)
    return work


def _isolated() -> list[str]:
    """The prefix that runs a command in a network namespace of its own, if this machine allows it."""
    if shutil.which("unshare") and shutil.which("ip"):
        probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False)
        if probe.returncode == 0:
            return ["unshare", "-n"]
    return []


def run_example(example: Example, server: str, mirrors: Path, keep: Path | None) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"triton-example-{server}-"))
    try:
        layout(example, mirrors, work)
        clients = [Path(c).name for c in example.clients] or ["client.py"]
        cmd = [*_isolated(), sys.executable, __file__, "--child", server, str(work), *clients]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=START_TIMEOUT_S + 4 * CLIENT_TIMEOUT_S,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, check=False)  # fmt: skip
        result_file = work / "result.json"
        if not result_file.is_file():
            return {"error": f"the run failed (exit {done.returncode}): {(done.stderr or done.stdout)[-600:]}"}
        return json.loads(result_file.read_text())  # type: ignore[no-any-return]
    finally:
        if keep is not None:
            shutil.copytree(work, keep / f"{example.name.replace(' ', '_')}-{server}", dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)


# ----- the child: one server, in the namespace, on 8000/8001/8002 -----
def _server_argv(server: str, repo: Path) -> tuple[list[str], dict[str, str]]:
    ports = ["--http-port", "8000", "--grpc-port", "8001", "--metrics-port", "8002"]
    if server == "servelab":
        argv = [sys.executable, "-m", "servelab.cli", "serve", str(repo), "--host", "127.0.0.1", *ports,
                "--management-port", "8085"]  # fmt: skip
        return argv, dict(os.environ)
    from servelab.bench.peers.triton import TritonPeer

    install = TritonPeer(ROOT / ".peers").triton
    install.ensure()
    argv = [str(install.server), "--model-repository", str(repo), "--backend-directory", str(install.backends),
            "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1", *ports,
            "--exit-on-error=false", "--strict-readiness=false", "--log-verbose", "0"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return argv, env


def _index() -> list[dict[str, Any]] | None:
    try:
        request = urllib.request.Request("http://127.0.0.1:8000/v2/repository/index", data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=5) as answer:
            return json.loads(answer.read())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def _wait_models(proc: subprocess.Popen[bytes], names: list[str]) -> dict[str, str]:
    """Each model's state once none is loading any more (READY, or UNAVAILABLE with its reason)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    states: dict[str, str] = {}
    while time.monotonic() < deadline and proc.poll() is None:
        rows = _index() or []
        states = {r["name"]: (r.get("state") or "") + (f": {r['reason']}" if r.get("reason") else "") for r in rows}
        if all(states.get(n, "").startswith(("READY", "UNAVAILABLE")) for n in names):
            return states
        time.sleep(0.5)
    return {n: states.get(n, "not loaded (server did not come up)") for n in names}


def child(server: str, work: Path, clients: list[str]) -> int:
    if shutil.which("ip"):  # a new network namespace starts with its loopback down
        subprocess.run(["ip", "link", "set", "lo", "up"], capture_output=True, check=False)
    repo = work / "models"
    argv, env = _server_argv(server, repo)
    log = (work / "server.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    result: dict[str, Any] = {"models": {}, "clients": []}
    try:
        result["models"] = _wait_models(proc, sorted(p.name for p in repo.iterdir()))
        for client in clients:
            try:
                done = subprocess.run([sys.executable, client], cwd=work / "clients", capture_output=True, text=True,
                                      timeout=CLIENT_TIMEOUT_S, check=False)  # fmt: skip
                output, code = done.stdout + done.stderr, done.returncode
            except subprocess.TimeoutExpired:
                output, code = f"timed out after {CLIENT_TIMEOUT_S:g} s", -1
            passed = code == 0 and "PASS" in output
            result["clients"].append({"client": client, "exit": code, "passed": passed, "tail": output[-1500:]})
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    (work / "result.json").write_text(json.dumps(result))
    return 0


# ----- the table -----
def _last_line(text: str) -> str:
    """What a failed client said last: its exception or error line (tracebacks and 'At:' skipped)."""
    lines = [ln.strip() for ln in text.strip().splitlines()
             if ln.strip() and not ln.startswith(("  ", "Traceback")) and ln.strip() != "At:"]  # fmt: skip
    said = next((ln for ln in reversed(lines) if "Exception" in ln or "error" in ln.lower()), lines[-1] if lines else "")
    return said[:220]


def cell(result: dict[str, Any] | None, example: Example) -> str:
    if example.not_run:
        return "not run"
    if result is None:
        return "not run (not asked for)"
    if "error" in result:
        return f"FAIL: {result['error'][:220]}"
    clients = result["clients"]
    if clients and all(c["passed"] for c in clients):
        return "PASS"
    failed = [c for c in clients if not c["passed"]]
    reasons = [_last_line(c["tail"]) for c in failed]
    down = [f"model {m} {s.split(':', 1)[0]}: {_reason(s)}" for m, s in result["models"].items() if not s.startswith("READY")]
    return "FAIL: " + "; ".join(r for r in [*reasons, *down] if r).replace("|", "/")


def _reason(state: str) -> str:
    """The telling part of a load failure (the exception at its end, e.g. No module named 'torch')."""
    text = state.split(":", 1)[1] if ":" in state else state
    for marker in ("ModuleNotFoundError", "ImportError", "No module named"):
        if marker in text:
            return text[text.index(marker):].splitlines()[0][:160]
    return " ".join(text.split())[:200]


def table(results: dict[tuple[str, str], dict[str, Any]], servers: list[str]) -> str:
    rows = ["| Example | Client | servelab | Triton 2.51 (here) | Notes |", "| --- | --- | --- | --- | --- |"]
    for ex in EXAMPLES:
        client = ", ".join(Path(c).name for c in ex.clients) or ("restated here" if ex.own_client else "-")
        cells = [cell(results.get((ex.name, s)), ex) if s in servers else "not run (not asked for)"
                 for s in ("servelab", "triton")]  # fmt: skip
        notes = ex.not_run or ex.notes
        rows.append(f"| {ex.name} | {client} | {cells[0]} | {cells[1]} | {notes} |")
    return "\n".join(rows)


def document(results: dict[tuple[str, str], dict[str, Any]], servers: list[str]) -> str:
    counts = {s: sum(1 for (_, srv), r in results.items() if srv == s and cell(r, Example("x")) == "PASS")
              for s in servers}  # fmt: skip
    ran = {s: sum(1 for (_, srv) in results if srv == s) for s in servers}
    summary = ", ".join(f"{s}: {counts[s]} of {ran[s]} run" for s in servers)
    return f"""# Triton's python_backend examples on servelab and on Triton

Each example's own `model.py`, `config.pbtxt` and `client.py`, unchanged, copied at run time from
triton-inference-server/python_backend (`error_code` from the server repository's qa models), served by
each server in turn on the ports the clients hard-code (8000, 8001, 8002), each in a network namespace of
its own. Triton is 2.51 from the `nvidia-pytriton` wheel (python backend only; its stub runs the system
Python 3.11 with numpy 1.26 and onnxruntime, without torch). PASS means the client exited 0 and printed
its PASS line. Passing here: {summary}.

Regenerate with `PYTHONPATH=src python tools/triton_examples.py` (a few minutes; needs the fetched
repositories under .mirrors/ (`<owner>+<name>/repo`, or `--mirrors DIR`) and Triton under .peers/).

{table(results, servers)}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--only", default="", help="comma-separated example names (default: all)")
    parser.add_argument("--servers", default="servelab,triton", help="servelab, triton or both")
    parser.add_argument("--mirrors", type=Path, default=MIRRORS, help="where the fetched repositories are")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "triton_python_examples.md")
    parser.add_argument("--keep", type=Path, default=None, help="copy each run's folder (logs, results) here")
    args = parser.parse_args(argv)
    if args.child:
        server, work, *clients = args.child
        return child(server, Path(work), clients)
    servers = [s for s in args.servers.split(",") if s]
    wanted = {n.strip() for n in args.only.split(",") if n.strip()}
    results: dict[tuple[str, str], dict[str, Any]] = {}
    for example in EXAMPLES:
        if example.not_run or (wanted and example.name.split(" ")[0] not in wanted and example.name not in wanted):
            continue
        for server in servers:
            print(f"{example.name} on {server} ...", flush=True)
            results[(example.name, server)] = run_example(example, server, args.mirrors, args.keep)
            print(f"  {cell(results[(example.name, server)], example)}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(document(results, servers))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

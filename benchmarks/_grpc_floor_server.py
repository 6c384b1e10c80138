"""The least a Python gRPC server can do for Triton's add_sub: grpcio, the OIP proto, numpy, nothing else.

    python benchmarks/_grpc_floor_server.py --mode aio|sync [--loop asyncio|uvloop] --port N [--workers 4]

It answers what perf_analyzer asks (ServerLive/Ready/Metadata, ModelReady, ModelMetadata, ModelConfig,
ModelStatistics, ModelInfer) for one model, ``add_sub`` (two FP32 [4] inputs, their sum and difference): no
repository, no scheduler, no worker, no statistics kept, no validation beyond what numpy needs; grpcio runs
with the settings `servelab serve` gives it (EventEngine listener off). It is the floor
``benchmarks/grpc_floor.py`` measures servelab's gRPC front door against: what any Python server on grpcio
pays per call before doing anything of its own. ``aio``: ``grpc.aio`` (servelab's front door is one);
``sync``: grpcio's thread-pool server. Started and stopped by grpc_floor.py, which reads the port it prints.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from concurrent import futures
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from servelab.config.grpc_runtime import SERVER_EXPERIMENTS, disable_grpc_experiments

disable_grpc_experiments(SERVER_EXPERIMENTS)  # the settings `servelab serve` runs grpcio with, before the import

import grpc  # noqa: E402
import grpc.aio  # noqa: E402
import numpy as np  # noqa: E402

from servelab.protocol import grpc_service_pb2 as pb  # noqa: E402
from servelab.protocol import grpc_service_pb2_grpc as pb_grpc  # noqa: E402
from servelab.protocol import model_config_pb2 as mc  # noqa: E402

MODEL = "add_sub"
_TENSORS = ("INPUT0", "INPUT1"), ("OUTPUT0", "OUTPUT1")


def _config() -> mc.ModelConfig:
    spec = [mc.ModelInput(name=n, data_type=mc.TYPE_FP32, dims=[4]) for n in _TENSORS[0]]
    out = [mc.ModelOutput(name=n, data_type=mc.TYPE_FP32, dims=[4]) for n in _TENSORS[1]]
    return mc.ModelConfig(name=MODEL, backend="python", max_batch_size=0, input=spec, output=out)


def _metadata() -> pb.ModelMetadataResponse:
    tensor = pb.ModelMetadataResponse.TensorMetadata
    return pb.ModelMetadataResponse(
        name=MODEL, versions=["1"], platform="python",
        inputs=[tensor(name=n, datatype="FP32", shape=[4]) for n in _TENSORS[0]],
        outputs=[tensor(name=n, datatype="FP32", shape=[4]) for n in _TENSORS[1]],
    )  # fmt: skip


def add_sub(request: pb.ModelInferRequest) -> pb.ModelInferResponse:
    a, b = (np.frombuffer(raw, dtype=np.float32) for raw in request.raw_input_contents)
    out = pb.ModelInferResponse(model_name=MODEL, model_version="1", id=request.id)
    for name in _TENSORS[1]:
        out.outputs.add(name=name, datatype="FP32", shape=[4])
    out.raw_output_contents.extend([(a + b).tobytes(), (a - b).tobytes()])
    return out


class Common:
    config = pb.ModelConfigResponse(config=_config())
    metadata = _metadata()
    stats = pb.ModelStatisticsResponse(model_stats=[pb.ModelStatistics(name=MODEL, version="1")])
    server = pb.ServerMetadataResponse(name="grpc-floor", version="0", extensions=[])


class SyncServicer(pb_grpc.GRPCInferenceServiceServicer):
    def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=True)

    def ServerMetadata(self, request, context):
        return Common.server

    def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=request.name == MODEL)

    def ModelMetadata(self, request, context):
        return Common.metadata

    def ModelConfig(self, request, context):
        return Common.config

    def ModelStatistics(self, request, context):
        return Common.stats

    def ModelInfer(self, request, context):
        return add_sub(request)


class AioServicer(pb_grpc.GRPCInferenceServiceServicer):
    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=True)

    async def ServerMetadata(self, request, context):
        return Common.server

    async def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=request.name == MODEL)

    async def ModelMetadata(self, request, context):
        return Common.metadata

    async def ModelConfig(self, request, context):
        return Common.config

    async def ModelStatistics(self, request, context):
        return Common.stats

    async def ModelInfer(self, request, context):
        return add_sub(request)


def serve_sync(port: int, workers: int) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(SyncServicer(), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print(f"port {bound}", flush=True)
    server.wait_for_termination()


async def serve_aio(port: int) -> None:
    server = grpc.aio.server()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(AioServicer(), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"port {bound}", flush=True)
    await server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("aio", "sync"), required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--workers", type=int, default=4, help="sync mode's thread pool")
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio", help="aio mode's event loop")
    args = parser.parse_args()
    if args.mode == "sync":
        serve_sync(args.port, args.workers)
    elif args.loop == "uvloop":
        import uvloop

        uvloop.run(serve_aio(args.port))
    else:
        asyncio.run(serve_aio(args.port))


if __name__ == "__main__":
    main()

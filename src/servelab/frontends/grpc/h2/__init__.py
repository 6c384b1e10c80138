"""A lean HTTP/2 door for gRPC, written on asyncio (work in progress, not wired into ``servelab serve``).

grpcio's per-call machinery is the limit of servelab's gRPC port: a bare grpc.aio server that does nothing but
add_sub serves what servelab does, below Triton (benchmarks/RESULTS.md, 2026-12-06). This door parses HTTP/2
frames itself and dispatches to the same grpc method handlers that the generated ``add_*Servicer_to_server``
functions build, with the same interceptors. The prototype measured 2.0-3.4x Triton's gRPC throughput
(benchmarks/notes/grpc_lean_door.md).
"""

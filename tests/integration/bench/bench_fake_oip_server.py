"""A test OIP HTTP server with a known, injected latency distribution (run as a script).

``--delays 0.005:0.9,0.02:0.1`` sleeps 5 ms for 90% of infer requests and 20 ms for 10% (drawn from a
seeded RNG); ``--drift-per-s 2`` multiplies every delay by ``1 + 2 * seconds since the first infer`` so
that no two windows agree. It prints ``PORT <n>`` once bound to 127.0.0.1 port 0. ``GET /counter``
returns how many infer requests arrived, the most that were in the server at once (``peak_inflight``) and
over how many client connections (``connections``); ``/v2/models/{m}/stats`` reports the sleeps as queue time.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from aiohttp import web


def _parse_delays(text: str) -> tuple[list[float], list[float]]:
    pairs = [p.split(":") for p in text.split(",")]
    return [float(d) for d, _ in pairs], [float(w) for _, w in pairs]


def make_app(delays: list[float], weights: list[float], drift_per_s: float, seed: int) -> web.Application:
    rng = random.Random(seed)
    state = {"count": 0, "first": 0.0, "queue_ns": 0, "infer_ns": 0, "inflight": 0, "peak_inflight": 0}
    peers: set[object] = set()

    async def server_meta(_req: web.Request) -> web.Response:
        return web.json_response(
            {"name": "fake", "version": "1", "extensions": ["binary_tensor_data", "statistics"]}
        )

    async def ready(_req: web.Request) -> web.Response:
        return web.Response(status=200)

    async def model_meta(req: web.Request) -> web.Response:
        name = req.match_info["model"]
        inputs = [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}]
        return web.json_response(
            {"name": name, "versions": ["1"], "platform": "fake", "inputs": inputs, "outputs": []}
        )

    async def infer(req: web.Request) -> web.Response:
        body = await req.read()
        header_len = int(req.headers.get("Inference-Header-Content-Length", len(body)))
        if header_len > len(body):
            return web.json_response({"error": "header longer than body"}, status=400)
        now = time.perf_counter()
        if state["count"] == 0:
            state["first"] = now
        state["count"] += 1
        state["inflight"] += 1
        state["peak_inflight"] = max(state["peak_inflight"], state["inflight"])
        if req.transport is not None:
            peers.add(req.transport.get_extra_info("peername"))
        delay = rng.choices(delays, weights)[0] * (1.0 + drift_per_s * (now - state["first"]))
        try:
            await asyncio.sleep(delay)
        finally:
            state["inflight"] -= 1
        state["queue_ns"] += int(delay * 1e9)
        t = time.perf_counter_ns()
        out = web.json_response({"model_name": req.match_info["model"], "outputs": []})
        state["infer_ns"] += time.perf_counter_ns() - t
        return out

    async def stats(req: web.Request) -> web.Response:
        n = state["count"]
        inference_stats = {
            "success": {"count": n, "ns": state["queue_ns"]},
            "queue": {"count": n, "ns": state["queue_ns"]},
            "compute_input": {"count": n, "ns": 0},
            "compute_infer": {"count": n, "ns": state["infer_ns"]},
            "compute_output": {"count": n, "ns": 0},
        }
        name = req.match_info["model"]
        return web.json_response(
            {"model_stats": [{"name": name, "version": "1", "inference_stats": inference_stats}]}
        )

    async def counter(_req: web.Request) -> web.Response:
        return web.json_response({"count": state["count"], "peak_inflight": state["peak_inflight"],
                                  "connections": len(peers)})

    app = web.Application()
    app.router.add_get("/v2", server_meta)
    app.router.add_get("/v2/health/ready", ready)
    app.router.add_get("/v2/models/{model}", model_meta)
    app.router.add_post("/v2/models/{model}/infer", infer)
    app.router.add_get("/v2/models/{model}/stats", stats)
    app.router.add_get("/counter", counter)
    return app


async def _main(args: argparse.Namespace) -> None:
    delays, weights = _parse_delays(args.delays)
    runner = web.AppRunner(make_app(delays, weights, args.drift_per_s, args.seed), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"PORT {port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--delays", default="0.005:0.9,0.02:0.1")
    parser.add_argument("--drift-per-s", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    asyncio.run(_main(parser.parse_args()))

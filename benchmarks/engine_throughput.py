"""End-to-end chat throughput of the engine with no limit and no latency, checkpoint and Parquet included.

Target: at least 1,000 completed chat items per second on this 2-core machine (curator measured
here: about 330 per second). Reports items/s, CPU microseconds per item (this process; with
``--gateway uvicorn`` the emulator's own CPU is in its process and reported separately), and
the ratio to the target. Timing covers: adding the items to a fresh checkpoint store, executing
them all (each item: `sending` committed, request, `done` with its result committed), and
exporting the results Parquet.

    .venv/bin/python benchmarks/engine_throughput.py [--items 20000] [--gateway asgi|uvicorn] [--with-costs]

``asgi``: the emulator in this process through httpx.ASGITransport (its CPU counts against
ours). ``uvicorn``: the emulator served in a subprocess, the client on the aiohttp transport that
real runs use (``relaybatch.gateway.aiohttp_transport``).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from bench_items import chat_items
from machine_probe import probe
from ports import free_port
from pydantic import SecretStr

from relaybatch.engine import CheckpointStore, EngineSettings, execute, export_results
from relaybatch.gateway import GatewayClient, aiohttp_transport
from relaybatch.run import RunPaths, open_run
from relaybatch.settings import EMULATOR_DEMO_KEY

TARGET_ITEMS_PER_SECOND = 1000


def serve_emulator() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "relaybatch", "emulator", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(f"{url}/_emulator/requests", timeout=1)
            return server, url
        except httpx.TransportError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("the emulator did not start")


def open_client(gateway: str, url: str | None) -> GatewayClient:
    key = SecretStr(EMULATOR_DEMO_KEY)
    if gateway == "asgi":
        from relaybatch.emulator import create_app, load_config

        transport: httpx.AsyncBaseTransport = httpx.ASGITransport(app=create_app(load_config()))
        return GatewayClient("http://emulator.local", key, transport=transport)
    assert url is not None
    return GatewayClient(url, key, transport=aiohttp_transport())


async def run(
    items: int, gateway: str, concurrency: int, folder: Path, url: str | None, with_costs: bool = False
) -> dict[str, float]:
    work = list(chat_items(items, "throughput"))
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    paths = RunPaths(folder)
    store = CheckpointStore(paths.checkpoint)
    store.save_run(folder.name, {"concurrency": concurrency})
    store.add_items(work)
    async with open_client(gateway, url) as client:
        if with_costs:
            # As `relaybatch run` assembles it (relaybatch.run.open_run): prices fetched, every call
            # settled into the cost ledger (costs.sqlite), the ledger Parquet written at the end.
            async with open_run(paths, client=client) as assembled:
                summary = await assembled.execute()
        else:
            summary = await execute(store, client, settings=EngineSettings(concurrency=concurrency))
    export_results(store, paths.results)
    store.close()
    wall = time.perf_counter() - wall_start
    cpu = time.process_time() - cpu_start
    if summary.counts != {"done": items}:
        raise SystemExit(f"not every item finished: {summary.counts}")
    return {"wall": wall, "cpu": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--gateway", choices=["asgi", "uvicorn"], default="uvicorn")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--with-costs", action="store_true", help="also price every call into the cost ledger (as runs do)"
    )
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="engine-throughput-"))
    server, url = serve_emulator() if options.gateway == "uvicorn" else (None, None)
    try:
        figures = asyncio.run(
            run(options.items, options.gateway, options.concurrency, folder, url, options.with_costs)
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
    server_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    rate = options.items / figures["wall"]
    print(
        f"gateway: {options.gateway}, items: {options.items}, concurrency: {options.concurrency}, "
        f"cost ledger: {'yes' if options.with_costs else 'no'}"
    )
    print(
        f"wall {figures['wall']:.2f} s -> {rate:,.0f} completed chat items/s "
        f"(target {TARGET_ITEMS_PER_SECOND})"
    )
    print(f"runner CPU: {figures['cpu'] / options.items * 1e6:,.0f} microseconds per item")
    if server is not None:
        emulator_cpu = server_cpu.ru_utime + server_cpu.ru_stime
        print(
            f"emulator CPU (its own process): {emulator_cpu / options.items * 1e6:,.0f} microseconds per item"
        )
    print(probe())
    print(f"ratio to target: {rate / TARGET_ITEMS_PER_SECOND:.2f}")


if __name__ == "__main__":
    main()

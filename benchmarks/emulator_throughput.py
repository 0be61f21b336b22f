"""How many plain chat requests per second the emulator serves on one core under uvicorn.

Target: at least 1,500 requests/s with no injected latency, so the emulator is never the bottleneck
of the runner's own benchmarks. The server runs as `relaybatch emulator serve` pinned to one CPU;
several client processes pinned to the other CPUs drive it for a fixed time after a warm-up, each
over keep-alive HTTP/1.1 connections on asyncio streams (a request costs the client little, so the
figure is the server's). Prints requests per server CPU-second (the throughput of one core of its
own, robust when other processes share the machine), the wall-clock rate, and the ratio to target.

    .venv/bin/python benchmarks/emulator_throughput.py [--seconds 10] [--clients 2] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ports import free_port

TARGET_RPS = 1500
REPO = Path(__file__).resolve().parents[1]
BODY = json.dumps(
    {"model": "relay-chat-small", "messages": [{"role": "user", "content": "Name three rivers in Europe."}]}
).encode()
HEADERS = {"Authorization": "Bearer rb-demo-key", "Content-Type": "application/json"}


def raw_request(host: str, port: int) -> bytes:
    """One keep-alive HTTP/1.1 request, built once: the load generator costs little per request,
    so on a shared machine the server, not the client, is what the benchmark measures."""
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        + "".join(f"{name}: {value}\r\n" for name, value in HEADERS.items())
        + f"Content-Length: {len(BODY)}\r\n\r\n"
    )
    return head.encode() + BODY


async def connection(host: str, port: int, stop_at: float) -> tuple[int, int]:
    reader, writer = await asyncio.open_connection(host, port)
    request = raw_request(host, port)
    ok = failed = 0
    try:
        while time.monotonic() < stop_at:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            if head.startswith(b"HTTP/1.1 200"):
                ok += 1
            else:
                failed += 1
    finally:
        writer.close()
        await writer.wait_closed()
    return ok, failed


async def drive(url: str, seconds: float, concurrency: int) -> tuple[int, int]:
    """``concurrency`` keep-alive connections, each sending its next request when the answer is in."""
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    stop_at = time.monotonic() + seconds
    results = await asyncio.gather(*(connection(host, int(port), stop_at) for _ in range(concurrency)))
    return sum(ok for ok, _ in results), sum(failed for _, failed in results)


def client_process(
    url: str,
    seconds: float,
    concurrency: int,
    cpus: set[int],
    nice: int,
    results: multiprocessing.Queue,
) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    if nice:
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, -nice)
    results.put(asyncio.run(drive(url, seconds, concurrency)))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve_command(port: int) -> list[str]:
    """`relaybatch emulator serve` on loopback at ``port``, with this interpreter."""
    serve = ["emulator", "serve", "--host", "127.0.0.1", "--port", str(port)]
    return [sys.executable, "-m", "relaybatch", *serve]


def wait_until_up(base: str, server: subprocess.Popen[bytes]) -> None:
    import urllib.request

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit("the emulator exited before serving")
        try:
            request = urllib.request.Request(
                base + "/v1/models", headers={"Authorization": "Bearer rb-demo-key"}
            )
            with urllib.request.urlopen(request, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("the emulator did not start within 60 s")


def run_clients(
    url: str, seconds: float, clients: int, concurrency: int, cpus: set[int], nice: int
) -> tuple[int, int]:
    results: multiprocessing.Queue = multiprocessing.Queue()
    workers = [
        multiprocessing.Process(target=client_process, args=(url, seconds, concurrency, cpus, nice, results))
        for _ in range(clients)
    ]
    for worker in workers:
        worker.start()
    totals = [results.get(timeout=seconds + 120) for _ in workers]
    for worker in workers:
        worker.join()
    return sum(ok for ok, _ in totals), sum(failed for _, failed in totals)


@dataclass
class Round:
    ok: int
    failed: int
    elapsed: float
    server_cpu: float

    @property
    def core_rps(self) -> float:
        """Requests per CPU-second the server used: its throughput on one core of its own, which
        the wall-clock rate understates whenever other processes share that core."""
        return self.ok / self.server_cpu if self.server_cpu else 0.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured duration of one round")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds; the median is reported")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured warm-up duration")
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight per client process")
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="raise the priority of server and clients by this much (root only)",
    )
    return parser.parse_args()


def measure(args: argparse.Namespace, server_cpu: set[int], client_cpus: set[int]) -> list[Round]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = serve_command(port)
    # The banner (address, keys, admin API) is not part of the figures; errors still reach stderr.
    server = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL)
    rounds = []
    try:
        os.sched_setaffinity(server.pid, server_cpu)
        if args.nice:
            # On a machine shared with other work, a raised priority gives the server its core for
            # the run (root only; otherwise the run goes on at normal priority). Clients likewise.
            with contextlib.suppress(PermissionError):
                os.setpriority(os.PRIO_PROCESS, server.pid, -args.nice)
        wait_until_up(base, server)
        url = base + "/v1/chat/completions"
        run_clients(url, args.warmup, args.clients, args.concurrency, client_cpus, args.nice)
        for _ in range(args.rounds):
            started, cpu_before = time.monotonic(), cpu_seconds(server.pid)
            ok, failed = run_clients(
                url, args.seconds, args.clients, args.concurrency, client_cpus, args.nice
            )
            elapsed, cpu_used = time.monotonic() - started, cpu_seconds(server.pid) - cpu_before
            rounds.append(Round(ok, failed, elapsed, cpu_used))
    finally:
        server.terminate()
        server.wait(timeout=30)
    return rounds


def main() -> None:
    args = parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpus = {cpus[0]}, set(cpus[1:]) or {cpus[0]}
    rounds = measure(args, server_cpu, client_cpus)
    median = statistics.median(r.core_rps for r in rounds)
    ok, failed = sum(r.ok for r in rounds), sum(r.failed for r in rounds)
    elapsed, cpu_used = sum(r.elapsed for r in rounds), sum(r.server_cpu for r in rounds)
    print(f"emulator throughput: {median:,.0f} plain chat requests per server CPU-second (one core, median)")
    print("  rounds: " + ", ".join(f"{r.core_rps:,.0f}" for r in rounds))
    busy = cpu_used / elapsed
    where = f"the server {busy:.0%} busy on CPU {sorted(server_cpu)}"
    print(f"  wall clock: {ok / elapsed:,.0f} requests/s, {where}")
    clients = f"{args.clients} clients x {args.concurrency} in flight"
    print(f"  {ok:,} ok, {failed:,} failed in {elapsed:.1f} s; {clients}")
    verdict = "met" if median >= TARGET_RPS else "NOT met"
    print(f"  target {TARGET_RPS:,}/s: ratio {median / TARGET_RPS:.2f} ({verdict})")


if __name__ == "__main__":
    main()

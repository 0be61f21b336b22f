"""Two processes, one API key, one limit: do they share it?

Starts a Prefect server (`prefect server start`, private PREFECT_HOME, loopback port) and the
gateway emulator (uvicorn, loopback port, account limited to L requests per minute), then two
worker processes that each send chat requests as fast as their limiter lets them, for the same
period, through a SharedLimiter on the same Prefect global concurrency limit. Everything started
here is stopped here.

Target (issue 8): together at most L per minute, no 429 storm, and at least 90 % of L.

    .venv/bin/python benchmarks/shared_limit.py [--rpm 600] [--seconds 75]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
from ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
DEMO_KEY = "rb-demo-key"
WINDOW_SECONDS = 60.0


@contextmanager
def started(command: list[str], env: Mapping[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child in its own process group, stopped (group-wide) on the way out."""
    with open(log, "wb") as output:
        process = subprocess.Popen(
            command, env=dict(env), stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def wait_healthy(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"not healthy after {seconds:.0f} s: {url}")


def emulator_config(path: Path, rpm: int) -> Path:
    import yaml

    config = yaml.safe_load((REPO_ROOT / "configs" / "emulator.yaml").read_text())
    for account in config["accounts"]:
        account["rate_limit_rpm"] = rpm
        account["balance_usd"] = "100000.00"
    path.write_text(yaml.safe_dump(config))
    return path


# -- the worker: one process sending through its SharedLimiter --------------------------------


class Recording:
    """Wraps the worker's limiter to record every answer's time and status."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.answers: list[tuple[float, int]] = []

    async def acquire(self, purpose: Any = "submit") -> None:
        await self.inner.acquire(purpose)

    def observe(self, status: int, headers: Mapping[str, str], rate_limit: Any = None) -> None:
        self.answers.append((time.time(), status))
        self.inner.observe(status, headers, rate_limit)

    def no_answer(self) -> None:
        self.inner.no_answer()


async def work(args: argparse.Namespace) -> None:
    from pydantic import SecretStr

    from relaybatch.engine.limiter import AdaptiveTokenBucket
    from relaybatch.gateway import GatewayClient, GatewayError
    from relaybatch.shared_limit import SharedLimit, open_shared_limiter

    limit = SharedLimit(rpm=args.rpm, name=args.limit_name, block=args.block, burst=args.burst)
    # The in-process bucket paces this process and learns the account limit from the headers.
    shared = await open_shared_limiter(limit, local=AdaptiveTokenBucket(args.rpm))
    lease_times: list[tuple[float, float]] = []
    lease = shared._lease

    async def timed_lease(tokens: int) -> None:
        asked = time.time()
        await lease(tokens)
        lease_times.append((asked, time.time()))

    shared._lease = timed_lease
    recording = Recording(shared)
    request = {"model": "relay-chat-small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    async with GatewayClient(args.base_url, SecretStr(DEMO_KEY)) as warm_up:
        await warm_up.list_models()  # imports and connections ready before the clock starts
    # Start together: on a loaded machine the two imports can finish tens of seconds apart.
    Path(f"{args.output}.ready").touch()
    while len(list(Path(args.output).parent.glob("*.ready"))) < 2:
        await asyncio.sleep(0.05)
    stop_at = time.time() + args.seconds
    async with GatewayClient(args.base_url, SecretStr(DEMO_KEY), limiter=recording) as client:

        async def sender() -> None:
            while time.time() < stop_at:
                with suppress(GatewayError):  # 429s are counted by Recording, not raised
                    await client.chat_completions(request)

        await asyncio.gather(*(sender() for _ in range(args.concurrency)))
    Path(args.output).write_text(
        json.dumps(
            {
                "answers": recording.answers,
                "leases": shared.leases,
                "tokens_leased": shared.tokens_leased,
                "tokens_dropped": shared.tokens_dropped,
                "lease_wait_seconds": shared.lease_wait_seconds,
                "lease_times": lease_times,
            }
        )
    )


# -- the parent: servers, two workers, figures -----------------------------------------------


def max_in_window(times: list[float], window: float) -> int:
    best, start = 0, 0
    for end, moment in enumerate(times):
        while moment - times[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


def measure(args: argparse.Namespace) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="shared-limit-"))
    prefect_port, emulator_port = free_port(), free_port()
    api_url = f"http://127.0.0.1:{prefect_port}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(scratch / "prefect-home"),
        "PREFECT_API_URL": api_url,
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_LOGGING_TO_API_ENABLED": "false",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    }
    config = emulator_config(scratch / "emulator.yaml", args.rpm)
    server = [PYTHON, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(prefect_port)]
    emulator = [
        PYTHON, "-m", "relaybatch", "emulator", "serve",
        "--port", str(emulator_port), "--config", str(config),
    ]  # fmt: skip
    with (
        started(server, env, scratch / "prefect-server.log"),
        started(emulator, env, scratch / "emulator.log"),
    ):
        began = time.monotonic()
        wait_healthy(f"{api_url}/health", 300)
        wait_healthy(f"http://127.0.0.1:{emulator_port}/v1/models", 30)
        print(f"prefect server + emulator healthy after {time.monotonic() - began:.1f} s", flush=True)
        outputs = [scratch / f"worker-{n}.json" for n in (1, 2)]
        worker_command = [
            *(PYTHON, __file__, "worker", "--rpm", str(args.rpm), "--seconds", str(args.seconds)),
            *("--base-url", f"http://127.0.0.1:{emulator_port}"),
            *("--limit-name", args.limit_name, "--concurrency", str(args.concurrency)),
            *(["--block", str(args.block)] if args.block else []),
            *(["--burst", str(args.burst)] if args.burst else []),
        ]
        workers = [
            subprocess.Popen([*worker_command, "--output", str(output)], env=env) for output in outputs
        ]
        try:
            for worker in workers:
                if worker.wait(timeout=args.seconds + 180) != 0:
                    raise SystemExit("a worker failed")
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait()
    results = [json.loads(output.read_text()) for output in outputs]
    answers = [[(moment, status) for moment, status in result["answers"]] for result in results]
    ok = sorted(moment for worker in answers for moment, status in worker if status < 400)
    limited = sum(status == 429 for worker in answers for _, status in worker)
    # "When both have work": from the later worker's first answer to the earlier one's last.
    both_from = max(min(moment for moment, _ in worker) for worker in answers)
    both_to = min(max(moment for moment, _ in worker) for worker in answers)
    together = [moment for moment in ok if both_from <= moment < both_to]
    achieved_rpm = len(together) / (both_to - both_from) * 60
    return {
        "rpm_limit": args.rpm,
        "both_sending_seconds": round(both_to - both_from, 1),
        "ok_total": len(ok),
        "429s": limited,
        "achieved_rpm_together": round(achieved_rpm, 1),
        "ratio_to_limit": round(achieved_rpm / args.rpm, 3),
        "max_in_any_60s": max_in_window(ok, WINDOW_SECONDS),
        "per_worker_together": [
            sum(1 for moment, status in worker if status < 400 and both_from <= moment < both_to)
            for worker in answers
        ],
        "leases": [result["leases"] for result in results],
        "tokens_dropped": [result["tokens_dropped"] for result in results],
        "lease_wait_seconds": [round(result["lease_wait_seconds"], 1) for result in results],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="measure", choices=["measure", "worker"])
    parser.add_argument("--rpm", type=int, default=600)
    parser.add_argument("--seconds", type=float, default=75.0)
    parser.add_argument("--block", type=int, default=None)
    parser.add_argument("--burst", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--limit-name", default="bench-shared-limit")
    parser.add_argument("--base-url", default="")
    parser.add_argument("--output", default="")
    args = parser.parse_args()
    if args.mode == "worker":
        asyncio.run(work(args))
        return
    figures = measure(args)
    print(json.dumps(figures, indent=2))
    ratio = figures["ratio_to_limit"]
    within = figures["max_in_any_60s"] <= args.rpm
    print(
        f"achieved {figures['achieved_rpm_together']} of {args.rpm} rpm together = {ratio:.1%} "
        f"(target >= 90%), max in any 60 s {figures['max_in_any_60s']} (target <= {args.rpm}), "
        f"429s {figures['429s']}: {'PASS' if ratio >= 0.9 and within and figures['429s'] <= 2 else 'FAIL'}"
    )


if __name__ == "__main__":
    main()

"""The proof suites' emulator: served by uvicorn on a loopback port, in a thread of the test process.

A runner under test is a separate process (it gets SIGKILLed, it runs the real CLI), so it must
reach the emulator over a socket; the emulator lives in the test process, so the test reads its
request log and ledger directly and the emulator survives every kill of the runner.
"""

from __future__ import annotations

import copy
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
import yaml

from relaybatch.emulator import EmulatorConfig, EmulatorState, create_app
from relaybatch.emulator.state import hash_body

REPO_ROOT = Path(__file__).resolve().parents[2]
SHIPPED_CONFIG = REPO_ROOT / "configs" / "emulator.yaml"
PYTHON = sys.executable

# Emulator-clock seconds for media work, cut from the real gateway's minutes to fractions of a second.
FAST_MEDIA: dict[str, Any] = {
    "video": {
        "queued_seconds": 0.2,
        "render_seconds_base": 0.3,
        "render_seconds_per_video_second": 0.05,
        "v1_pending_seconds": 0.2,
        "v1_processing_seconds": 0.3,
    },
}


def shipped_config_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(SHIPPED_CONFIG.read_text(encoding="utf-8"))
    return data


def config_with(
    *,
    demo_key: str | None = None,
    faults: dict[str, Any] | None = None,
    rate_limit_rpm: int | None = None,
    balance_usd: str | None = None,
    media: dict[str, Any] | None = None,
) -> EmulatorConfig:
    """The shipped catalog with fast media, and the demo account changed as asked."""
    data = copy.deepcopy(shipped_config_data())
    data["media"] = {**(data.get("media") or {}), **FAST_MEDIA, **(media or {})}
    demo = next(account for account in data["accounts"] if account["name"] == "demo")
    if demo_key is not None:
        demo["api_keys"] = [demo_key]
    if rate_limit_rpm is not None:
        demo["rate_limit_rpm"] = rate_limit_rpm
    if balance_usd is not None:
        demo["balance_usd"] = balance_usd
    if faults is not None:
        data["faults"] = faults
    return EmulatorConfig.model_validate(data)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class Exchange:
    """One request as the wire saw it, and the status answered (0: the connection was broken)."""

    method: str
    target: str  # path and query string
    body_hash: str
    status: int


@dataclass(frozen=True)
class Arrival:
    """A request as it reached the server, recorded at once (its answer may never come)."""

    method: str
    target: str
    arrived: float  # time.monotonic() when its head came in (one clock for every process here)
    body: bytes


class WireRecorder:
    """ASGI wrapper that records every public request and the status it got, in arrival order;
    ``arrivals`` has each request as soon as its body is in, with the moment its head came."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.exchanges: list[Exchange] = []
        self.arrivals: list[Arrival] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/_emulator/"):
            await self.app(scope, receive, send)
            return
        arrived = time.monotonic()
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        query = scope.get("query_string", b"").decode("latin-1")
        target = scope["path"] + (f"?{query}" if query else "")
        self.arrivals.append(Arrival(scope["method"], target, arrived, body))
        delivered = False

        async def replay() -> Any:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        status = 0

        async def watch(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, replay, watch)
        except Exception:
            status = 0  # a dropped connection: the client saw no answer
            raise
        finally:
            self.exchanges.append(Exchange(scope["method"], target, hash_body(body), status))


@dataclass(frozen=True)
class Served:
    url: str
    state: EmulatorState
    recorder: WireRecorder


@contextmanager
def served_emulator(config: EmulatorConfig) -> Iterator[Served]:
    """Serve an emulator app until the block ends; the server thread is always joined."""
    app = create_app(config)
    recorder = WireRecorder(app)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(recorder, host="127.0.0.1", port=port, log_level="critical", lifespan="off")
    )
    thread = threading.Thread(target=server.run, name=f"emulator-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            thread.join(timeout=10)
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield Served(f"http://127.0.0.1:{port}", app.state.emulator, recorder)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def runner_environment(home: Path, *, api_key: str, base_url: str, **extra: str) -> dict[str, str]:
    """A clean environment for a runner subprocess: its own Prefect home, runs folder and temp."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("PREFECT_", "RELAYBATCH_")) and name != "PYTEST_CURRENT_TEST"
    }
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    environment.update(
        {
            "RELAYBATCH_API_KEY": api_key,
            "RELAYBATCH_BASE_URL": base_url,
            "RELAYBATCH_RUNS_DIR": str(home / "runs"),
            "PREFECT_HOME": str(home / "prefect-home"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "TMPDIR": str(home / "tmp"),
            "HOME": str(home),
            **extra,
        }
    )
    return environment

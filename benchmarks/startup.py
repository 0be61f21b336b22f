"""Start-up of `relaybatch run` in the default mode (no Prefect server configured).

Two figures, each the median of N runs, with the ratio to the 3 s target (issue 16):

- process start to first request: `relaybatch run` of a fresh 200-item manifest against a tiny
  local HTTP server that notes when the first request arrives (the run is stopped right after);
- no-op resume: `relaybatch run` again on a run that is already finished (process wall time).

It also times `import prefect` in a fresh interpreter, which the default mode no longer pays.

    .venv/bin/python benchmarks/startup.py [--repeat 5]

Timing figures on a loaded machine are noisy: run it on a quiet one for the figures you keep.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TARGET_SECONDS = 3.0
RELAYBATCH = str(Path(sys.executable).parent / "relaybatch")


class FirstRequest(BaseHTTPRequestHandler):
    """Notes the arrival of the first request; answers 503 so the run does nothing billed."""

    arrived: float | None = None
    seen = threading.Event()

    def _answer(self) -> None:
        if FirstRequest.arrived is None:
            FirstRequest.arrived = time.monotonic()
            FirstRequest.seen.set()
        self.send_response(503)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": {"type": "unavailable", "message": "benchmark"}}')

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


def _env(base_url: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RELAYBATCH_"))}
    if base_url:
        env["RELAYBATCH_BASE_URL"] = base_url
        env["RELAYBATCH_API_KEY"] = "rb-demo-key"
    return env


def _manifest(folder: Path, items: int = 200) -> Path:
    path = folder / "startup.csv"
    rows = "".join(f"q{n},relay-chat-small,Say {n}\n" for n in range(items))
    path.write_text("id,model,prompt\n" + rows, encoding="utf-8")
    return path


def first_request_seconds(folder: Path, server: ThreadingHTTPServer) -> float:
    FirstRequest.arrived = None
    FirstRequest.seen.clear()
    base_url = f"http://127.0.0.1:{server.server_address[1]}"
    runs = folder / f"runs-{time.monotonic_ns()}"
    started = time.monotonic()
    process = subprocess.Popen(
        [RELAYBATCH, "run", str(_manifest(folder)), "--runs-dir", str(runs)],
        env=_env(base_url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        if not FirstRequest.seen.wait(120):
            raise SystemExit("no request within 120 s")
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert FirstRequest.arrived is not None
    return FirstRequest.arrived - started


def noop_resume_seconds(folder: Path) -> float:
    command = [RELAYBATCH, "run", str(_manifest(folder, 20)), "--runs-dir", str(folder / "finished")]
    subprocess.run(command, env=_env(), check=True, capture_output=True)  # finish it once first
    started = time.monotonic()
    subprocess.run(command, env=_env(), check=True, capture_output=True)
    return time.monotonic() - started


def import_prefect_seconds() -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import prefect"], check=True, env=_env())
    return time.monotonic() - started


def _line(name: str, samples: list[float]) -> str:
    median = statistics.median(samples)
    runs = ", ".join(f"{sample:.2f}" for sample in samples)
    ratio = median / TARGET_SECONDS
    return f"{name}: median {median:.2f} s (ratio to {TARGET_SECONDS:.0f} s: {ratio:.2f}; runs {runs})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), FirstRequest)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            first = [first_request_seconds(folder, server) for _ in range(args.repeat)]
            resume = [noop_resume_seconds(folder) for _ in range(args.repeat)]
    finally:
        server.shutdown()
    imports = [import_prefect_seconds() for _ in range(3)]
    print(_line("process start to first request", first))
    print(_line("no-op resume of a finished run", resume))
    print(f"import prefect (not paid without a server): median {statistics.median(imports):.2f} s")
    print(f"cpus: {os.cpu_count()}, load average: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

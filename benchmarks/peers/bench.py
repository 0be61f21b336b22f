"""Side-by-side benchmark: the same chat work through relaybatch and through its peers, on one emulator.

Each (scenario, tool) pair gets a fresh emulator served by uvicorn on a loopback port (so request
logs, ledgers and rate-limit windows never mix), runs in its own process (peak memory is that
process's own maximum resident set, from ``wait4``), and is timed by the tool script itself from
the moment it has the work file until its results are written. Afterwards the emulator is asked
what it saw: statuses sent (429s), request bodies seen more than once (resends) and bodies billed
more than once (duplicate charges).

Peers live in their own virtualenv (default ``benchmarks/peers/.venv-peers``, git-ignored),
installed from the package registry by ``--install``. Nothing here reaches any other host:
tiktoken's cl100k_base encoding comes from the copy LiteLLM ships inside its wheel
(see ``peer_environment``).

    .venv/bin/python benchmarks/peers/bench.py --install          # once: build the peers' venv
    .venv/bin/python benchmarks/peers/bench.py                    # both scenarios, every tool
    .venv/bin/python benchmarks/peers/bench.py --open-items 2000 --tools relaybatch,curator
    .venv/bin/python benchmarks/peers/bench.py --scenarios open --tools relaybatch-cli,curator,bare

Tools: ``relaybatch`` is the engine in a warm process (``tool_relaybatch.py``); ``relaybatch-cli``
is ``relaybatch run`` exactly as a user types it (start-up, validation, checkpoint, execution,
results, ledger and report included); ``bare`` is a bare aiohttp loop (``tool_bare.py``), the
ceiling. Every tool is also timed as a whole process, from spawn to exit ("process s"), which is
what a user's clock sees; the end-to-end target of ``relaybatch-cli`` is 2,000 items/s.
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
import venv
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROJECT_PYTHON = Path(sys.executable)
DEFAULT_PEERS_VENV = HERE / ".venv-peers"
PEER_PACKAGES = ["bespokelabs-curator"]  # brings LiteLLM with it
BENCH_KEY = "rb-bench-key-0001"
MODEL = "relay-chat-small"
# Large enough that the emulator ends its answers with "stop": curator counts "length" as a failure.
MAX_TOKENS = 128
CONCURRENCY = 64  # the same in-flight cap for every tool
MAX_RETRIES = 5  # the same retry count for every tool that has one
CLI_TARGET_ITEMS_PER_SECOND = 2_000  # relaybatch run, process start to exit (issue: performance end to end)
CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Scenario:
    name: str
    items: int
    rpm: int  # the account's enforced limit; 0 = none
    latency: float  # seconds added to every chat answer
    injected_429_rate: float

    def faults(self) -> dict[str, Any]:
        rules: list[dict[str, Any]] = []
        if self.injected_429_rate:
            rules.append({"fault": "status=429", "rate": self.injected_429_rate, "paths": [CHAT_PATH]})
        if self.latency:
            rules.append({"fault": f"latency={self.latency}", "rate": 1.0, "paths": [CHAT_PATH]})
        return {"seed": 7, "rules": rules}


@dataclass
class Outcome:
    tool: str
    scenario: str
    completed: int = 0
    failed: int = 0
    seconds: float = 0.0
    process_seconds: float = 0.0
    peak_mb: float = 0.0
    statuses: Counter[int] = field(default_factory=Counter)
    resends: int = 0
    billed_twice: int = 0
    load_average: float = 0.0
    note: str = ""

    @property
    def per_second(self) -> float:
        return self.completed / self.seconds if self.seconds else 0.0

    @property
    def process_per_second(self) -> float:
        return self.completed / self.process_seconds if self.process_seconds else 0.0


# -- environment -----------------------------------------------------------------------------


def peer_python(venv_dir: Path) -> Path:
    return venv_dir / "bin" / "python"


def install_peers(venv_dir: Path) -> None:
    """A separate virtualenv for the peers, from the package registry only."""
    if not peer_python(venv_dir).exists():
        venv.EnvBuilder(with_pip=True).create(venv_dir)
    pip = [str(peer_python(venv_dir)), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, *PEER_PACKAGES], check=True)


def tiktoken_cache_dir(venv_dir: Path) -> Path:
    """LiteLLM's wheel ships tiktoken's cl100k_base file under the name tiktoken's cache expects.

    tiktoken looks in TIKTOKEN_CACHE_DIR for a file named by the SHA-1 of the encoding's download
    address before it tries to download; LiteLLM points tiktoken at this very folder itself. We
    set it explicitly so curator's own ``tiktoken.get_encoding("cl100k_base")`` finds it too.
    """
    found = sorted((venv_dir / "lib").glob("python3*/site-packages/litellm/litellm_core_utils/tokenizers"))
    if not found:
        raise SystemExit(f"LiteLLM's tokenizer folder not found under {venv_dir}; run with --install")
    return found[0]


def peer_environment(venv_dir: Path, cache_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TIKTOKEN_CACHE_DIR": str(tiktoken_cache_dir(venv_dir)),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "TELEMETRY_ENABLED": "false",
        "CURATOR_DISABLE_CACHE": "0",
        "CURATOR_CACHE_DIR": str(cache_dir),
        "CURATOR_VIEWER": "0",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(cache_dir / "hf"),
        "OPENAI_API_KEY": BENCH_KEY,
        "PYTHONWARNINGS": "ignore",
    }


def peer_versions(venv_dir: Path) -> dict[str, str]:
    script = (
        "import importlib.metadata as m, json;"
        "names = ('bespokelabs-curator', 'litellm', 'tiktoken', 'aiohttp');"
        "print(json.dumps({n: m.version(n) for n in names}))"
    )
    done = subprocess.run(
        [str(peer_python(venv_dir)), "-c", script], capture_output=True, text=True, check=True
    )
    versions: dict[str, str] = json.loads(done.stdout)
    return versions


# -- the emulator ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def emulator_config(scenario: Scenario, folder: Path) -> Path:
    """The shipped catalog with one benchmark account and the scenario's limit and faults."""
    config = yaml.safe_load((REPO / "configs" / "emulator.yaml").read_text(encoding="utf-8"))
    config["accounts"] = [
        {"name": "bench", "api_keys": [BENCH_KEY], "balance_usd": "1000000", "rate_limit_rpm": scenario.rpm}
    ]
    config["faults"] = scenario.faults()
    path = folder / f"emulator-{scenario.name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


class ServedEmulator:
    """``emulator_server.py`` in a subprocess on a free loopback port; always stopped on exit."""

    def __init__(self, config: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [str(PROJECT_PYTHON), str(HERE / "emulator_server.py"), "--port", str(self.port)]
        self.process = subprocess.Popen([*command, "--config", str(config)], cwd=REPO)

    def __enter__(self) -> ServedEmulator:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"emulator exited with {self.process.returncode}")
            try:
                httpx.get(f"{self.url}/_emulator/clock", timeout=1).raise_for_status()
                return self
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        raise SystemExit("emulator did not start within 60 s")

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def admin(self, path: str) -> Any:
        return httpx.get(f"{self.url}{path}", timeout=120).json()


# -- running one tool ------------------------------------------------------------------------


def write_work(items: int, folder: Path) -> Path:
    """The work as a relaybatch table manifest; the peers read the same file."""
    path = folder / f"chat-{items}.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for number in range(items):
            row = {
                "id": f"r{number}",
                "model": MODEL,
                "prompt": f"row {number}: say something short",
                "max_tokens": MAX_TOKENS,
            }
            handle.write(json.dumps(row) + "\n")
    return path


def tool_command(
    tool: str, scenario: Scenario, work: Path, emulator: ServedEmulator, folder: Path, peers: Path
) -> tuple[list[str], dict[str, str]]:
    if tool == "relaybatch":
        command = [str(PROJECT_PYTHON), str(HERE / "tool_relaybatch.py"), "--work", str(work)]
        command += ["--base-url", emulator.url, "--out", str(folder), "--concurrency", str(CONCURRENCY)]
        if scenario.rpm:
            command += ["--rpm", str(scenario.rpm)]
        return command, {**os.environ, "RELAYBATCH_API_KEY": BENCH_KEY}
    if tool == "relaybatch-cli":
        relaybatch = PROJECT_PYTHON.with_name("relaybatch")
        command = [str(relaybatch), "run", str(work), "--runs-dir", str(folder / "runs")]
        command += ["--base-url", emulator.url]
        if (
            "--concurrency"
            in subprocess.run([str(relaybatch), "run", "--help"], capture_output=True, text=True).stdout
        ):
            command += ["--concurrency", str(CONCURRENCY)]
        if scenario.rpm and "--rate-limit-rpm" in " ".join(command):
            command += ["--rate-limit-rpm", str(scenario.rpm)]
        return command, {**os.environ, "RELAYBATCH_API_KEY": BENCH_KEY}
    common = ["--work", str(work), "--base-url", f"{emulator.url}/v1", "--api-key", BENCH_KEY]
    if tool == "bare":
        return [str(PROJECT_PYTHON), str(HERE / "tool_bare.py"), *common], dict(os.environ)
    common += ["--concurrency", str(CONCURRENCY), "--max-retries", str(MAX_RETRIES)]
    environment = peer_environment(peers, folder)
    if tool == "curator":
        rpm = ["--rpm", str(scenario.rpm)] if scenario.rpm else []
        return [str(peer_python(peers)), str(HERE / "tool_curator.py"), *common, *rpm], environment
    if tool == "litellm":
        return [str(peer_python(peers)), str(HERE / "tool_litellm.py"), *common], environment
    raise SystemExit(f"unknown tool {tool!r}")


def run_tool(tool: str, scenario: Scenario, work: Path, root: Path, peers: Path, timeout: float) -> Outcome:
    outcome = Outcome(tool, scenario.name, load_average=os.getloadavg()[0])
    folder = root / f"{scenario.name}-{tool}"
    folder.mkdir()
    with ServedEmulator(emulator_config(scenario, root)) as emulator:
        command, environment = tool_command(tool, scenario, work, emulator, folder, peers)
        with (folder / "tool.out").open("w") as out, (folder / "tool.log").open("w") as log:
            spawned = time.perf_counter()
            process = subprocess.Popen(command, stdout=out, stderr=log, env=environment, cwd=folder)
            peak_kb, timed_out = wait_with_peak_memory(process, timeout)
            outcome.process_seconds = time.perf_counter() - spawned
        outcome.peak_mb = peak_kb / 1024
        if timed_out:
            outcome.note = f"killed after {timeout:.0f} s (completed = distinct bodies billed)"
        stdout = (folder / "tool.out").read_text(encoding="utf-8")
        if tool != "relaybatch-cli":
            _read_tool_result(outcome, stdout, folder)
        outcome.statuses = Counter(
            {int(code): count for code, count in emulator.admin("/_bench/statuses").items()}
        )
        requests = emulator.admin("/_emulator/requests")
        outcome.resends = sum(
            entry["count"] - 1
            for entry in requests["distinct"]
            if entry["path"] == CHAT_PATH and entry["count"] > 1
        )
        ledger = emulator.admin("/_emulator/ledger")
        billed = Counter(charge["body_hash"] for charge in ledger["charges"])
        outcome.billed_twice = sum(count - 1 for count in billed.values() if count > 1)
        if tool == "relaybatch-cli" and not timed_out:
            # The CLI prints for people, not JSON: count what the gateway billed; its own clock
            # is the process's, start-up and every file written included.
            outcome.completed, outcome.seconds = len(billed), outcome.process_seconds
            outcome.failed = scenario.items - outcome.completed
            if process.returncode != 0:
                outcome.note = f"exit {process.returncode}; see {folder / 'tool.log'}"
        if timed_out:
            outcome.completed = len(billed)
            outcome.failed = scenario.items - outcome.completed
            outcome.seconds = timeout
    return outcome


def wait_with_peak_memory(process: subprocess.Popen[bytes], timeout: float) -> tuple[int, bool]:
    """Reap the tool; its peak resident set in KiB (``wait_with_usage``), and whether it timed out."""
    peak_kb, _, timed_out = wait_with_usage(process, timeout)
    return peak_kb, timed_out


def wait_with_usage(process: subprocess.Popen[bytes], timeout: float) -> tuple[int, float, bool]:
    """Reap the tool; its peak resident set in KiB: the high-water mark of its own memory; the CPU
    seconds it used (user + system, all its threads: a figure a loaded machine stretches less than
    the wall clock); and whether it timed out.

    ``wait4``'s ``ru_maxrss`` alone is not that: Linux folds in the memory of the process it was
    forked from (a child of a 300 MB parent that only runs ``python -c pass`` reports 330 MB), so a
    benchmark that has read a big results file reported its own size for the next run (a 200,000-item
    resume: 196 MB by wait4, at most 158 by the child's own mark). ``VmHWM`` of /proc/PID/status
    belongs to the running program only; it is read every 20 ms (a rise in the last 20 ms before
    exit is missed; a process gone within two readings, or no /proc, gets wait4's figure)."""
    deadline = time.monotonic() + timeout
    timed_out = False
    own_peak, readings = 0, 0
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            cpu = usage.ru_utime + usage.ru_stime
            return (own_peak if readings >= 2 else usage.ru_maxrss), cpu, timed_out
        high_water = _high_water_kb(process.pid)
        readings += 1 if high_water else 0
        own_peak = max(own_peak, high_water)
        if time.monotonic() > deadline and not timed_out:
            process.kill()
            timed_out = True
        time.sleep(0.02)


def _high_water_kb(pid: int) -> int:
    """The process's VmHWM (KiB), or 0 when /proc does not say (not Linux, or it just exited)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _read_tool_result(outcome: Outcome, stdout: str, folder: Path) -> None:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        outcome.note = outcome.note or f"no result; see {folder / 'tool.log'}"
        return
    result = json.loads(lines[-1])
    outcome.completed = int(result.get("completed", 0))
    outcome.failed = int(result.get("failed", 0))
    outcome.seconds = float(result.get("seconds", 0.0))
    errors = [json.loads(line).get("error") for line in lines[:-1]] + [result.get("first_error")]
    if any(errors):
        first = next(error for error in errors if error)
        outcome.note = outcome.note or " ".join(first.split())[:160].replace("|", "/")


# -- report ----------------------------------------------------------------------------------


def table(outcomes: list[Outcome]) -> str:
    reference = next((o for o in outcomes if o.tool.startswith("relaybatch")), None)
    columns = ["tool", "completed", "failed", "timed s", "items/s", "process s", "items/s (process)"]
    columns += ["vs relaybatch", "requests", "429s"]
    columns += ["resent bodies", "billed twice", "peak MB", "load", "note"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for outcome in outcomes:
        ratio = (
            outcome.process_per_second / reference.process_per_second
            if reference and reference.process_per_second
            else 0.0
        )
        lines.append(
            f"| {outcome.tool} | {outcome.completed} | {outcome.failed} | {outcome.seconds:.1f} | "
            f"{outcome.per_second:.0f} | {outcome.process_seconds:.1f} | {outcome.process_per_second:.0f} | "
            f"{ratio:.2f}x | {sum(outcome.statuses.values())} | "
            f"{outcome.statuses.get(429, 0)} | {outcome.resends} | {outcome.billed_twice} | "
            f"{outcome.peak_mb:.0f} | {outcome.load_average:.1f} | {outcome.note} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true", help="Create or update the peers' virtualenv first")
    parser.add_argument("--peers-venv", type=Path, default=DEFAULT_PEERS_VENV)
    parser.add_argument("--tools", default="relaybatch,curator,litellm")
    parser.add_argument("--scenarios", default="open,limited")
    parser.add_argument("--open-items", type=int, default=20_000)
    parser.add_argument("--limited-items", type=int, default=1_200)
    parser.add_argument("--limited-rpm", type=int, default=600)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--inject-429", type=float, default=0.03, help="Share of chat requests answered 429")
    parser.add_argument(
        "--timeout", type=float, default=1200, help="Seconds a tool may run before it is killed"
    )
    parser.add_argument("--keep", action="store_true", help="Keep the work folder (printed) for inspection")
    args = parser.parse_args()

    if args.install:
        install_peers(args.peers_venv)
    tools = [tool.strip() for tool in args.tools.split(",") if tool.strip()]
    scenarios = {
        "open": Scenario("open", args.open_items, rpm=0, latency=0.0, injected_429_rate=0.0),
        "limited": Scenario("limited", args.limited_items, args.limited_rpm, args.latency, args.inject_429),
    }
    if any(tool in ("curator", "litellm") for tool in tools):
        print(f"peers: {peer_versions(args.peers_venv)}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="relaybatch-peers-"))
    try:
        for name in args.scenarios.split(","):
            scenario = scenarios[name.strip()]
            work = write_work(scenario.items, root)
            outcomes = []
            for tool in tools:
                print(f"{scenario.name}: running {tool} on {scenario.items} items ...", flush=True)
                outcomes.append(run_tool(tool, scenario, work, root, args.peers_venv, args.timeout))
            print(f"\n### {scenario.name}: {scenario}\n")
            print(table(outcomes), flush=True)
            for outcome in outcomes:
                if outcome.tool == "relaybatch-cli":
                    ratio = outcome.process_per_second / CLI_TARGET_ITEMS_PER_SECOND
                    print(
                        f"\nrelaybatch run end to end: {outcome.process_per_second:.0f} items/s, "
                        f"peak {outcome.peak_mb:.0f} MB; ratio to the {CLI_TARGET_ITEMS_PER_SECOND:,} "
                        f"items/s target: {ratio:.2f}"
                    )
    finally:
        if args.keep:
            print(f"work folder kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

"""The Python API against `relaybatch run`, and an export beside a running execution (issue 31).

1. API against CLI: the same 20,000 chat rows, zero latency, on a served emulator, each a fresh
   process timed from spawn to exit with its peak resident set (``wait_with_peak_memory``):
   - `relaybatch run chat-20000.jsonl` (the table shortcut);
   - a "notebook cell" process: pandas reads the rows into a DataFrame, ``relaybatch.Run.from_table``
     labels it inside a running event loop (the worker-thread path Jupyter takes) and
     ``run.results()`` gives the DataFrame joined to the input rows back.
   Targets: the API within 10 % of the CLI's seconds and of its peak memory. pandas and the input
   DataFrame are the notebook's own, there before relaybatch is used: the cell prints its resident
   set at that point, and the memory is compared both raw and above each process's start (the
   CLI's: a bare interpreter).
2. Export beside an execution: 20,000-item CLI runs alone and with `relaybatch export RUN` started
   once half the requests were answered (a snapshot under <run>/snapshot/), alternated; the run's
   items/s with and without, and the done rows the snapshot held.
3. Reuse: a second run of the same requests with ``reuse:`` naming the first: requests sent (the
   emulator's count) and the USD its ledger bills (targets: 0 and 0).

    .venv/bin/python benchmarks/notebook_api.py                 # both, 20,000 items, 3 rounds
    .venv/bin/python benchmarks/notebook_api.py --part export --rounds 5
    .venv/bin/python benchmarks/notebook_api.py --part reuse    # 3. a second run with reuse:
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

from bench import (
    BENCH_KEY,
    CONCURRENCY,
    MAX_TOKENS,
    MODEL,
    PROJECT_PYTHON,
    Scenario,
    ServedEmulator,
    emulator_config,
    wait_with_usage,
    write_work,
)
from cli_end_to_end import answered

TARGET_RATIO = 1.10

CELL = f"""
import asyncio, os, sys, time
started = time.monotonic()
import pandas as pd

def resident_mb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024

async def cell():
    rows = pd.read_json(sys.argv[1], lines=True)
    before = resident_mb()  # the notebook's own: an interpreter, pandas and the input DataFrame
    imported, own_cpu = time.monotonic(), time.process_time()
    import relaybatch
    job = relaybatch.Job(kind="chat", model="{MODEL}", prompt="{{prompt}}", id="{{id}}",
                         request={{"max_tokens": {MAX_TOKENS}}})
    run = relaybatch.Run.from_table(rows, job, name="api", runs_dir=sys.argv[2], base_url=sys.argv[3],
                                    concurrency={CONCURRENCY})
    made = time.monotonic()
    outcome = run.run(progress=False)
    ran = time.monotonic()
    labelled = run.results()
    assert outcome.counts == {{"done": len(rows)}}, outcome.counts
    assert len(labelled) == len(rows) and labelled["output_text"].notna().all()
    steps = ", ".join(f"{{name}} {{seconds:.2f}}" for name, seconds in outcome.timings.items())
    print(f"cell before-run {{before:.1f}} MB {{imported - started:.3f}} s {{own_cpu:.3f}} cpu; "
          f"pandas and the rows {{imported - started:.2f}} s, relaybatch "
          f"imported, table and manifest {{made - imported:.2f}} s, run {{ran - made:.2f}} s ({{steps}}), "
          f"results joined {{time.monotonic() - ran:.2f}} s", flush=True)

asyncio.new_event_loop().run_until_complete(cell())
"""

# A bare interpreter: where `relaybatch run` starts from (its own imports count against it, as the
# API's count against the cell).
IDLE = "import time; time.sleep(0.5)"


def timed(command: list[str], log: Path) -> tuple[float, float, float, int, str]:
    """Seconds from spawn to exit, peak MB, CPU seconds, exit code, and what the process printed."""
    environment = {**os.environ, "RELAYBATCH_API_KEY": BENCH_KEY}
    with log.open("w") as output:
        spawned = time.monotonic()
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=environment)
        peak_kb, cpu, _ = wait_with_usage(process, timeout=1800)
        seconds = time.monotonic() - spawned
    return seconds, peak_kb / 1024, cpu, process.returncode or 0, log.read_text()


def cli_command(work: Path, runs: Path, emulator: ServedEmulator) -> list[str]:
    relaybatch = PROJECT_PYTHON.with_name("relaybatch")
    return [str(relaybatch), "run", str(work), "--runs-dir", str(runs), "--base-url", emulator.url,
            "--concurrency", str(CONCURRENCY)]  # fmt: skip


@dataclass
class Measured:
    who: str
    seconds: float  # spawn to exit
    peak_mb: float
    cpu: float  # CPU seconds, all threads
    start_mb: float  # resident before relaybatch is used (the API cell: pandas and its rows loaded)
    own_seconds: float = 0.0  # the notebook's own part (pandas, the rows), before relaybatch
    own_cpu: float = 0.0


def api_against_cli(items: int, rounds: int, root: Path) -> None:
    work = write_work(items, root)
    scenario = Scenario("open", items, rpm=0, latency=0.0, injected_429_rate=0.0)
    measured: list[Measured] = []
    with ServedEmulator(emulator_config(scenario, root)) as emulator:
        idle = timed([str(PROJECT_PYTHON), "-c", IDLE], root / "idle.log")[1]
        for number in range(rounds):
            for who in ("cli", "api"):  # alternated: the machine's load drifts alike for both
                runs = root / f"runs-{who}-{number}"
                if who == "cli":
                    command = cli_command(work, runs, emulator)
                else:
                    command = [str(PROJECT_PYTHON), "-c", CELL, str(work), str(runs), emulator.url]
                seconds, peak, cpu, code, text = timed(command, root / f"{who}-{number}.log")
                if code != 0:
                    raise SystemExit(f"{who} exited {code}:\n{text[-2000:]}")
                one = Measured(who, seconds, peak, cpu, idle)
                detail = ""
                if who == "api":
                    detail = text.strip().splitlines()[-1]
                    figures = detail.split("cell before-run ")[1].split(";")[0].split()
                    one.start_mb, one.own_seconds, one.own_cpu = (
                        float(figures[0]),
                        float(figures[2]),
                        float(figures[4]),
                    )
                measured.append(one)
                print(
                    f"round {number + 1} {who}: {seconds:.2f} s, {cpu:.2f} s CPU, peak {peak:.0f} MB "
                    f"(start {one.start_mb:.0f} MB) {detail}",
                    flush=True,
                )
    print()
    print(f"### API against CLI, {items:,} chat items, zero latency ({rounds} rounds, medians)")
    print()
    print("| process | wall s | CPU s | peak MB | relaybatch's part: wall s | CPU s | MB above the start |")
    print("|---|---|---|---|---|---|---|")
    medians: dict[str, list[float]] = {}
    for who in ("cli", "api"):
        mine = [one for one in measured if one.who == who]
        values = [
            statistics.median(getattr(one, name) for one in mine) for name in ("seconds", "cpu", "peak_mb")
        ] + [
            statistics.median(one.seconds - one.own_seconds for one in mine),
            statistics.median(one.cpu - one.own_cpu for one in mine),
            statistics.median(one.peak_mb - one.start_mb for one in mine),
        ]
        medians[who] = values
        label = "`relaybatch run`" if who == "cli" else "API cell (`Run.from_table`, `run()`, `results()`)"
        print(f"| {label} | " + " | ".join(f"{value:.1f}" for value in values) + " |")
    cli, api = medians["cli"], medians["api"]
    print()
    print(
        "API / CLI, relaybatch's part (the notebook's pandas and rows left out): "
        f"wall {api[3] / cli[3]:.2f}, CPU {api[4] / cli[4]:.2f}, memory above the start "
        f"{api[5] / cli[5]:.2f} (target <= {TARGET_RATIO}); "
        f"whole processes: wall {api[0] / cli[0]:.2f}, CPU {api[1] / cli[1]:.2f}, peak {api[2] / cli[2]:.2f}"
    )


def export_beside(items: int, rounds: int, root: Path) -> None:
    work = write_work(items, root)
    scenario = Scenario("open", items, rpm=0, latency=0.0, injected_429_rate=0.0)
    relaybatch = PROJECT_PYTHON.with_name("relaybatch")
    figures: dict[bool, list[tuple[float, float]]] = {False: [], True: []}  # (items/s, items per CPU s)
    with ServedEmulator(emulator_config(scenario, root)) as emulator:
        for number in range(rounds):
            for with_export in (False, True):
                runs = root / f"runs-{number}-{int(with_export)}"
                exported: list[str] = []
                if with_export:
                    target = answered(emulator) + items // 2
                    threading.Thread(
                        target=_export_when,
                        args=(emulator, target, relaybatch, runs, work.stem, exported),
                        daemon=True,
                    ).start()
                log = root / f"run-{number}-{int(with_export)}.log"
                seconds, _, cpu, code, text = timed(cli_command(work, runs, emulator), log)
                if code != 0:
                    raise SystemExit(f"run exited {code}:\n{text[-2000:]}")
                figures[with_export].append((items / seconds, items / cpu))
                note = f"; export: {exported[0]}" if exported else ""
                print(
                    f"round {number + 1} {'with export' if with_export else 'alone'}: {seconds:.2f} s, "
                    f"{items / seconds:,.0f} items/s, {cpu:.2f} s CPU "
                    f"({items / cpu:,.0f} items per CPU s){note}",
                    flush=True,
                )
    print()
    print(f"### Export beside a {items:,}-item run ({rounds} rounds, alternated)")
    print()
    print("| run | items/s median (min-max) | items per CPU second of the run's process, median (min-max) |")
    print("|---|---|---|")
    for with_export, label in ((False, "alone"), (True, "with `relaybatch export` at half way")):
        rates = [rate for rate, _ in figures[with_export]]
        per_cpu = [value for _, value in figures[with_export]]
        print(
            f"| {label} | {statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f}) | "
            f"{statistics.median(per_cpu):,.0f} ({min(per_cpu):,.0f}-{max(per_cpu):,.0f}) |"
        )
    alone = [rate for rate, _ in figures[False]]
    spread = (max(alone) - min(alone)) / statistics.median(alone)
    wall = statistics.median(rate for rate, _ in figures[True]) / statistics.median(alone)
    cpu_ratio = statistics.median(value for _, value in figures[True]) / statistics.median(
        value for _, value in figures[False]
    )
    print()
    print(
        f"with / alone: items/s {wall:.2f} (the runs alone spread {spread:.0%} among themselves: the "
        f"machine's noise), items per CPU second {cpu_ratio:.2f}"
    )


def _export_when(
    emulator: ServedEmulator, target: int, relaybatch: Path, runs: Path, name: str, exported: list[str]
) -> None:
    """`relaybatch export` of the run once the emulator has answered ``target`` requests."""
    while answered(emulator) < target:
        time.sleep(0.05)
    started = time.monotonic()
    done = subprocess.run(
        [str(relaybatch), "export", name, "--runs-dir", str(runs)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = next((line for line in done.stdout.splitlines() if "snapshot" in line), done.stdout.strip()[:200])
    exported.append(f"{line} ({time.monotonic() - started:.2f} s, exit {done.returncode})")


def reuse_run(items: int, root: Path) -> None:
    """A run of the rows, then a second run of the same requests with ``reuse:`` naming the first:
    requests sent (the emulator's count), its ledger's USD, and its seconds."""
    work = write_work(items, root)
    second = root / "again.yaml"
    second.write_text(
        f"run: {{name: again, reuse: [{work.stem}], concurrency: {CONCURRENCY}}}\n"
        f"jobs:\n  - {{name: {work.stem}, kind: chat, model: {MODEL}, prompt: '{{prompt}}', id: '{{id}}', "
        f"request: {{max_tokens: {MAX_TOKENS}}}, data: {work.name}}}\n"
    )
    scenario = Scenario("open", items, rpm=0, latency=0.0, injected_429_rate=0.0)
    runs = root / "runs"
    relaybatch = PROJECT_PYTHON.with_name("relaybatch")
    with ServedEmulator(emulator_config(scenario, root)) as emulator:
        first = timed(cli_command(work, runs, emulator), root / "first.log")
        before, billed_before = answered(emulator), len(emulator.admin("/_emulator/ledger")["charges"])
        command = [str(relaybatch), "run", str(second), "--runs-dir", str(runs), "--base-url", emulator.url]
        again = timed(command, root / "again.log")
        sent = answered(emulator) - before  # the free model catalog read included
        billed = len(emulator.admin("/_emulator/ledger")["charges"]) - billed_before
    import pyarrow.parquet as pq

    ledger = pq.read_table(runs / "again" / "ledger.parquet", columns=["usd", "outcome"]).to_pylist()
    results = pq.read_table(runs / "again" / "results" / f"{work.stem}.parquet", columns=["reused_from"])
    reused = results.column("reused_from").null_count == 0
    print()
    print(f"### A second run of the same {items:,} requests with `reuse:` naming the first")
    print()
    print(
        f"first run {first[0]:.1f} s; the reusing run: exit {again[3]}, {billed} billed requests on the "
        f"emulator's ledger ({sent} answered in all: the free model catalog read), its ledger "
        f"{len(ledger):,} rows, {sum(row['usd'] for row in ledger):.2f} USD, outcomes "
        f"{sorted({row['outcome'] for row in ledger})}, every result says where it came from: {reused}; "
        f"{again[0]:.1f} s, {again[2]:.1f} s CPU, peak {again[1]:.0f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--part", choices=("api", "export", "reuse", "both"), default="both")
    arguments = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="relaybatch-notebook-api-") as scratch:
        if arguments.part in ("api", "both"):
            folder = Path(scratch) / "api"
            folder.mkdir()
            api_against_cli(arguments.items, arguments.rounds, folder)
        if arguments.part in ("export", "both"):
            folder = Path(scratch) / "export"
            folder.mkdir()
            export_beside(arguments.items, arguments.rounds, folder)
        if arguments.part in ("reuse", "both"):
            folder = Path(scratch) / "reuse"
            folder.mkdir()
            reuse_run(arguments.items, folder)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

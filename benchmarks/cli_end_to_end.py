"""`relaybatch run` as a user's clock sees it: one process, from spawn to exit, against a served emulator.

For each size, a zero-latency chat manifest (a JSONL table) runs through the command exactly as
a user types it, start-up, validation, checkpoint, execution, results, ledger and report included:

- end to end: wall seconds and items/s (target >= 2,000 items/s at 20,000 items), and the
  process's CPU seconds (user + system: what a loaded machine stretches less than the wall clock);
- memory: the process's peak resident set from ``wait4`` (target <= 250 MB at 20,000 items, and
  at 1,000,000 within 1.1x of the 20,000 figure);
- disk: bytes per item of every file the run leaves (checkpoint, cost store, results, ledger);
- a no-op re-run of the finished run (target <= 3 s);
- a resume of the run after 1 % new rows are appended to its manifest: seconds from spawn to the
  first call the emulator sees (its first POST; the catalog read before it is shown too; target
  <= 3 s), and the whole process;
- a resume of a run interrupted at 99 % (a second new run of the same manifest, stopped with
  SIGINT once 99 % of its requests were answered), manifest unchanged: seconds to the first new
  call (target 4 of issue 19: <= 3 s) and the whole process (``--skip-interrupted`` leaves
  it out: it costs a second full run);
- after the resume, one row in the middle of the manifest edited: the manifest did not only grow,
  so it is validated and planned whole again; the process's peak must stay that of the run.

The emulator is ``benchmarks/peers/emulator_server.py`` in its own process (it notes the moment of
the first public request on the machine's monotonic clock, which this process shares).

    .venv/bin/python benchmarks/cli_end_to_end.py                       # 20,000 items
    .venv/bin/python benchmarks/cli_end_to_end.py --items 20000,1000000 # the memory ratio too
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

from bench import (
    BENCH_KEY,
    CONCURRENCY,
    PROJECT_PYTHON,
    Scenario,
    ServedEmulator,
    emulator_config,
    wait_with_usage,
    write_work,
)
from disk_per_item import file_bytes as disk_use
from disk_per_item import report as disk_report

TARGET_ITEMS_PER_SECOND = 2_000
TARGET_PEAK_MB = 250
TARGET_MEMORY_GROWTH = 1.1
TARGET_START_SECONDS = 3.0
RESUME_SHARE = 0.01
INTERRUPT_AT = 0.99  # share of answered requests at which the interrupted run gets SIGINT


@dataclass
class Process:
    seconds: float
    peak_mb: float
    exit_code: int
    first_request_seconds: float | None = None  # any request (the catalog read comes first)
    first_billed_seconds: float | None = None  # the first POST: an item's call
    stop_seconds: float | None = None  # from the SIGINT (a user's Ctrl-C) to the process's exit
    # User + system CPU of the process: what a loaded machine stretches less than the wall clock.
    cpu_seconds: float = 0.0


@dataclass
class Size:
    items: int
    run: Process | None = None
    rerun: Process | None = None
    resume: Process | None = None
    interrupted: Process | None = None  # the run stopped at 99 %
    interrupted_resume: Process | None = None
    edited: Process | None = None  # the run after a row in the middle was edited: planned whole
    completed: int = 0
    disk: Counter[str] = field(default_factory=Counter)
    tables: str = ""


def relaybatch_run(
    work: Path, runs_dir: Path, emulator: ServedEmulator, log: Path, stop_after: int | None = None
) -> Process:
    """One ``relaybatch run`` process, timed from spawn to exit, with the first request it caused;
    with ``stop_after``, SIGINT once the emulator has answered that many more requests."""
    relaybatch = PROJECT_PYTHON.with_name("relaybatch")
    command = [str(relaybatch), "run", str(work), "--runs-dir", str(runs_dir), "--base-url", emulator.url]
    if (
        "--concurrency"
        in subprocess.run([str(relaybatch), "run", "--help"], capture_output=True, text=True).stdout
    ):
        command += ["--concurrency", str(CONCURRENCY)]
    httpx.post(f"{emulator.url}/_bench/first", timeout=30)
    environment = {**os.environ, "RELAYBATCH_API_KEY": BENCH_KEY}
    answered_before = answered(emulator)
    with log.open("a") as output:
        spawned = time.monotonic()
        process = subprocess.Popen(command, stdout=output, stderr=output, env=environment)
        signalled: list[float] = []  # when the SIGINT was sent
        if stop_after is not None:
            threading.Thread(
                target=interrupt_after,
                args=(process, emulator, answered_before + stop_after, signalled),
                daemon=True,
            ).start()
        peak_kb, cpu_seconds, _ = wait_with_usage(process, timeout=3600)
        ended = time.monotonic()
        seconds = ended - spawned
    firsts = httpx.get(f"{emulator.url}/_bench/first", timeout=30).json()
    first, billed = firsts["monotonic"], firsts.get("post")
    return Process(
        seconds=seconds,
        peak_mb=peak_kb / 1024,
        cpu_seconds=cpu_seconds,
        exit_code=process.returncode,
        first_request_seconds=None if first is None else first - spawned,
        first_billed_seconds=None if billed is None else billed - spawned,
        stop_seconds=ended - signalled[0] if signalled else None,
    )


def answered(emulator: ServedEmulator) -> int:
    """Requests the emulator has answered 200 so far."""
    return int(httpx.get(f"{emulator.url}/_bench/statuses", timeout=30).json().get("200", 0))


def interrupt_after(
    process: subprocess.Popen[bytes], emulator: ServedEmulator, count: int, signalled: list[float]
) -> None:
    """SIGINT the run once the emulator has answered ``count`` requests (a user's Ctrl-C); the
    moment it was sent goes into ``signalled``."""
    while process.poll() is None:
        if answered(emulator) >= count:
            signalled.append(time.monotonic())
            process.send_signal(signal.SIGINT)
            return
        time.sleep(0.05)


def done_rows(runs_dir: Path) -> int:
    """Rows of the results Parquet files whose state is done."""
    done = 0
    for path in runs_dir.rglob("results/*.parquet"):
        states = pq.read_table(path, columns=["state"]).column("state").to_pylist()
        done += sum(1 for state in states if state == "done")
    return done


def append_rows(work: Path, items: int, extra: int) -> None:
    """Append ``extra`` new rows to the work file, as a user adding to a manifest would."""
    lines = work.read_text(encoding="utf-8").splitlines()[:extra]
    with work.open("a", encoding="utf-8") as handle:
        for number, line in enumerate(lines):
            handle.write(line.replace(f'"r{number}"', f'"new{number}"').replace("row ", "new row ") + "\n")


def edit_middle_row(work: Path, items: int) -> None:
    """Change the prompt of the row in the middle of the manifest, as a user fixing a typo would."""
    lines = work.read_text(encoding="utf-8").splitlines(keepends=True)
    middle = items // 2
    lines[middle] = lines[middle].replace("say something short", "say something else")
    work.write_text("".join(lines), encoding="utf-8")


def measure(items: int, root: Path, interrupted: bool = True) -> Size:
    size = Size(items)
    folder = root / f"size-{items}"
    folder.mkdir()
    work = write_work(items, folder)
    runs_dir, log = folder / "runs", folder / "relaybatch.log"
    scenario = Scenario("open", items, rpm=0, latency=0.0, injected_429_rate=0.0)
    with ServedEmulator(emulator_config(scenario, folder)) as emulator:
        size.run = relaybatch_run(work, runs_dir, emulator, log)
        size.completed = done_rows(runs_dir)
        size.disk = disk_use(runs_dir)
        size.tables = disk_report(runs_dir, items)
        size.rerun = relaybatch_run(work, runs_dir, emulator, log)
        if interrupted:
            # The same manifest again, as a new run in its own folder, stopped by SIGINT at 99 %
            # and resumed unchanged (before the append below changes the manifest).
            other_runs = folder / "runs-interrupted"
            stop_after = int(items * INTERRUPT_AT)
            size.interrupted = relaybatch_run(work, other_runs, emulator, log, stop_after=stop_after)
            size.interrupted_resume = relaybatch_run(work, other_runs, emulator, log)
        append_rows(work, items, max(1, int(items * RESUME_SHARE)))
        size.resume = relaybatch_run(work, runs_dir, emulator, log)
        edit_middle_row(work, items)
        size.edited = relaybatch_run(work, runs_dir, emulator, log)
    for process in (size.run, size.rerun, size.resume, size.interrupted_resume, size.edited):
        if process is not None and process.exit_code != 0:
            print(f"warning: a run of {items} items exited {process.exit_code}; see {log}", flush=True)
    return size


def report(sizes: list[Size]) -> None:
    columns = ("items", "wall s", "items/s", "ratio to 2,000", "CPU s", "items per CPU s", "peak MB")
    print("| " + " | ".join((*columns, "ratio to 250 MB", "disk B/item")) + " |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size in sizes:
        assert size.run is not None
        rate = size.completed / size.run.seconds
        per_item = sum(size.disk.values()) / size.items
        print(
            f"| {size.items:,} | {size.run.seconds:.1f} | {rate:,.0f} | "
            f"{rate / TARGET_ITEMS_PER_SECOND:.2f} | {size.run.cpu_seconds:.1f} | "
            f"{size.completed / max(size.run.cpu_seconds, 1e-9):,.0f} | {size.run.peak_mb:.0f} | "
            f"{size.run.peak_mb / TARGET_PEAK_MB:.2f} | {per_item:,.0f} |"
        )
    print()
    for size in sizes:
        assert size.run and size.rerun and size.resume
        parts = ", ".join(f"{name} {use / size.items:,.0f}" for name, use in size.disk.most_common())
        print(f"{size.items:,} items: completed {size.completed:,}; disk per item by file: {parts}")
        print(size.tables)
        start = size.run.first_request_seconds or 0.0
        print(
            f"  first request of the new run after {start:.2f} s "
            f"(ratio to {TARGET_START_SECONDS:.0f} s: {start / TARGET_START_SECONDS:.2f})"
        )
        print(
            f"  no-op re-run: {size.rerun.seconds:.2f} s, peak {size.rerun.peak_mb:.0f} MB "
            f"(ratio to {TARGET_START_SECONDS:.0f} s: {size.rerun.seconds / TARGET_START_SECONDS:.2f})"
        )
        first = size.resume.first_billed_seconds
        print(
            f"  resume with {RESUME_SHARE:.0%} new rows: first call after "
            f"{'none' if first is None else f'{first:.2f} s'} "
            f"(ratio to {TARGET_START_SECONDS:.0f} s: {(first or 0) / TARGET_START_SECONDS:.2f}; "
            f"first request of any kind {_seconds(size.resume.first_request_seconds)}), "
            f"process {size.resume.seconds:.1f} s, peak {size.resume.peak_mb:.0f} MB"
        )
        if size.interrupted and size.interrupted_resume:
            resumed = size.interrupted_resume
            first = resumed.first_billed_seconds
            print(
                f"  resume of a run interrupted at {INTERRUPT_AT:.0%} (exit {size.interrupted.exit_code} "
                f"after {size.interrupted.seconds:.1f} s, "
                f"{_seconds(size.interrupted.stop_seconds)} after the SIGINT), manifest unchanged: "
                "first call after "
                f"{'none' if first is None else f'{first:.2f} s'} "
                f"(ratio to {TARGET_START_SECONDS:.0f} s: {(first or 0) / TARGET_START_SECONDS:.2f}; "
                f"first request of any kind {_seconds(resumed.first_request_seconds)}), "
                f"process {resumed.seconds:.1f} s, peak {resumed.peak_mb:.0f} MB"
            )
        if size.edited:
            print(
                f"  a row in the middle edited (planned whole again): process {size.edited.seconds:.1f} s, "
                f"peak {size.edited.peak_mb:.0f} MB"
            )
    if len(sizes) > 1:
        smallest, largest = sizes[0], sizes[-1]
        assert smallest.run and largest.run
        growth = largest.run.peak_mb / smallest.run.peak_mb
        print(
            f"\npeak memory at {largest.items:,} items / at {smallest.items:,}: {growth:.2f}x "
            f"(target <= {TARGET_MEMORY_GROWTH}x; ratio {growth / TARGET_MEMORY_GROWTH:.2f})"
        )
        if largest.edited:
            growth = largest.edited.peak_mb / smallest.run.peak_mb
            print(
                f"peak of the whole re-plan at {largest.items:,} items / new run at {smallest.items:,}: "
                f"{growth:.2f}x"
            )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


def _seconds(value: float | None) -> str:
    return "none" if value is None else f"{value:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", default="20000", help="Comma-separated manifest sizes, smallest first")
    parser.add_argument(
        "--skip-interrupted",
        action="store_true",
        help="Leave out the run interrupted at 99 %% and its resume",
    )
    parser.add_argument("--keep", type=Path, help="Leave the runs in this new folder (to inspect the stores)")
    args = parser.parse_args()
    sizes = [int(value) for value in args.items.split(",")]
    if args.keep:
        args.keep.mkdir(parents=True)
        report([measure(items, args.keep, not args.skip_interrupted) for items in sizes])
        return
    with tempfile.TemporaryDirectory(prefix="relaybatch-e2e-") as folder:
        report([measure(items, Path(folder), not args.skip_interrupted) for items in sizes])


if __name__ == "__main__":
    main()

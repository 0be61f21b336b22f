"""Where `relaybatch run`'s CPU and memory go, phase by phase, in one real process.

The command runs as a user types it (``relaybatch run work.jsonl --runs-dir ... --base-url ...``)
against a served emulator (benchmarks/peers/emulator_server.py), three times: a new run, a no-op
re-run of the finished run, and a resume after 1 % new rows. The child process wraps the run
layer's steps before they are imported (nothing is imported early, so start-up is measured as a
user pays it) and charges the process's CPU time (``time.process_time``) to the innermost step
running; time spent importing modules is charged to "imports" whichever step caused it.

Phases: start-up (interpreter, CLI, settings; up to the manifest's opening), load+validate
(opening and validating the manifest, the catalog check), checkpoint insert (items into the
store, including the manifest's second read that builds them), execution (the engine: feeder,
workers, checkpoint and ledger commits; opening the run: prices, client), ledger (the ledger
Parquet), export (the results Parquet), other (between steps, what the CLI prints, exit).
For each: CPU microseconds per item, and memory: the process's peak resident set when the phase
ended (``ru_maxrss``), the highest resident set sampled while the phase was the innermost one
running (a thread reads /proc/self/statm every 10 ms), the resident set and the bytes Arrow's
memory pool held when it ended, SQLite's own high-water mark while it ran (page caches, sorters,
statements: ``sqlite3_memory_highwater``); with ``--tracemalloc``, also the peak of Python's own allocations
while it ran (tracemalloc slows the run two- to threefold; its CPU figures are then not comparable).

A fourth run, ``--runs edit``, changes one row in the middle of the manifest after the resume: the
manifest no longer only grew, so the whole manifest is planned again (its memory must stay flat too).

    .venv/bin/python benchmarks/cli_phases.py                  # 20,000 items
    .venv/bin/python benchmarks/cli_phases.py --items 200000 --runs new,edit
    .venv/bin/python benchmarks/cli_phases.py --profile /tmp/phases   # cProfile files too, per run
    .venv/bin/python benchmarks/cli_phases.py --items 100000 --runs new --growth /tmp/growth
        # what each phase left allocated in Python, by source line (tracemalloc; slow)
    .venv/bin/python benchmarks/cli_phases.py --items 300000 --runs new --trim
        # and the resident set at each phase's end once the C heap's free pages went back
    .venv/bin/python benchmarks/cli_phases.py --items 300000 --runs new --maps
        # and where the resident set lives at each phase's end (main heap, threads' heaps, ...)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc  # imported here: an import inside the clock would re-enter it
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
GROWTH_LINES = 25  # lines of source per phase in a --growth file
PHASES = [
    "start-up",
    "imports",
    "load+validate",
    "checkpoint insert",
    "open run",
    "execution",
    "ledger",
    "export",
    "other",
]
# (module, attribute path, phase): wrapped when the module is first imported by the run itself.
WRAPPED = [
    ("relaybatch.manifests.manifest", "Manifest.validate", "load+validate"),
    ("relaybatch.manifests", "open_manifest", "load+validate"),
    ("relaybatch.run.assemble", "open_manifest", "load+validate"),
    ("relaybatch.cli._app", "catalog_check", "load+validate"),
    ("relaybatch.engine.store.planning", "Planning.plan_items", "checkpoint insert"),
    ("relaybatch.run.execution", "execute_run", "open run"),
    ("relaybatch.engine.runner", "execute", "execution"),
    ("relaybatch.costs.guard", "RunSpendGuard.write_ledger", "ledger"),
    ("relaybatch.run.execution", "export_run_results", "export"),
]


# -- the child: one relaybatch run with its phases timed ------------------------------------


class Clock:
    """CPU seconds charged to the innermost running phase; memory noted as each phase ends."""

    def __init__(self) -> None:
        self.cpu = dict.fromkeys(PHASES, 0.0)
        self.peak_kb: dict[str, int] = {}
        self.sampled_kb: dict[str, int] = {}  # highest RSS sampled while the phase was innermost
        self.end_kb: dict[str, int] = {}  # RSS when the phase last ended
        self.arrow_kb: dict[str, int] = {}  # bytes Arrow's pool held when the phase last ended
        self.python_kb: dict[str, int] = {}  # tracemalloc's peak while the phase was innermost
        self.sqlite_kb: dict[str, int] = {}  # SQLite's own high-water mark while the phase was innermost
        self.sqlite = _sqlite_counters()
        self.stack = ["start-up"]
        self.mark = time.process_time()
        # --growth: what each phase left allocated, from tracemalloc snapshots at its ends
        self.growth = os.environ.get("RELAYBATCH_PHASES_GROWTH")
        self.snapshots: list[tracemalloc.Snapshot] = []
        self.trimmed_kb: dict[str, int] = {}  # RSS when the phase last ended, after malloc_trim(0)
        self.trim = _malloc_trim() if os.environ.get("RELAYBATCH_PHASES_TRIM") else None
        # --maps: the resident set at each phase's end by kind of mapping (/proc/self/smaps)
        self.maps = os.environ.get("RELAYBATCH_PHASES_MAPS") is not None
        self.maps_kb: dict[str, dict[str, int]] = {}

    def switch(self, phase: str | None) -> None:
        now = time.process_time()
        current = self.stack[-1]
        self.cpu[current] += now - self.mark
        self.mark = now
        self._python_peak(current)
        if self.sqlite is not None:  # what SQLite allocated (page caches, sorters, statements)
            highwater = self.sqlite(1) // 1024  # and reset: the next phase starts from what is used
            self.sqlite_kb[current] = max(self.sqlite_kb.get(current, 0), highwater)
        if phase is None:
            ended = self.stack.pop()
            self.peak_kb[ended] = max(self.peak_kb.get(ended, 0), _peak_kb())
            self.end_kb[ended] = _rss_kb()
            if self.trim is not None:  # --trim: what is live, once the C heap's free pages go back
                self.trim(0)
                self.trimmed_kb[ended] = _rss_kb()
            if self.maps:
                self.maps_kb[ended] = _resident_by_mapping()
            arrow = sys.modules.get("pyarrow")
            if arrow is not None:
                self.arrow_kb[ended] = arrow.total_allocated_bytes() // 1024
        else:
            self.stack.append(phase)

    def _python_peak(self, phase: str) -> None:
        if tracemalloc.is_tracing():
            peak = tracemalloc.get_traced_memory()[1] // 1024
            self.python_kb[phase] = max(self.python_kb.get(phase, 0), peak)
            tracemalloc.reset_peak()

    def sample(self) -> None:
        """Note the resident set against the phase running now (from a thread, every 10 ms)."""
        phase = self.stack[-1]
        self.sampled_kb[phase] = max(self.sampled_kb.get(phase, 0), _rss_kb())

    def enter(self, phase: str) -> None:
        if phase != "imports" and self.stack == ["start-up"]:
            self.stack = ["other"]  # the first step began: start-up is over
        self.switch(phase)
        if self.growth is not None and phase != "imports":
            self.snapshots.append(tracemalloc.take_snapshot())

    def leave(self) -> None:
        phase = self.stack[-1]
        self.switch(None)
        if self.growth is not None and phase != "imports":
            self._write_growth(phase, self.snapshots.pop())

    def _write_growth(self, phase: str, before: tracemalloc.Snapshot) -> None:
        """What Python still holds at the phase's end that it did not at its start, by line."""
        ignored = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__)]
        after = tracemalloc.take_snapshot().filter_traces(ignored)
        differences = after.compare_to(before.filter_traces(ignored), "lineno")
        grown = sum(difference.size_diff for difference in differences) / 1e6
        lines = [f"== {phase}: Python's allocations grew {grown:+.1f} MB; the largest lines:"]
        lines += [str(difference) for difference in differences[:GROWTH_LINES]]
        with open(self.growth, "a") as out:
            out.write("\n".join(lines) + "\n\n")


def _peak_kb() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _sqlite_counters() -> Any:
    """``sqlite3_memory_highwater`` of the SQLite library Python's sqlite3 module uses, or None."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("sqlite3")
    try:
        highwater = ctypes.CDLL(name or "libsqlite3.so.0").sqlite3_memory_highwater
    except (OSError, AttributeError):
        return None  # sqlite3 built into Python's module: no figure
    highwater.restype, highwater.argtypes = ctypes.c_int64, [ctypes.c_int]
    return highwater


MAPPINGS = ("main heap", "thread heaps", "other anonymous", "files", "Python arenas", "Python objects")


def _resident_by_mapping() -> dict[str, int]:
    """Resident KiB by kind of mapping: the main thread's C heap (``[heap]``), other threads' C
    heaps (glibc maps 64 MiB per thread arena), other anonymous memory (Python's object arenas,
    large blocks the C library or Arrow mapped on their own, thread stacks) and files (code)."""
    totals = dict.fromkeys(MAPPINGS, 0)
    kind = "files"
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            first = line.split(maxsplit=1)[0]
            if "-" in first and not first.endswith(":"):  # a header: range perms offset dev inode [path]
                fields = line.split()
                start, end = (int(bound, 16) for bound in fields[0].split("-"))
                path = fields[5] if len(fields) > 5 else ""
                if path == "[heap]":
                    kind = "main heap"
                elif path.startswith("/"):
                    kind = "files"
                elif end - start == 64 << 20 or (start % (64 << 20) == 0 and end - start < 64 << 20):
                    kind = "thread heaps"  # a thread arena's heap: 64 MiB reserved, aligned to it
                else:
                    kind = "other anonymous"
            elif first == "Rss:":
                totals[kind] += int(line.split()[1])
    return {**totals, **_pymalloc_kb()}


def _pymalloc_kb() -> dict[str, int]:
    """Python's small-object allocator: the arenas it holds (1 MiB each, part of "other anonymous";
    an arena goes back only when all of it is free) and the bytes of the objects live in them."""
    import re

    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+") as out:
        os.dup2(out.fileno(), 2)  # sys._debugmallocstats writes to the C library's stderr
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read()

    def figure(label: str) -> int:
        found = re.search(rf"# {label}\s*=\s*([\d,]+)", text)
        return int(found.group(1).replace(",", "")) if found else 0

    return {
        "Python arenas": figure("arenas allocated current") * 1024,
        "Python objects": figure("bytes in allocated blocks") // 1024,
    }


def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``: free pages of the C heap go back to the system."""
    import ctypes

    trim = ctypes.CDLL(None).malloc_trim
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def _rss_kb() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def _start_sampler(clock: Clock) -> None:
    import threading

    def sample() -> None:
        while True:
            clock.sample()
            time.sleep(0.01)

    threading.Thread(target=sample, daemon=True, name="rss-sampler").start()


def _wrap(clock: Clock, function: object, phase: str) -> object:
    import functools
    import inspect

    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)  # type: ignore[arg-type]
        async def timed_async(*args: object, **kwargs: object) -> object:
            clock.enter(phase)
            try:
                return await function(*args, **kwargs)  # type: ignore[operator]
            finally:
                clock.leave()

        return timed_async

    @functools.wraps(function)  # type: ignore[arg-type]
    def timed(*args: object, **kwargs: object) -> object:
        clock.enter(phase)
        try:
            return function(*args, **kwargs)  # type: ignore[operator]
        finally:
            clock.leave()

    return timed


def _override_constants(assignments: str) -> None:
    """``module.NAME=integer,...``: a trial of another value (imports the module early)."""
    import importlib

    for assignment in filter(None, assignments.split(",")):
        target, _, value = assignment.partition("=")
        module, _, name = target.rpartition(".")
        setattr(importlib.import_module(module), name, int(value))


def child(result_path: Path, arguments: list[str]) -> None:
    import importlib._bootstrap as bootstrap

    clock = Clock()
    if clock.growth is not None:
        clock.growth = f"{clock.growth}.{result_path.stem}"
    pending = {}
    for module, attribute, phase in WRAPPED:
        pending.setdefault(module, []).append((attribute, phase))
    original = bootstrap._find_and_load  # type: ignore[attr-defined]
    depth = [0]

    def find_and_load(name: str, import_: object) -> object:
        if depth[0] == 0:
            clock.enter("imports")
        depth[0] += 1
        try:
            module = original(name, import_)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                clock.leave()
        for attribute, phase in pending.pop(name, []):
            owner_name, _, leaf = attribute.rpartition(".")
            owner = getattr(module, owner_name) if owner_name else module
            setattr(owner, leaf, _wrap(clock, getattr(owner, leaf), phase))
        return module

    bootstrap._find_and_load = find_and_load  # type: ignore[attr-defined]
    if os.environ.get("RELAYBATCH_PHASES_TRACEMALLOC") or os.environ.get("RELAYBATCH_PHASES_GROWTH"):
        tracemalloc.start()
    _override_constants(os.environ.get("RELAYBATCH_PHASES_SET", ""))
    _start_sampler(clock)
    code = 0
    try:
        from relaybatch.cli import app

        profile_path = os.environ.get("RELAYBATCH_PHASES_PROFILE")
        if profile_path:  # cProfile on the CPU clock, for a look at what a phase spends
            import cProfile

            profiler = cProfile.Profile(time.process_time)
            try:
                profiler.runcall(app, arguments, prog_name="relaybatch")
            finally:
                profiler.dump_stats(f"{profile_path}.{result_path.stem}")
        else:
            app(arguments, prog_name="relaybatch")
    except SystemExit as exit_:
        code = int(exit_.code or 0) if not isinstance(exit_.code, str) else 1
    finally:
        clock.switch("other")
        clock.switch(None)
        figures = {
            "cpu": clock.cpu,
            "peak_kb": clock.peak_kb,
            "sampled_kb": clock.sampled_kb,
            "end_kb": clock.end_kb,
            "arrow_kb": clock.arrow_kb,
            "python_kb": clock.python_kb,
            "sqlite_kb": clock.sqlite_kb,
            "trimmed_kb": clock.trimmed_kb,
            "maps_kb": clock.maps_kb,
            "exit": code,
        }
        result_path.write_text(json.dumps(figures))


# -- the parent: emulator, manifest, three runs, the table ----------------------------------


RUNS = {
    "new": "new run",
    "noop": "no-op re-run",
    "resume": "resume, 1% new",
    "edit": "edit, row in the middle",
}


def measure(items: int, folder: Path, runs: list[str]) -> list[tuple[str, dict[str, object], float, int]]:
    sys.path.insert(0, str(HERE / "peers"))
    from bench import (
        BENCH_KEY,
        CONCURRENCY,
        PROJECT_PYTHON,
        Scenario,
        ServedEmulator,
        emulator_config,
        write_work,
    )
    from cli_end_to_end import RESUME_SHARE, append_rows, edit_middle_row

    work = write_work(items, folder)
    runs_dir = folder / "runs"
    scenario = Scenario("open", items, rpm=0, latency=0.0, injected_429_rate=0.0)
    measured = []
    with ServedEmulator(emulator_config(scenario, folder)) as emulator:
        for run in ["new", *[run for run in runs if run != "new"]]:
            name = RUNS[run]
            if run == "resume":
                append_rows(work, items, max(1, int(items * RESUME_SHARE)))
            if run == "edit":
                edit_middle_row(work, items)
            result = folder / f"{run}.json"
            arguments = ["run", str(work), "--runs-dir", str(runs_dir), "--base-url", emulator.url]
            arguments += ["--concurrency", str(CONCURRENCY)]  # as benchmarks/cli_end_to_end.py runs it
            command = [str(PROJECT_PYTHON), str(Path(__file__)), "--child", str(result), "--", *arguments]
            environment = {**os.environ, "RELAYBATCH_API_KEY": BENCH_KEY}
            started = time.monotonic()
            with (folder / "relaybatch.log").open("a") as log:
                finished = subprocess.run(command, stdout=log, stderr=log, env=environment, check=False)
            wall = time.monotonic() - started
            if finished.returncode != 0:
                print(f"warning: {name} exited {finished.returncode}; see {folder / 'relaybatch.log'}")
            measured.append((name, json.loads(result.read_text()), wall, items))
    return measured


def report(measured: list[tuple[str, dict[str, object], float, int]]) -> None:
    for name, figures, wall, items in measured:
        cpu: dict[str, float] = figures["cpu"]  # type: ignore[assignment]
        peaks: dict[str, int] = figures["peak_kb"]  # type: ignore[assignment]
        total = sum(cpu.values())
        print(f"\n{name}: {items:,} items, wall {wall:.1f} s, CPU {total:.1f} s, exit {figures['exit']}")
        names = ("peak_kb", "sampled_kb", "end_kb", "trimmed_kb", "arrow_kb", "sqlite_kb", "python_kb")
        memory = [figures.get(name, {}) for name in names]
        print(
            "| phase | CPU s | CPU us/item | share | peak RSS at its end, MB | highest RSS sampled in it, MB "
            "| RSS at its end, MB | the same after malloc_trim (--trim), MB | Arrow pool at its end, MB "
            "| SQLite peak in it, MB | Python peak in it (tracemalloc), MB |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for phase in PHASES:
            seconds = cpu.get(phase, 0.0)
            cells = [_mb(figure.get(phase)) for figure in memory]  # type: ignore[attr-defined]
            print(
                f"| {phase} | {seconds:.2f} | {seconds / items * 1e6:,.0f} | {seconds / total:.0%} | "
                + " | ".join(cells)
                + " |"
            )
        peak_mb = max(peaks.values()) / 1024
        print(f"| total | {total:.2f} | {total / items * 1e6:,.0f} | 100% | {peak_mb:.0f} | | | | | | |")
        by_mapping: dict[str, dict[str, int]] = figures.get("maps_kb") or {}  # type: ignore[assignment]
        if by_mapping:
            print(f"\n{name}: resident MB at each phase's end by kind of mapping (--maps)")
            print("| phase | " + " | ".join(MAPPINGS) + " |")
            print("|---" * (len(MAPPINGS) + 1) + "|")
            for phase in PHASES:
                if phase in by_mapping:
                    cells = " | ".join(_mb(by_mapping[phase][kind]) for kind in MAPPINGS)
                    print(f"| {phase} | {cells} |")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} (2 cores)")


def _mb(kib: int | None) -> str:
    return "" if kib is None else f"{kib / 1024:.0f}"


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), sys.argv[4:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument(
        "--runs",
        default="new,noop,resume",
        help=f"Comma-separated runs, in this order, after a new run: {', '.join(RUNS)}",
    )
    parser.add_argument("--profile", help="Also write a cProfile file (CPU clock) per run: PATH.<run>")
    parser.add_argument("--tracemalloc", action="store_true", help="Python's own peak per phase (slow)")
    parser.add_argument(
        "--trim",
        action="store_true",
        help="At each phase's end give the C heap's free pages back (malloc_trim) and note what stays: "
        "the memory still live, apart from what the allocator kept",
    )
    parser.add_argument(
        "--maps",
        action="store_true",
        help="At each phase's end, the resident set by kind of mapping: main C heap, threads' C heaps, "
        "other anonymous memory, files",
    )
    parser.add_argument(
        "--growth",
        help="Also write what Python allocations each phase left behind, by source line (tracemalloc "
        "snapshots at each phase's ends; slow): PATH.<run>",
    )
    parser.add_argument(
        "--set",
        default="",
        help="Try other values: module.NAME=integer,... e.g. relaybatch.engine.store.schema.CACHE_KIB=4000",
    )
    args = parser.parse_args()
    if args.profile:
        os.environ["RELAYBATCH_PHASES_PROFILE"] = args.profile
    if args.tracemalloc:
        os.environ["RELAYBATCH_PHASES_TRACEMALLOC"] = "1"
    if args.set:
        os.environ["RELAYBATCH_PHASES_SET"] = args.set
    if args.growth:
        os.environ["RELAYBATCH_PHASES_GROWTH"] = args.growth
    if args.trim:
        os.environ["RELAYBATCH_PHASES_TRIM"] = "1"
    if args.maps:
        os.environ["RELAYBATCH_PHASES_MAPS"] = "1"
    runs = [run for run in RUNS if run in args.runs.split(",")]
    with tempfile.TemporaryDirectory(prefix="relaybatch-phases-") as folder:
        report(measure(args.items, Path(folder), runs))


if __name__ == "__main__":
    main()

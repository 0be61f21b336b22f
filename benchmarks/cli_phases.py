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
For each: CPU microseconds per item, and the peak resident set when it ended.

    .venv/bin/python benchmarks/cli_phases.py                  # 20,000 items
    .venv/bin/python benchmarks/cli_phases.py --items 100000
    .venv/bin/python benchmarks/cli_phases.py --profile /tmp/phases   # cProfile files too, per run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
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
    ("relaybatch.cli", "_catalog_check", "load+validate"),
    ("relaybatch.engine.store", "CheckpointStore.plan_items", "checkpoint insert"),
    ("relaybatch.run.execution", "execute_run", "open run"),
    ("relaybatch.engine.runner", "execute", "execution"),
    ("relaybatch.costs.guard", "RunSpendGuard.write_ledger", "ledger"),
    ("relaybatch.run.execution", "export_run_results", "export"),
]


# -- the child: one relaybatch run with its phases timed ------------------------------------


class Clock:
    """CPU seconds charged to the innermost running phase; peak RSS noted as each phase ends."""

    def __init__(self) -> None:
        self.cpu = dict.fromkeys(PHASES, 0.0)
        self.peak_kb: dict[str, int] = {}
        self.stack = ["start-up"]
        self.mark = time.process_time()

    def switch(self, phase: str | None) -> None:
        now = time.process_time()
        self.cpu[self.stack[-1]] += now - self.mark
        self.mark = now
        if phase is None:
            ended = self.stack.pop()
            self.peak_kb[ended] = max(self.peak_kb.get(ended, 0), _peak_kb())
        else:
            self.stack.append(phase)

    def enter(self, phase: str) -> None:
        if phase != "imports" and self.stack == ["start-up"]:
            self.stack = ["other"]  # the first step began: start-up is over
        self.switch(phase)

    def leave(self) -> None:
        self.switch(None)


def _peak_kb() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


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


def child(result_path: Path, arguments: list[str]) -> None:
    import importlib._bootstrap as bootstrap

    clock = Clock()
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
        result_path.write_text(json.dumps({"cpu": clock.cpu, "peak_kb": clock.peak_kb, "exit": code}))


# -- the parent: emulator, manifest, three runs, the table ----------------------------------


def measure(items: int, folder: Path) -> list[tuple[str, dict[str, object], float, int]]:
    sys.path.insert(0, str(HERE / "peers"))
    from bench import BENCH_KEY, PROJECT_PYTHON, Scenario, ServedEmulator, emulator_config, write_work
    from cli_end_to_end import RESUME_SHARE, append_rows

    work = write_work(items, folder)
    runs_dir = folder / "runs"
    scenario = Scenario("open", items, rpm=0, latency=0.0, injected_429_rate=0.0)
    measured = []
    with ServedEmulator(emulator_config(scenario, folder)) as emulator:
        for name in ("new run", "no-op re-run", f"resume, {RESUME_SHARE:.0%} new"):
            if name.startswith("resume"):
                append_rows(work, items, max(1, int(items * RESUME_SHARE)))
            result = folder / f"{name.split()[0].strip(',')}.json"
            arguments = ["run", str(work), "--runs-dir", str(runs_dir), "--base-url", emulator.url]
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
        print("| phase | CPU s | CPU us/item | share | peak RSS at its end, MB |")
        print("|---|---|---|---|---|")
        for phase in PHASES:
            seconds = cpu.get(phase, 0.0)
            peak = peaks.get(phase)
            print(
                f"| {phase} | {seconds:.2f} | {seconds / items * 1e6:,.0f} | {seconds / total:.0%} | "
                f"{'' if peak is None else f'{peak / 1024:.0f}'} |"
            )
        peak_mb = max(peaks.values()) / 1024
        print(f"| total | {total:.2f} | {total / items * 1e6:,.0f} | 100% | {peak_mb:.0f} |")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} (2 cores)")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), sys.argv[4:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--profile", help="Also write a cProfile file (CPU clock) per run: PATH.<run>")
    args = parser.parse_args()
    if args.profile:
        os.environ["RELAYBATCH_PHASES_PROFILE"] = args.profile
    with tempfile.TemporaryDirectory(prefix="relaybatch-phases-") as folder:
        report(measure(args.items, Path(folder)))


if __name__ == "__main__":
    main()

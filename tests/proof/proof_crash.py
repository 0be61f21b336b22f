"""The crash suite's driver and checks, shared by tests/proof (small) and benchmarks/crash_suite.py (full).

A campaign runs a mixed manifest (chat in all four families, images, V2 video, V1 tasks,
judgments, web search) through ``proof_runner.py`` in a subprocess, SIGKILLs it at seeded random
points, restarts it each time, and at the end checks the run against the emulator (which lives in
the driver's process and never dies) and against an uninterrupted run of the same manifest:

- no item lost: every item of the manifest is in the store, terminal, and ``done`` or ``uncertain``
  (reported because a kill fell between its send and its answer; never resent);
- no billed create received twice: every create body reached the emulator at most once;
- results equal the uninterrupted run's for every item done in both, apart from timings and ids;
- ledgers reconciled to the cent: each answered call's ledger row has its twin in the emulator's
  ledger; each call sent with no answer recorded is an unknown-outcome row of an ``uncertain``
  item, and only those explain the emulator's extra charges (counted at their worst case, the
  ledger covers the bill).

Kills come two ways, half each: a timer (SIGKILL from the driver a random time after the engine
starts: any instruction, mid-write included) and a hook point (the runner SIGKILLs itself the
n-th time the engine reaches e.g. ``answered``, between a paid answer and its checkpoint).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml
from proof_served import PYTHON, REPO_ROOT, Served

from relaybatch.costs import CostStore, reconcile
from relaybatch.costs.ledger import budget_amount

RUNNER = Path(__file__).resolve().with_name("proof_runner.py")
EVERYTHING = REPO_ROOT / "configs" / "manifests" / "everything.yaml"
SUBMIT_POINTS = ["sending_committed", "answered", "result_committed"]
POLL_POINTS = ["poll_sending", "poll_answered", "poll_committed"]
TERMINAL_OK = {"done", "uncertain"}
RESULT_COLUMNS = ("state", "output_text", "finish_reason", "prompt_tokens", "completion_tokens")
RUN_TIMEOUT_SECONDS = 600


def mixed_manifest(folder: Path, copies: int, name: str = "mixed") -> Path:
    """everything.yaml with its jobs repeated ``copies`` times; each copy's requests differ
    (a prefix on the prompt, a query on a page address) so every create body is unique."""
    source = yaml.safe_load(EVERYTHING.read_text(encoding="utf-8"))
    jobs = []
    for copy in range(copies):
        for job in source["jobs"]:
            job = json.loads(json.dumps(job))
            job["name"] = f"{job['name']}-{copy}"
            if isinstance(job.get("data"), str):
                job["data"] = str((EVERYTHING.parent / job["data"]).resolve())
            if job.get("prompt"):
                job["prompt"] = f"[{copy}] {job['prompt']}"
            if isinstance(job.get("request", {}).get("url"), str):
                job["request"]["url"] += f"?copy={copy}"
            jobs.append(job)
    manifest = {"run": {"name": name, "concurrency": 4, "uncertain": "report"}, "jobs": jobs}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    return path


def runner_env(served: Served, api_key: str, **extra: str) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("RELAYBATCH_", "PROOF_"))}
    environment.update({"RELAYBATCH_BASE_URL": served.url, "RELAYBATCH_API_KEY": api_key})
    # Two in flight: a kill strands at most two sends as uncertain, so most items finish.
    environment.update({"PROOF_CONCURRENCY": "2", **extra})
    return environment


def run_to_end(manifest: Path, run_dir: Path, environment: dict[str, str]) -> dict[str, Any]:
    """One runner process with no kill; returns its summary line."""
    done = subprocess.run(
        [PYTHON, str(RUNNER), str(manifest), str(run_dir)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
    )
    if done.returncode != 0:
        raise AssertionError(f"runner failed ({done.returncode}): {done.stderr[-3000:]}")
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


@dataclass
class Campaign:
    kills: int = 0
    timer_kills: int = 0
    hook_kills: Counter[str] = field(default_factory=Counter)
    finished_early: int = 0
    seconds: float = 0.0


def store_states(run_dir: Path) -> Counter[str]:
    path = run_dir / "checkpoint.sqlite"
    if not path.exists():
        return Counter()
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return Counter(
            dict(connection.execute("select state, count(*) from items group by state").fetchall())
        )
    finally:
        connection.close()


def _kill_plan(rng: random.Random, states: Counter[str], longest_delay: float) -> tuple[str | None, float]:
    """A hook point and its occurrence, or a timer delay; hook points fit the work that is left."""
    pending = states.get("pending", 0) if states else 1
    remote = states.get("submitted", 0) + states.get("polling", 0)
    # Near the end a hook point may never be reached again (the run would finish unkilled): use timers.
    if rng.random() < 0.5 or (pending < 4 and remote == 0):
        return None, rng.uniform(0.0, longest_delay)
    points = (SUBMIT_POINTS * 2 if pending >= 4 else []) + (POLL_POINTS if remote else [])
    return f"{rng.choice(points or SUBMIT_POINTS)}:1", 0.0


def _one_attempt(
    manifest: Path, run_dir: Path, environment: dict[str, str], hook: str | None, delay: float
) -> bool:
    """Start the runner and kill it as planned; True if it was killed, False if it finished."""
    extra = {"PROOF_CRASH_AT": hook} if hook else {}
    process = subprocess.Popen(
        [PYTHON, str(RUNNER), str(manifest), str(run_dir)],
        env={**environment, **extra},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        process.stdout.readline()  # "executing": imports done, the engine starts now
        if hook is None:
            time.sleep(delay)
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
        _, errors = process.communicate(timeout=RUN_TIMEOUT_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if process.returncode == -signal.SIGKILL:
        return True
    if process.returncode != 0:
        raise AssertionError(f"runner failed ({process.returncode}): {errors[-3000:]}")
    return False


def crash_campaign(
    manifest: Path,
    run_dir: Path,
    environment: dict[str, str],
    *,
    seed: int,
    kills: int,
    engine_seconds: float,
) -> Campaign:
    """Kill the runner ``kills`` times at seeded random points, then let it finish.

    ``engine_seconds`` is how long the engine took uninterrupted (``run_to_end``'s summary):
    timer kills fall within the first ``engine_seconds / kills`` seconds of an execution, so
    the timers together consume about half the work on a fast machine as on a slow one, and
    the run is still unfinished after ``kills`` kills (a fixed delay let a quiet machine finish
    the whole manifest after three kills).
    """
    rng, campaign, started = random.Random(seed), Campaign(), time.monotonic()
    longest_delay = max(0.02, engine_seconds / kills)
    while campaign.kills < kills:
        hook, delay = _kill_plan(rng, store_states(run_dir), longest_delay)
        if _one_attempt(manifest, run_dir, environment, hook, delay):
            campaign.kills += 1
            if hook:
                campaign.hook_kills[hook.partition(":")[0]] += 1
            else:
                campaign.timer_kills += 1
        else:
            campaign.finished_early += 1
            break  # nothing left to interrupt
    run_to_end(manifest, run_dir, environment)
    campaign.seconds = time.monotonic() - started
    return campaign


# -- the checks ------------------------------------------------------------------------------


def items(run_dir: Path) -> dict[str, dict[str, Any]]:
    connection = sqlite3.connect(f"file:{run_dir / 'checkpoint.sqlite'}?mode=ro", uri=True)
    connection.row_factory = sqlite3.Row
    try:
        rows = connection.execute("select key, item_id, job, kind, request, state, cost_usd from items")
        return {row["key"]: dict(row) for row in rows}
    finally:
        connection.close()


def results(run_dir: Path) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for path in sorted((run_dir / "results").glob("*.parquet")):
        for row in pq.read_table(path).to_pylist():
            rows[row["item_key"]] = {column: row.get(column) for column in RESULT_COLUMNS}
    return rows


def create_duplicates(served: Served, web_search_items: Counter[str]) -> list[str]:
    """Create bodies the emulator received more than once (polls and downloads are GETs)."""
    problems = []
    for (method, path, body_hash), count in served.state.requests.counts.items():
        if method == "POST" and not path.startswith("/_emulator/") and count > 1:
            problems.append(f"{method} {path} body {body_hash[:12]} received {count} times")
        if method == "GET" and path.startswith("/v1/websearch/"):
            route = path.rsplit("/", 1)[-1]
            if count > web_search_items[route]:
                problems.append(f"{path}: {count} searches for {web_search_items[route]} items")
    return problems


def ledger_problems(run_dir: Path, served: Served, uncertain_labels: Counter[str]) -> list[str]:
    """Our ledger against the emulator's: every answered call has its twin; a call sent with no
    answer recorded is an unknown-outcome row (its item uncertain), and only those explain the
    gateway's extra charges; known + unknown at worst case covers the bill."""
    costs = CostStore(run_dir / "costs.sqlite")
    try:
        records = list(costs.records())
    finally:
        costs.close()
    match = reconcile(records, served.state.ledger)
    problems = []
    if match.only_ours:
        problems.append(f"ledger rows without a gateway twin: {match.describe()}")
    unknown_rows = Counter(
        str(r["model"]) if r["kind"] != "web_search" else "web search"
        for r in records
        if r["usd"] is None and r["outcome"] == "unknown"
    )
    if unknown_rows - uncertain_labels:
        problems.append(f"unknown-outcome rows of items not uncertain: {unknown_rows - uncertain_labels}")
    if sum(1 for r in records if r["usd"] is None) != sum(unknown_rows.values()):
        problems.append(f"rows of unknown cost that are not unknown outcomes: {match.describe()}")
    extra = Counter(label for label, _ in match.only_theirs)
    if extra - unknown_rows:
        problems.append(
            f"gateway charges no unknown outcome explains: {extra - unknown_rows}; {match.describe()}"
        )
    accounted = match.ours_usd + sum((usd for _, usd in match.only_theirs), Decimal(0))
    if accounted.quantize(Decimal("0.01")) != match.theirs_usd.quantize(Decimal("0.01")):
        problems.append(f"totals differ beyond a cent: {match.describe()}")
    worst = match.ours_usd + sum((budget_amount(r) for r in records if r["usd"] is None), Decimal(0))
    if worst < match.theirs_usd:
        problems.append(f"our ledger with unknown outcomes at worst case ({worst}) is below the bill")
    return problems


def _label(item: dict[str, Any]) -> str:
    if item["kind"] == "web_search":
        return "web search"
    return str(json.loads(item["request"]).get("model"))


def verify(
    run_dir: Path, served: Served, baseline_dir: Path, expected_items: int, *, allow_failed: bool = False
) -> tuple[list[str], Counter[str]]:
    """Every problem found (empty: the run is proven), and the final count per state."""
    problems: list[str] = []
    ours, theirs = items(run_dir), items(baseline_dir)
    states = Counter(item["state"] for item in ours.values())
    allowed = TERMINAL_OK | ({"failed"} if allow_failed else set())
    if len(ours) != expected_items or set(ours) != set(theirs):
        problems.append(f"items lost or invented: {len(ours)} in the run, {expected_items} in the manifest")
    if set(states) - allowed:
        problems.append(f"items not terminal or failed: {dict(states)}")
    searches = Counter(
        json.loads(item["request"]).get("route", "") for item in ours.values() if item["kind"] == "web_search"
    )
    problems += create_duplicates(served, searches)
    mine, reference = results(run_dir), results(baseline_dir)
    for key, item in ours.items():
        if item["state"] != "done" or theirs.get(key, {}).get("state") != "done":
            continue
        if mine.get(key) != reference.get(key):
            problems.append(
                f"{item['job']}/{item['item_id']}: result {mine.get(key)} != {reference.get(key)}"
            )
        if item["cost_usd"] != theirs[key]["cost_usd"]:
            problems.append(
                f"{item['job']}/{item['item_id']}: cost {item['cost_usd']} != {theirs[key]['cost_usd']}"
            )
    uncertain = Counter(_label(item) for item in ours.values() if item["state"] == "uncertain")
    problems += ledger_problems(run_dir, served, uncertain)
    return problems, states


def job_counts(run_dir: Path) -> Iterator[tuple[str, int]]:
    yield from Counter(item["kind"] for item in items(run_dir).values()).items()

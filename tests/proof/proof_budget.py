"""The budget crash suite's driver and checks, shared by tests/proof (small) and
benchmarks/budget_crash.py (full size, 20+ kills).

A budgeted mixed run (V2 videos, images, chat; a run budget and a video job budget) goes through
the real `relaybatch run` in a subprocess against an emulator served from the driver's process
(proof_served.py), whose create routes answer slowly so kills catch calls in flight, and which
drops the connection after charging a share of the video creates (outcome unknown). The driver
SIGKILLs the runner at seeded random moments during billed creates (after the k-th create the
emulator receives in that execution, k drawn from the seed), restarts it each time, and checks
from the emulator's ledger, after every kill and at the end:

- billed <= budget, for the run and for the budgeted job, at any moment;
- the runner's ledger, known + unknown (worst case), >= billed, for the run and per model;
- every call whose answer was recorded has its twin in the emulator's ledger (known == billed).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from proof_served import PYTHON, Served, config_with, runner_environment

from relaybatch.costs import CostStore, reconcile
from relaybatch.costs.ledger import budget_amount
from relaybatch.costs.reconcile import gateway_charge

RUN_NAME = "budgeted"
VIDEO_MODEL, IMAGE_MODEL, CHAT_MODEL = "relay-video-2", "relay-image-2", "relay-chat-small"
CREATE_PATHS = ("/v2/videos", "/v1/images/generations", "/v1/chat/completions")
ATTEMPT_TIMEOUT_SECONDS = 300


def budget_config(demo_key: str, *, slow_seconds: float = 0.4, drop_rate: float = 0.1) -> Any:
    """The shipped emulator, its creates slowed (a kill catches calls in flight) and a share of
    the video creates charged and then cut off (a dropped connection after the send)."""
    rules = [
        {"fault": f"latency={slow_seconds}", "rate": 1.0, "paths": list(CREATE_PATHS)},
        {"fault": "drop=after", "rate": drop_rate, "paths": ["/v2/videos"]},
    ]
    return config_with(demo_key=demo_key, faults={"seed": 7, "rules": rules})


def budget_manifest(
    folder: Path, *, videos: int, images: int, chats: int, run_usd: str, video_usd: str
) -> Path:
    """Short chats, low-quality images, then videos at 0.40 USD (4 s x 0.10), under two budgets.

    Videos come last: a call refused by the video job's budget stops only that job, and one
    refused by the run's budget stops every billed submission; the cheap kinds go first."""
    jobs = [
        {
            "name": "answers",
            "kind": "chat",
            "model": CHAT_MODEL,
            "request": {"max_tokens": 32},
            "prompt": "Question {n}: name a river.",
            "items": [{"id": f"c{n}", "n": n} for n in range(chats)],
        },
        {
            "name": "pictures",
            "kind": "image",
            "model": IMAGE_MODEL,
            "request": {"size": "1024x1024", "quality": "low"},
            "prompt": "picture {n}: a lighthouse at dusk",
            "items": [{"id": f"i{n}", "n": n} for n in range(images)],
        },
        {
            "name": "clips",
            "kind": "video",
            "model": VIDEO_MODEL,
            "budget_usd": video_usd,
            "request": {"seconds": "4", "size": "1280x720"},
            "prompt": "clip {n}: a slow pan across a misty forest",
            "items": [{"id": f"v{n}", "n": n} for n in range(videos)],
        },
    ]
    manifest = {
        "run": {"name": RUN_NAME, "budget_usd": run_usd, "concurrency": 4, "uncertain": "report"},
        "jobs": jobs,
    }
    path = folder / f"{RUN_NAME}.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    return path


@dataclass
class BudgetCampaign:
    kills: int = 0
    executions: int = 0
    finished_early: int = 0
    seconds: float = 0.0
    billed_after_kill: list[Decimal] = field(default_factory=list)
    exit_codes: Counter[int] = field(default_factory=Counter)


def creates_received(served: Served) -> int:
    return sum(
        1
        for exchange in list(served.recorder.exchanges)
        if exchange.method == "POST" and exchange.target.startswith(CREATE_PATHS)
    )


def billed(served: Served) -> tuple[Decimal, Counter[str]]:
    """The emulator's ledger: total and per model (what the gateway billed)."""
    per_model: Counter[str] = Counter()
    total = Decimal(0)
    for entry in list(served.state.ledger):
        label, usd = gateway_charge(entry)
        per_model[label] += usd  # type: ignore[assignment]
        total += usd
    return total, per_model


def _launch(manifest: Path, environment: dict[str, str]) -> subprocess.Popen[str]:
    # Its own process group: a kill takes the run and everything it started (Prefect's server)
    # at once, as a machine losing the run would, and leaves no process behind.
    return subprocess.Popen(
        [PYTHON, "-m", "relaybatch", "run", str(manifest)],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _kill_group(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _stop(process: subprocess.Popen[str]) -> str:
    try:
        _, errors = process.communicate(timeout=ATTEMPT_TIMEOUT_SECONDS)
    finally:
        _kill_group(process)  # whatever the run left (it should have left nothing)
        if process.poll() is None:
            process.wait()
    return errors or ""


def budget_campaign(
    manifest: Path, home: Path, served: Served, api_key: str, *, seed: int, kills: int
) -> BudgetCampaign:
    """SIGKILL `relaybatch run` after the k-th create of an execution (k seeded, 1-3), ``kills``
    times, then run it to its end; the emulator's ledger is read after every kill."""
    rng, campaign, started = random.Random(seed), BudgetCampaign(), time.monotonic()
    environment = runner_environment(home, api_key=api_key, base_url=served.url)
    while campaign.kills < kills:
        target = creates_received(served) + rng.randint(1, 3)
        process = _launch(manifest, environment)
        campaign.executions += 1
        while process.poll() is None and creates_received(served) < target:
            time.sleep(0.005)
        if process.poll() is None:
            time.sleep(rng.uniform(0.0, 0.3))  # somewhere in the create's slow answer, or after it
            _kill_group(process)
        errors = _stop(process)
        if process.returncode == -signal.SIGKILL:
            campaign.kills += 1
            campaign.billed_after_kill.append(billed(served)[0])
            continue
        campaign.exit_codes[process.returncode] += 1
        if process.returncode not in (0, 1) or "Traceback" in errors:
            raise AssertionError(f"relaybatch run failed ({process.returncode}): {errors[-3000:]}")
        campaign.finished_early += 1
        break  # the run ended (done, or its budget reached): nothing left to interrupt
    # Resume to the end; a second execution shows nothing more is sent once the budget is reached.
    for _ in range(2):
        process = _launch(manifest, environment)
        campaign.executions += 1
        errors = _stop(process)
        campaign.exit_codes[process.returncode] += 1
        if process.returncode not in (0, 1) or "Traceback" in errors:
            raise AssertionError(f"relaybatch run failed ({process.returncode}): {errors[-3000:]}")
    campaign.seconds = time.monotonic() - started
    return campaign


@dataclass(frozen=True)
class Books:
    billed: Decimal
    billed_by_model: Counter[str]
    known: Decimal
    unknown: Decimal
    unknown_calls: int
    problems: list[str]

    @property
    def ours(self) -> Decimal:
        return self.known + self.unknown


def check_books(run_dir: Path, served: Served, run_usd: Decimal, video_usd: Decimal) -> Books:
    """Every problem found in the money (empty: the budget held and the books cover the bill)."""
    costs = CostStore(run_dir / "costs.sqlite")
    try:
        records = list(costs.records())
    finally:
        costs.close()
    total, per_model = billed(served)
    problems: list[str] = []
    if total > run_usd:
        problems.append(f"billed {total} USD over the run budget of {run_usd} USD")
    if per_model[VIDEO_MODEL] > video_usd:
        problems.append(
            f"billed {per_model[VIDEO_MODEL]} USD for videos over their budget of {video_usd} USD"
        )
    counted: Counter[str] = Counter()
    for record in records:
        counted[record["model"]] += budget_amount(record)  # type: ignore[assignment]
    for model, usd in per_model.items():
        if counted[model] < usd:
            problems.append(f"{model}: our ledger counts {counted[model]} USD, the gateway billed {usd} USD")
    match = reconcile(records, served.state.ledger)
    if match.only_ours:
        problems.append(f"answered calls the gateway did not bill as recorded: {match.only_ours}")
    unknown_rows = Counter(r["model"] for r in records if r["usd"] is None)
    extra = Counter(label for label, _ in match.only_theirs)
    if extra - unknown_rows:
        problems.append(f"gateway charges no unknown row explains: {extra - unknown_rows}")
    known = sum((Decimal(r["usd"]) for r in records if r["usd"] is not None), Decimal(0))
    unknown = sum((budget_amount(r) for r in records if r["usd"] is None), Decimal(0))
    if known + unknown < total:
        problems.append(f"our ledger (known {known} + unknown {unknown}) is below the bill {total}")
    return Books(total, per_model, known, unknown, sum(unknown_rows.values()), problems)


def summary_line(campaign: BudgetCampaign, books: Books, run_usd: Decimal) -> str:
    return json.dumps(
        {
            "kills": campaign.kills,
            "executions": campaign.executions,
            "seconds": round(campaign.seconds, 1),
            "budget_usd": str(run_usd),
            "billed_usd": str(books.billed),
            "max_billed_after_a_kill": str(max(campaign.billed_after_kill, default=Decimal(0))),
            "known_usd": str(books.known),
            "unknown_worst_usd": str(books.unknown),
            "unknown_calls": books.unknown_calls,
            "exit_codes": dict(campaign.exit_codes),
        }
    )

"""The progress display: how far (total, percent, a bar per kind), how fast (elapsed, rate, ETA),
why (in flight, polling, 429s, retries, the limit and its source) and how much (spent, unknown,
reserved, budget); live on a terminal, one line every N seconds off one."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import threading
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from engine_fakes import FAST, FAST_MEDIA, ClientFactory, execute_with_a_budget
from engine_items import chat, video
from pydantic import SecretStr
from rich.console import Console
from starlette.applications import Starlette

from relaybatch.emulator import create_app, load_config
from relaybatch.emulator.config import FaultRule
from relaybatch.engine import (
    AdaptiveTokenBucket,
    CheckpointStore,
    PlainProgress,
    RichProgress,
    Snapshot,
    execute,
    progress_for,
)
from relaybatch.engine.progress import KindTotals, Rates, figures, money_text, render
from relaybatch.engine.spend import SpendFigures
from relaybatch.gateway import GatewayClient
from relaybatch.gateway.retry import RetryPolicy
from relaybatch.settings import EMULATOR_DEMO_KEY

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def text_of(snapshot: Snapshot, width: int = 100) -> str:
    console = Console(file=io.StringIO(), width=width)
    console.print(render(snapshot))
    return console.file.getvalue()  # type: ignore[attr-defined]


SNAPSHOT = Snapshot(
    finished={"chat:done": 90, "chat:failed": 2, "video:done": 8},
    in_flight=12,
    polling=30,
    elapsed=10.0,
    spent_usd=Decimal("1.23456"),
    stopped=None,
    remaining=200,
    kinds={
        "chat": KindTotals(total=200, finished_before=8, before={"done": 8}),
        "video": KindTotals(total=100),
    },
    queued=5,
    retries=3,
    rate_limited=4,
    limit_rpm=118.8,
    limit_source="429",
    money=SpendFigures(Decimal("1.5"), Decimal("0.25"), Decimal("0.25"), Decimal("10")),
)


def test_the_display_answers_how_far_how_fast_why_and_how_much() -> None:
    text = text_of(SNAPSHOT)

    assert "finished 108/300 (36.0%): 106 done, 2 failed ·" in text
    assert re.search(r"chat\s.*━.*\s100/200\s+50\.0%\s+2\s+9\.2\s+0:00:10", text), text
    assert re.search(r"video\s.*━.*\s8/100\s+8\.0%\s+0\s+0\.8\s+0:01:55", text), text
    assert "elapsed 0:00:10 · 10.0 items/s · ETA 0:01:55" in text
    assert "in flight 12 · queued 5 · polling 30 · 429s 4 · retries 3 · limit 119 rpm (429)" in text
    # Projected: spent + unknown, plus the 200 open items at the mean of the 108 ended (1.75 / 108 each).
    assert "spent $1.5000 · unknown $0.2500 · reserved $0.2500 · projected $4.9907 · budget $10.0000" in text
    assert "WARNING" not in text


def test_the_display_warns_when_the_projection_exceeds_the_budget() -> None:
    money = SpendFigures(Decimal("1.5"), Decimal("0.25"), Decimal("0.25"), Decimal("4"))

    text = money_text(replace(SNAPSHOT, money=money))

    assert text.endswith(
        "projected $4.9907 · budget $4.0000 (50.0% used) · WARNING: the projection exceeds the budget"
    )


def test_the_display_shows_each_period_budget_and_its_share_used() -> None:
    """A nightly run capped per execution and per day: the live line says where each cap stands."""
    periods = (
        ("execution", Decimal("2"), Decimal("0.5")),
        ("day 2026-11-26 (UTC)", Decimal("5"), Decimal("4.5")),
    )
    money = SpendFigures(Decimal("0.5"), Decimal(0), Decimal(0), None, periods=periods)

    text = money_text(replace(SNAPSHOT, money=money))

    assert "no budget" not in text
    assert text.endswith(
        "execution budget $2.0000 (25.0% used) · day 2026-11-26 (UTC) budget $5.0000 (90.0% used)"
    )


def test_finished_is_not_done_uncertain_items_are_said() -> None:
    """A kill left 16 videos uncertain: the line said "total 30/30 (100.0%)" as if all were made."""
    snapshot = replace(
        SNAPSHOT,
        finished={"video:done": 4, "video:uncertain": 6},
        kinds={"video": KindTotals(total=30, finished_before=20, before={"done": 10, "uncertain": 10})},
    )

    text = text_of(snapshot)

    assert "finished 30/30 (100.0%): 14 done, 16 uncertain ·" in text, text
    assert re.search(r"video\s.*━.*\s30/30\s+100\.0%\s+16\s", text), text


def test_the_eta_waits_for_the_slowest_kind_instead_of_the_fastest() -> None:
    """Chats done in seconds must not promise an end while no video has finished yet."""
    snapshot = Snapshot(
        finished={"chat:done": 100},
        in_flight=0,
        polling=4,
        elapsed=5.0,
        spent_usd=None,
        stopped=None,
        remaining=4,
        kinds={"chat": KindTotals(100), "video": KindTotals(4)},
    )
    rates = Rates()
    rates.add(snapshot)

    shown = figures(snapshot, rates)

    assert shown.eta is None
    assert "ETA ? (no video finished yet)" in text_of(snapshot)


def test_rates_follow_the_last_minute_not_the_whole_run() -> None:
    rates = Rates(window=60.0)
    kinds = {"chat": KindTotals(10_000)}
    for second, done in ((0, 0), (60, 6000), (120, 6060)):
        snapshot = Snapshot({"chat:done": done}, 0, 0, float(second), None, None, kinds=kinds)
        rates.add(snapshot)
    assert rates.per_second("chat", snapshot) == 1.0  # 60 in the last 60 s; 50.5/s since the start


def client_on(app: Starlette, key: str, **options: Any) -> GatewayClient:
    transport = httpx.ASGITransport(app=app)
    retry = RetryPolicy(max_attempts=1)
    return GatewayClient("http://emulator.local", SecretStr(key), transport=transport, retry=retry, **options)


def _drain(leader: int, into: bytearray) -> None:
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            return
        if not chunk:
            return
        into.extend(chunk)


async def test_a_terminal_shows_total_percent_elapsed_rate_429s_limit_and_spend(
    store: CheckpointStore, tmp_path: Path
) -> None:
    """The live display on a real pseudo-terminal, 100 columns wide, during a run that meets 429s."""
    config = load_config()
    config.media = FAST_MEDIA
    config.faults.rules = [FaultRule(fault="status=429", at=[2, 4], paths=["/v1/chat"])]
    app = create_app(config)
    store.add_items([chat(n) for n in range(1, 9)] + [video(1)])
    bucket = AdaptiveTokenBucket(6000)
    leader, follower = pty.openpty()
    screen = bytearray()
    reader = threading.Thread(target=_drain, args=(leader, screen), daemon=True)
    reader.start()
    try:
        with open(follower, "w", closefd=False) as terminal:
            console = Console(file=terminal, width=100)
            assert console.is_terminal
            await execute_with_a_budget(store, app, bucket, RichProgress(console))
    finally:
        os.close(follower)
        reader.join(timeout=10)
        os.close(leader)

    text = ANSI.sub("", screen.decode("utf-8", errors="replace"))
    assert "finished 9/9 (100.0%) ·" in text, text
    assert re.search(r"chat\s.*━+\s+8/8\s+100\.0%", text), text
    assert re.search(r"elapsed 0:00:\d\d · \d+\.\d items/s · ETA 0:00:00", text), text
    assert "429s 2 · retries 2 · limit 120 rpm (headers)" in text, text
    assert re.search(r"spent \$0\.\d{4} · unknown \$0\.0000 · reserved \$0\.0000 · budget \$5\.0000", text)
    assert "spent $0.0000" not in text.split("finished 9/9")[-1]  # the calls were priced
    # The limiter's story is kept for the dashboard: run-level events when the limit or 429s changed.
    recorded = [json.loads(event["detail"]) for event in store.iter_events() if event["state"] == "limiter"]
    assert recorded[-1] == {"rpm": pytest.approx(120.0), "source": "headers", "rate_limited": 2}
    assert len(recorded) == len({json.dumps(detail, sort_keys=True) for detail in recorded})


async def test_off_a_terminal_a_line_every_few_seconds_and_a_summary(
    store: CheckpointStore, tmp_path: Path
) -> None:
    """Videos that render for 2 s: the log must not stay silent while they poll."""
    config = load_config()
    config.media = {"video": {**FAST_MEDIA["video"], "render_seconds_base": 2.0}}
    store.add_items([chat(1), chat(2), video(1), video(2)])
    log = tmp_path / "run.log"
    with log.open("w") as file:
        progress = progress_for(file, every=0.5)
        assert isinstance(progress, PlainProgress)
        async with client_on(create_app(config), EMULATOR_DEMO_KEY) as client:
            await execute(store, client, settings=FAST, progress=progress)

    lines = log.read_text().splitlines()
    periodic = [line for line in lines if " progress: " in line]
    assert len(periodic) >= 3, lines
    assert any("polling 2" in line and "video 0/2" in line for line in periodic), lines
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ progress: finished \d/4 .*", periodic[0])
    assert lines[-1].split(" ", 1)[1].startswith("run finished: finished 4/4 (100.0%) · elapsed ")
    for line in lines:
        for figure in ("items/s", "ETA", "in flight", "polling", "429s", "retries", "limit", "spent"):
            assert figure in line, line


def test_a_terminal_gets_the_live_table_and_a_file_the_log_lines(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    try:
        with open(follower, "w", closefd=False) as terminal:
            assert isinstance(progress_for(terminal), RichProgress)
    finally:
        os.close(leader)
        os.close(follower)
    with (tmp_path / "log").open("w") as file:
        assert isinstance(progress_for(file), PlainProgress)


async def test_execute_feeds_the_display_and_finishes_it(
    store: CheckpointStore, make_client: ClientFactory
) -> None:
    store.add_items([chat(1), chat(2), video(1)])
    output = io.StringIO()
    progress = RichProgress(Console(file=output, width=120))

    await execute(store, make_client(), settings=FAST, progress=progress)

    text = output.getvalue()
    assert "chat" in text and "video" in text and "finished 3/3 (100.0%)" in text
    assert progress.live is None


def test_the_limit_says_where_it_came_from() -> None:
    assert AdaptiveTokenBucket(None).limit_source() == "probing"  # the cold-start climb
    assert AdaptiveTokenBucket(600).limit_source() == "configured"

    learned = AdaptiveTokenBucket(600)
    learned.observe(200, {"x-ratelimit-limit-requests": "120", "x-ratelimit-remaining-requests": "100"})
    assert (learned.requests_per_minute, learned.limit_source()) == (pytest.approx(120.0), "headers")

    told_by_429 = AdaptiveTokenBucket(None)
    told_by_429.observe(429, {}, {"rpm": 120})
    told_by_429.observe(200, {"x-ratelimit-limit-requests": "120", "x-ratelimit-remaining-requests": "9"})
    assert told_by_429.limit_source() == "429"  # the same limit confirmed later: still the 429's

    backed_off = AdaptiveTokenBucket(600)
    backed_off.observe(429, {})  # no hint at all: the rate halves, then climbs back
    assert (backed_off.requests_per_minute, backed_off.limit_source()) == (pytest.approx(300.0), "429")

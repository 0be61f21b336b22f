"""Small builders shared by the cost tests: ledger rows, run folders, a checkpoint event log."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

from relaybatch.cost_model import UsageCounts, price_call
from relaybatch.cost_model.price import CallCost
from relaybatch.cost_model.pricing import judgment_prices, parse_pricing, web_search_prices
from relaybatch.costs.ledger import CostStore, LedgerRow, build_row

START = datetime.fromisoformat("2026-11-20T10:00:00+00:00")
CHAT_PRICES = parse_pricing(
    {"data": {"id": "chat-model", "pricing": {"text": {"prompt": "0.000003", "completion": "0.000015"}}}}
)
IMAGE_PRICES = parse_pricing(
    {
        "data": {
            "id": "image-model",
            "pricing": {"kind": "generation", "generation": {"image": {"per_image": "0.04"}}},
        }
    }
)


def sample_rows(run: str = "demo") -> list[LedgerRow]:
    """Charges over two days in three jobs: priced, free-form (judgment, search) and unpriced."""
    calls = [
        ("chat", "summaries", "chat-model", CHAT_PRICES, UsageCounts(input_tokens=1000, output_tokens=200)),
        ("image", "covers", "image-model", IMAGE_PRICES, UsageCounts(images=2)),
        ("judgment", "labels", "judge", judgment_prices("judge"), UsageCounts(input_tokens=5000)),
        ("web_search", "labels", "search", web_search_prices("search"), UsageCounts(requests=1)),
        ("chat", "summaries", "unpriced", None, UsageCounts(input_tokens=10)),
    ]
    rows = []
    for index in range(20):
        kind, job, model, prices, usage = calls[index % len(calls)]
        rows.append(
            build_row(
                run=run,
                job=job,
                item_id=f"{job}-{index}",
                item_key=f"key{index:03d}",
                kind=kind,
                model=model,
                provider=None,
                usage=usage,
                cost=price_call(prices, usage),
                charged_at=START + timedelta(hours=index * 2),
                latency_seconds=0.2 * (index % 4 + 1),
            )
        )
    return rows


def fill_cost_store(run_dir: Path, run: str = "demo") -> list[Decimal]:
    """A run folder with the sample charges, one commit each; returns every call's USD."""
    store = CostStore(run_dir / "costs.sqlite")
    amounts = []
    try:
        for row in sample_rows(run):
            amounts.append(row.cost.usd if row.cost.usd is not None else row.cost.known_usd)
            store.record(row)
    finally:
        store.close()
    return amounts


def unknown_video_row(job: str, item_id: str, item_key: str, call: str = "create") -> LedgerRow:
    """A video create sent with no answer recorded: no usage, 0.40 USD reserved at its worst case."""
    return build_row(
        run="demo",
        job=job,
        item_id=item_id,
        item_key=item_key,
        kind="video",
        model="video-model",
        provider=None,
        usage=UsageCounts(),
        cost=CallCost((), "base", ("outcome unknown",)),
        charged_at=START,
        reserved_usd=Decimal("0.40"),
        outcome="unknown",
        call=call,
    )


def write_checkpoint_events(run_dir: Path, count: int = 20) -> None:
    """A checkpoint file with what the report reads: items (kind, state), the run's settings,
    item events and the limiter's run-level events."""
    connection = sqlite3.connect(run_dir / "checkpoint.sqlite")
    with connection:
        connection.execute("create table items (key text primary key, kind text, state text)")
        connection.execute("create table runs (name text, settings text, stop_reason text)")
        # A store from before the whole run's budgets were recorded beside the share: the share.
        settings = {"budget_usd": "2.00", "job_budgets": {"covers": "0.50"}}
        connection.execute("insert into runs values ('demo', ?, null)", (json.dumps(settings),))
        connection.execute(
            "create table events (id integer primary key, key text, state text, detail text, at text)"
        )
        for minute, rpm, rate_limited in ((0, 600, 0), (1, 118.8, 1), (2, 118.8, 2)):
            detail = json.dumps({"rpm": rpm, "source": "429", "rate_limited": rate_limited})
            connection.execute(
                "insert into events (key, state, detail, at) values ('', 'limiter', ?, ?)",
                (detail, (START + timedelta(minutes=minute)).isoformat()),
            )
        for index in range(count):
            key, sent = f"key{index:03d}", START + timedelta(minutes=index // 3)
            finished = sent + timedelta(seconds=0.3 * (index % 5 + 1))
            end_state, detail = (
                ("failed", "429 rate_limit_error: slow down") if index % 7 == 0 else ("done", None)
            )
            kind = "chat" if index % 2 else "image"
            connection.execute("insert into items values (?, ?, ?)", (key, kind, end_state))
            connection.execute(
                "insert into events (key, state, detail, at) values (?, 'sending', null, ?)",
                (key, sent.isoformat()),
            )
            connection.execute(
                "insert into events (key, state, detail, at) values (?, ?, ?, ?)",
                (key, end_state, detail, finished.isoformat()),
            )
    connection.close()

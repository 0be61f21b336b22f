"""A ledger row: one billable call (``LedgerRow``, ``build_row``), its flat record, the amounts every
money figure splits it into (budget, known, unknown), and the ledger's Arrow schema."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa

from relaybatch.cost_model import COMPONENTS, CallCost, UsageCounts
from relaybatch.lean_imports import arrow_without_pandas

arrow_without_pandas()


MONEY = pa.decimal128(38, 18)
CHARGED, RESERVED, UNKNOWN, NOT_CHARGED = "charged", "reserved", "unknown", "not charged"
# A done answer taken from another run instead of sending (run/reuse.py): 0 USD here; its ``call``
# names the run and the call of the original charge ("reused:<run>:<call>").
REUSED = "reused"
OUTCOME_UNKNOWN = "outcome unknown"

USAGE_COLUMNS = tuple(item.name for item in fields(UsageCounts) if item.name != "quote_usd")
SECONDS_COLUMNS = frozenset({"audio_seconds", "video_seconds", "video_seconds_with_audio"})


@dataclass(frozen=True)
class LedgerRow:
    """One billable call: who, what, how much of each unit, at which price, for how many USD."""

    run: str
    job: str
    item_id: str
    item_key: str
    kind: str
    model: str
    provider: str | None
    usage: UsageCounts
    cost: CallCost
    charged_at: datetime
    remote_id: str | None = None
    latency_seconds: float | None = None  # a duration for the dashboard, not money
    call: str = "create"  # which billed request of the item: the guard writes "attempt-N"
    reserved_usd: Decimal | None = None  # the worst case the budget held for the call
    # "charged"; "reserved": admitted by the budget, about to be sent or in flight (durable before
    # the send, so a crash cannot forget it); "unknown": sent with no answer recorded (crash,
    # dropped connection, timeout), counted at its worst case until resolved.
    outcome: str = CHARGED
    # A structured answer that did not fit its schema (re-asked or given up on): spend that
    # bought nothing; the report splits spend into useful and wasted by it.
    wasted: bool = False
    execution: int | None = None  # the execution that sent the call (the checkpoint's executions)

    @property
    def usd(self) -> Decimal | None:
        return self.cost.usd


def build_row(
    *,
    run: str,
    job: str,
    item_id: str,
    item_key: str,
    kind: str,
    model: str,
    provider: str | None,
    usage: UsageCounts,
    cost: CallCost,
    remote_id: str | None = None,
    latency_seconds: float | None = None,
    charged_at: datetime | None = None,
    reserved_usd: Decimal | None = None,
    outcome: str = "charged",
    call: str = "create",
    wasted: bool = False,
    execution: int | None = None,
) -> LedgerRow:
    return LedgerRow(
        run=run,
        job=job,
        item_id=item_id,
        item_key=item_key,
        kind=kind,
        model=model,
        provider=provider,
        usage=usage,
        cost=cost,
        remote_id=remote_id,
        latency_seconds=latency_seconds,
        charged_at=charged_at or datetime.now(UTC),
        reserved_usd=reserved_usd,
        outcome=outcome,
        call=call,
        wasted=wasted,
        execution=execution,
    )


def money_text(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def flat_record(row: LedgerRow) -> dict[str, Any]:
    """The row as flat columns; Decimals as strings (SQLite has no exact decimal type)."""
    record: dict[str, Any] = {
        "id": f"{row.item_key}:{row.call}",
        "run": row.run,
        "job": row.job,
        "item_id": row.item_id,
        "item_key": row.item_key,
        "call": row.call,
        "kind": row.kind,
        "model": row.model,
        "provider": row.provider,
        "remote_id": row.remote_id,
        "tier": row.cost.tier,
    }
    for name in USAGE_COLUMNS:
        value = getattr(row.usage, name)
        record[name] = str(value) if name in SECONDS_COLUMNS else value
    record["quote_usd"] = money_text(row.usage.quote_usd)
    parts = {part.name: part for part in row.cost.components}
    for name in COMPONENTS:
        part = parts.get(name)
        record[f"price_{name}"] = money_text(part.unit_price) if part else None
        record[f"usd_{name}"] = money_text(part.usd) if part else None
    record["price_paths"] = json.dumps({part.name: part.price_path for part in row.cost.components})
    record["unknown_prices"] = ",".join(row.cost.unknown) or None
    record["priced"] = not row.cost.unknown
    record["usd"] = money_text(row.cost.usd)
    record["known_usd"] = str(row.cost.known_usd)
    record["reserved_usd"] = money_text(row.reserved_usd)
    record["outcome"] = row.outcome
    record["charged_at"] = row.charged_at.astimezone(UTC).isoformat(timespec="microseconds")
    record["latency_seconds"] = row.latency_seconds
    record["wasted"] = row.wasted
    record["execution"] = row.execution
    return record


def budget_amount(record: Mapping[str, Any]) -> Decimal:
    """What the budget counts for a row: its cost, or when that is not known its worst case."""
    if record["usd"] is not None:
        return Decimal(record["usd"])
    return max(Decimal(record["known_usd"]), Decimal(record["reserved_usd"] or 0))


def known_amount(record: Mapping[str, Any]) -> Decimal:
    """The part of a row's cost that is known (its whole cost when it is priced)."""
    return Decimal(record["usd"] if record["usd"] is not None else record["known_usd"])


def unknown_amount(record: Mapping[str, Any]) -> Decimal:
    """The worst case the budget still holds beyond the known part (0 for a priced charge).

    The one split every money figure uses (report, dashboard, Prefect summary, progress line):
    known = ``known_amount``, unknown = this, and their sum is ``budget_amount``, what the
    budget counts as spent."""
    return budget_amount(record) - known_amount(record)


def ledger_schema() -> pa.Schema:
    columns: list[tuple[str, pa.DataType]] = [
        ("run", pa.string()),
        ("job", pa.string()),
        ("item_id", pa.string()),
        ("item_key", pa.string()),
        ("call", pa.string()),
        ("kind", pa.string()),
        ("model", pa.string()),
        ("provider", pa.string()),
        ("remote_id", pa.string()),
        ("tier", pa.string()),
    ]
    columns += [(name, MONEY if name in SECONDS_COLUMNS else pa.int64()) for name in USAGE_COLUMNS]
    columns.append(("quote_usd", MONEY))
    for name in COMPONENTS:
        columns += [(f"price_{name}", MONEY), (f"usd_{name}", MONEY)]
    columns += [
        ("price_paths", pa.string()),
        ("unknown_prices", pa.string()),
        ("priced", pa.bool_()),
        ("usd", MONEY),
        ("known_usd", MONEY),
        ("reserved_usd", MONEY),
        ("outcome", pa.string()),
        ("charged_at", pa.timestamp("us", tz="UTC")),
        ("latency_seconds", pa.float64()),
        ("wasted", pa.bool_()),  # layout 2
        ("execution", pa.int64()),
    ]
    return pa.schema(columns)

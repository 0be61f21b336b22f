"""The cost store's layout in SQLite: the tables, the view ``charges``, the statements that write them,
and a row's values as they are kept (ids of texts, integer microseconds, ``attempt-N`` as N)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from relaybatch.cost_model import COMPONENTS, UsageCounts
from relaybatch.costs.ledger.rows import (
    RESERVED,
    SECONDS_COLUMNS,
    USAGE_COLUMNS,
    LedgerRow,
    ledger_schema,
    money_text,
)
from relaybatch.lean_imports import arrow_without_pandas

arrow_without_pandas()


# PRAGMA user_version of the store's layout (0: one "charges" table; 1: charge_rows and
# reservations; 2 added charge_rows.wasted; 3 each row's execution)
SCHEMA_VERSION = 3
# Columns kept as the id of a text in ``texts``: long and repeated on every row.
TEXT_ID_COLUMNS = ("run", "job", "model", "price_paths")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ATTEMPT = "attempt-"


def sqlite_columns() -> dict[str, type]:
    """SQLite column types for the ledger: exact decimals as text, counts as integers."""
    kinds: dict[str, type] = {"id": str}
    for column in ledger_schema():
        if pa.types.is_integer(column.type) or pa.types.is_boolean(column.type):
            kinds[column.name] = int
        elif pa.types.is_floating(column.type):
            kinds[column.name] = float
        else:
            kinds[column.name] = str
    return kinds


COLUMN_NAMES = tuple(column.name for column in ledger_schema())  # the ledger's, as the view shows them
CHARGE_COLUMNS = ("item_key", "call", *(name for name in COLUMN_NAMES if name not in ("item_key", "call")))
# What a call in flight has that is not the same for every reservation.
RESERVATION_COLUMNS = (
    "item_key",
    "call",
    "run",
    "job",
    "item_id",
    "kind",
    "model",
    "provider",
    "remote_id",
    "tier",
    "unknown_prices",
    "reserved_usd",
    "charged_at",
    "execution",
)


def _sql_type(name: str) -> str:
    if name in TEXT_ID_COLUMNS or name == "charged_at":
        return "integer"
    return {int: "integer", float: "real"}.get(sqlite_columns().get(name, str), "text")


LAYOUT_SQL = (
    "create table if not exists texts (id integer primary key, text text not null unique)",
    "create table if not exists charge_rows ("
    # call: no declared type, so "attempt-N" kept as an integer and any other label as text
    + ", ".join(f"{name} {'' if name == 'call' else _sql_type(name)}" for name in CHARGE_COLUMNS)
    + ", primary key (item_key, call)) without rowid",
    "create table if not exists reservations ("
    + ", ".join(f"{name} {'' if name == 'call' else _sql_type(name)}" for name in RESERVATION_COLUMNS)
    + ", primary key (item_key, call)) without rowid",
)


def _unreserved(name: str) -> str:
    """A column a reservation does not keep, as it is for every reservation (``RunSpendGuard.reserve``
    builds them with no usage and no cost yet), in SQL."""
    if name in SECONDS_COLUMNS or name == "known_usd":
        return "'0'"
    if name in USAGE_COLUMNS or name in ("priced", "wasted"):
        return "0"
    if name == "outcome":
        return f"'{RESERVED}'"
    return "null"


def _shown(name: str, table: str) -> str:
    """A ledger column as the view shows it, from ``table`` (alias ``c``)."""
    if name == "id":
        return f"c.item_key || ':' || {_shown('call', table)}"
    if name == "call":
        return f"case typeof(c.call) when 'integer' then '{_ATTEMPT}' || c.call else c.call end"
    if table == "reservations" and name not in RESERVATION_COLUMNS:
        return "'{}'" if name == "price_paths" else _unreserved(name)
    if name == "charged_at":  # integer microseconds as the ISO text flat_record writes
        return (
            "strftime('%Y-%m-%dT%H:%M:%S', c.charged_at / 1000000, 'unixepoch') "
            "|| printf('.%06d+00:00', c.charged_at % 1000000)"
        )
    if name == "price_paths":
        return "coalesce((select text from texts where id = c.price_paths), '{}')"
    if name in TEXT_ID_COLUMNS:
        return f"(select text from texts where id = c.{name})"
    if name == "known_usd":  # null when it is the whole cost (a priced row): the same text twice
        return "coalesce(c.known_usd, c.usd)"
    return f"c.{name}"


_VIEW_NAMES = ("id", *COLUMN_NAMES)
VIEW_SQL = (
    f"create view charges ({', '.join(_VIEW_NAMES)}) as "
    f"select {', '.join(_shown(name, 'charge_rows') for name in _VIEW_NAMES)} from charge_rows c union all "
    f"select {', '.join(_shown(name, 'reservations') for name in _VIEW_NAMES)} from reservations c"
)
# Reservations left open become unknown outcomes at their worst case (outcome, why: parameters).
RESERVATIONS_TO_UNKNOWN_SQL = (
    f"insert or replace into charge_rows ({', '.join(CHARGE_COLUMNS)}) select "
    + ", ".join(
        "?"
        if name in ("unknown_prices", "outcome")
        else name
        if name in RESERVATION_COLUMNS
        else "null"
        if name == "price_paths"
        else _unreserved(name)
        for name in CHARGE_COLUMNS
    )
    + " from reservations"
)
CHARGE_SQL = (
    f"insert or replace into charge_rows ({', '.join(CHARGE_COLUMNS)}) "
    f"values ({', '.join('?' for _ in CHARGE_COLUMNS)})"
)
RESERVE_SQL = (
    f"insert or replace into reservations ({', '.join(RESERVATION_COLUMNS)}) "
    f"values ({', '.join('?' for _ in RESERVATION_COLUMNS)})"
)


def call_value(call: str) -> str | int:
    """``attempt-N`` is kept as the integer N; any other label as its text."""
    if call.startswith(_ATTEMPT) and call[len(_ATTEMPT) :].isdigit():
        number = int(call[len(_ATTEMPT) :])
        if f"{_ATTEMPT}{number}" == call:
            return number
    return call


def id_parts(row_id: str) -> tuple[str, str | int]:
    """A ledger row id (``<item key>:<call>``) as the store's key."""
    key, _, call = row_id.partition(":")
    return key, call_value(call)


def _micros(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


def iso_micros(text: str | None) -> int | None:
    return None if text is None else _micros(datetime.fromisoformat(text).astimezone(UTC))


def row_texts(row: LedgerRow) -> tuple[str | None, ...]:
    return row.run, row.job, row.model, _price_paths(row)


def _price_paths(row: LedgerRow) -> str | None:
    """The JSON of each price used's pricing path; None when no price was used ("{}")."""
    if not row.cost.components:
        return None
    return json.dumps({part.name: part.price_path for part in row.cost.components})


_NO_USAGE = UsageCounts()


def _call_values(row: LedgerRow, ids: Mapping[str, int]) -> list[Any]:
    """The columns a reservation and a charge row share, first in both: the call and its tier."""
    return [
        row.item_key,
        call_value(row.call),
        ids[row.run],
        ids[row.job],
        row.item_id,
        row.kind,
        ids[row.model],
        row.provider,
        row.remote_id,
        row.cost.tier,
    ]


def reservation_values(row: LedgerRow, ids: Mapping[str, int]) -> list[Any]:
    if row.cost.components or row.cost.usd is not None or row.usage != _NO_USAGE:
        raise ValueError(f"a reservation carries no usage and no cost yet: {row.item_key}:{row.call}")
    return [
        *_call_values(row, ids),
        ",".join(row.cost.unknown) or None,
        money_text(row.reserved_usd),
        _micros(row.charged_at),
        row.execution,
    ]


def charge_values(row: LedgerRow, ids: Mapping[str, int]) -> list[Any]:
    """The row in ``CHARGE_COLUMNS`` order: ``flat_record``'s values (the layout tests compare
    the two), built as a list directly (this runs once per billed call)."""
    usage, cost = row.usage, row.cost
    values = _call_values(row, ids)
    for name in USAGE_COLUMNS:
        values.append(str(getattr(usage, name)) if name in SECONDS_COLUMNS else getattr(usage, name))
    values.append(money_text(usage.quote_usd))
    parts = {part.name: part for part in cost.components}
    for name in COMPONENTS:
        part = parts.get(name)
        values += (money_text(part.unit_price), money_text(part.usd)) if part else (None, None)
    paths = _price_paths(row)
    usd, known = money_text(cost.usd), str(cost.known_usd)
    values += [
        None if paths is None else ids[paths],
        ",".join(cost.unknown) or None,
        not cost.unknown,
        usd,
        None if known == usd else known,
        money_text(row.reserved_usd),
        row.outcome,
        _micros(row.charged_at),
        row.latency_seconds,
        row.wasted,
        row.execution,
    ]
    return values

"""Writing groups of rows to SQLite: one transaction per group, and many rows per statement.

The stores open their connections in autocommit mode (``isolation_level=None``), where Python's
``with connection:`` begins no transaction and every statement commits on its own: ``transaction``
is the explicit ``BEGIN IMMEDIATE ... COMMIT`` a group needs to be all or nothing.

Within a group, rows travel as one JSON array, read with ``json_each``.

``executemany`` runs its statement once per row; for the groups of rows the checkpoint store and
the cost ledger write, one ``insert ... select ... from json_each(?)`` or ``update ... from
json_each(?)`` costs about half the CPU (benchmarks/checkpoint_writes.py). Two cases go row by row
instead: a row or two, where parsing the array costs more than it saves, and text holding a NUL
character, which SQLite's JSON functions would cut short.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

# From this many rows, one statement over a JSON array beats a statement per row.
JSON_ARRAY_FROM_ROWS = 3


@contextlib.contextmanager
def transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """Statements inside are committed together on exit, or rolled back together on an error."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def copy_database(connection: sqlite3.Connection, path: Path) -> None:
    """The whole database behind ``connection`` as it is now, copied to ``path`` by SQLite's online
    backup in one step: a consistent copy, read in one short read transaction (the stores'
    ``copy_to``: an export beside an execution reads the copy, run/snapshot.py)."""
    target = sqlite3.connect(path)
    try:
        connection.backup(target)
    finally:
        target.close()


def json_array(rows: Sequence[Sequence[Any]]) -> str | None:
    """``rows`` as the JSON array text of one statement, or None when they should go through
    ``executemany`` instead (fewer than ``JSON_ARRAY_FROM_ROWS`` rows, or a NUL in some text).

    The NUL check reads the encoded text once: ``json.dumps`` writes a NUL as the escape
    ``\\u0000``, so its absence proves there is none (a text holding that escape literally also
    goes row by row, which is always correct). Scanning every value in Python instead cost about
    a tenth of a busy run's CPU.
    """
    if len(rows) < JSON_ARRAY_FROM_ROWS:
        return None
    text = json.dumps(rows)
    return None if "\\u0000" in text else text


def json_columns(count: int) -> str:
    """``j.value ->> 0, ..., j.value ->> count-1``: the columns of each array row, as SQL values."""
    return ", ".join(f"j.value ->> {index}" for index in range(count))

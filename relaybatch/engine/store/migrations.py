"""The checkpoint's migrations, named and listed with what each changed (sqlite-utils style).

``PRAGMA user_version`` is a store's layout. A store of an earlier layout is migrated in one
transaction the first time it is opened for writing (``create_or_migrate``; a crash leaves the old
layout), by applying in order every migration of ``MIGRATIONS`` above its layout; then the old
tables' pages are given back (``compact_file``). A store opened read-only is read as it is
(base.py). ``python -m relaybatch.engine.store.migrations`` prints the list.

Layouts 2 and 3 are made by one copy of the items table (``rebuild_items``): a store older than
layout 2 takes both in that copy (copying a million items twice would double the migration's
time), and the second finds the work done.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from relaybatch.engine.store.schema import (
    EXECUTIONS_DDL,
    ISO_MS_SQL,
    ITEM_COLUMNS,
    ITEM_INDEXES,
    ITEMS_DDL,
    JOBS_DDL,
    PAGE_SIZE,
    RUN_COLUMNS_ADDED,
    SCHEMA_VERSION,
    SOURCE_FILES_DDL,
    TIME_COLUMNS,
)
from relaybatch.engine.store.values import source_sql
from relaybatch.lean_imports import import_sqlite_utils
from relaybatch.sqlite_batches import transaction

if TYPE_CHECKING:
    import sqlite_utils
else:
    sqlite_utils = import_sqlite_utils()  # without pandas (lean_imports.py)

__all__ = ["MIGRATIONS", "Migration", "create_or_migrate", "listed", "source_text_columns"]


@dataclass(frozen=True)
class Migration:
    """One step of the layout: the version it makes, its name, and what it changed."""

    version: int
    name: str
    changed: str
    apply: Callable[[sqlite_utils.Database], None]


def create_or_migrate(db: sqlite_utils.Database, path: Path) -> None:
    """A store opened for writing: the current tables made when missing, and an earlier layout
    migrated in one transaction (see the module docstring)."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise sqlite3.DatabaseError(
            f"{path}: checkpoint layout {version} is newer than this relaybatch's "
            f"({SCHEMA_VERSION}); open it with a newer relaybatch"
        )
    fresh = "items" not in db.table_names()
    create_current_tables(db, fresh)
    if version == SCHEMA_VERSION:
        return
    with transaction(db.conn):  # all or nothing: a crash leaves the old layout
        # Read again inside the write lock: another process may have migrated it meanwhile.
        version = db.execute("PRAGMA user_version").fetchone()[0]
        migrated = not fresh and version < SCHEMA_VERSION
        if migrated:
            for migration in MIGRATIONS:
                if migration.version > version:
                    migration.apply(db)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    if migrated:
        compact_file(db)


def listed() -> list[str]:
    """Each migration as "<version> <name>: <what it changed>", in order."""
    return [f"{migration.version} {migration.name}: {migration.changed}" for migration in MIGRATIONS]


def compact_file(db: sqlite_utils.Database) -> None:
    """After a migration: the old tables' pages, now free, given back to the file system
    (``VACUUM``; about 2 s for 200,000 items, once), else the file would keep both copies'
    size until later writes reused them, and the file rewritten with a new store's pages
    (``_vacuum``). Not essential: skipped when another connection holds the store (the free
    pages are reused then). Never waits for a reader: one that opened the old layout reads its
    snapshot until it closes (``_read_old_layout_as_it_is``), and the checkpoint would wait for
    it (busy_timeout) only to be skipped; later checkpoints finish it."""
    try:
        _vacuum(db)
        db.execute("PRAGMA busy_timeout=0")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.OperationalError:
        pass
    finally:
        db.execute("PRAGMA busy_timeout=10000")


def _vacuum(db: sqlite_utils.Database) -> None:
    """``VACUUM``, with PAGE_SIZE pages when nobody else has the file open. A WAL file's page
    size is fixed, so the store leaves WAL mode for the rewrite and comes back to it; SQLite
    refuses to leave while another connection has the file open (a reader: then the old page
    size is kept). No other writer can come meanwhile: whoever opens a store for writing holds
    its folder's lock (run/locking.py), and a crash in between leaves a whole store in rollback
    mode, which the next writer's open puts back in WAL mode."""
    db.execute("PRAGMA busy_timeout=0")
    try:
        resized = db.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    except sqlite3.OperationalError:  # "database is locked": a reader has it open
        resized = False
    finally:
        db.execute("PRAGMA busy_timeout=10000")
    try:
        if resized:
            db.execute(f"PRAGMA page_size={PAGE_SIZE}")
        db.execute("VACUUM")
    finally:
        if resized:
            db.execute("PRAGMA journal_mode=WAL")


def rebuild_items(db: sqlite_utils.Database) -> None:
    """Layouts 0, 1 and 2 to 3, in one copy of the table (rowids kept: events refer to them):
    ``job`` becomes the job's id in ``jobs``; from layouts 0 and 1 also ``source`` "path:line"
    becomes a ``source_files`` id and the line, and submitted/finished ISO times integer
    milliseconds; layout 0's ``created_at``/``updated_at`` are not copied (no reader used them;
    an item's times are its events')."""
    columns = db.table("items").columns_dict
    if columns.get("job") is int:
        return  # another process migrated it first
    values = {name: f"items.{name}" if name in columns else "null" for name in ITEM_COLUMNS}
    del values["source"]
    if "source_file" in columns:  # layout 2
        values["source_file"], values["source_line"] = "items.source_file", "items.source_line"
    else:
        values.update(source_text_columns(db, "items", "items", "main", columns))
    db.execute("insert or ignore into jobs (name) select job from items group by job order by min(rowid)")
    values["job"] = "(select id from jobs where name = items.job)"
    db.execute(ITEMS_DDL.format(name="items_next"))
    db.execute(
        f"insert into items_next (rowid, {', '.join(values)}) "
        f"select rowid, {', '.join(values.values())} from items order by rowid"
    )
    db.execute("drop table items")
    db.execute("alter table items_next rename to items")
    for statement in ITEM_INDEXES:
        db.execute(statement)


def events_by_item_rowid(db: sqlite_utils.Database) -> None:
    """Layout 0 to 1: events refer to their item by rowid and keep integer milliseconds
    (was the 32-character key and 29 characters of ISO text, twice per item)."""
    if "events" not in db.table_names():
        _create_events(db)
        return
    if "item" in db.table("events").columns_dict:
        return  # another process migrated it first
    db.execute("alter table events rename to events_before_1")
    _create_events(db)
    # ISO text of a known shape to integer milliseconds, exactly (no floating point): the
    # seconds from strftime('%s') (which applies the offset) and the milliseconds as written.
    db.execute(
        "insert into events (id, item, state, detail, at) "
        "select e.id, i.rowid, e.state, e.detail, "
        "cast(strftime('%s', e.at) as integer) * 1000 + cast(substr(e.at, 21, 3) as integer) "
        "from events_before_1 e left join items i on i.key = e.key and e.key != '' order by e.id"
    )
    db.execute("drop table events_before_1")


def _create_events(db: sqlite_utils.Database) -> None:
    db.execute(
        "create table if not exists events "
        "(id integer primary key, item integer, state text, detail text, at integer)"
    )


def create_current_tables(db: sqlite_utils.Database, fresh: bool) -> None:
    db.table("runs").create(
        {"name": str, "created_at": str, "updated_at": str, "settings": str, "stop_reason": str},
        pk="name",
        if_not_exists=True,
    )
    # Added later: stores made before them gain the columns when opened.
    present = set(db.table("runs").columns_dict)
    for column in RUN_COLUMNS_ADDED:
        if column not in present:
            db.table("runs").add_column(column, str)
    if "planned_new" not in present:
        db.table("runs").add_column("planned_new", int)
    db.execute(ITEMS_DDL.format(name="items"))
    if "execution" not in db.table("items").columns_dict:  # added later, as the runs columns
        db.execute("alter table items add column execution integer")
    db.execute(EXECUTIONS_DDL)
    db.execute(SOURCE_FILES_DDL)
    db.execute(JOBS_DDL)
    for statement in ITEM_INDEXES:
        db.execute(statement)
    db.table("price_snapshots").create(
        {"id": int, "model": str, "provider": str, "pricing": str, "fetched_at": str},
        pk="id",
        if_not_exists=True,
    )
    if fresh:
        _create_events(db)
    db.execute(
        "create table if not exists plan_inputs "
        "(path text primary key, role text, size integer, sha256 text, detail text)"
    )
    db.execute(
        "create table if not exists plan_rows (kind integer, digest integer, job integer, "
        "line integer, primary key (kind, digest)) without rowid"
    )


def source_text_columns(
    db: sqlite_utils.Database, table: str, alias: str, database: str, columns: Collection[str]
) -> dict[str, str]:
    """Layouts 0 and 1 (``source`` as "path:line" text, ISO times) as layout 2 and after: each
    data file's path into ``database``'s ``source_files`` (in the order of their first items),
    and the columns that read ``table`` (as ``alias``) in those terms: the file's id, the line,
    and the times ``columns`` has as integer milliseconds. Migration and absorb share it."""
    path = source_sql(f"{alias}.source", "path")
    db.execute(
        f"insert or ignore into {database}.source_files (path) select {path} from {table} "
        f"where {alias}.source is not null group by 1 order by min({alias}.rowid)"
    )
    values = {
        "source_file": f"(select id from {database}.source_files where path = {path})",
        "source_line": source_sql(f"{alias}.source", "line"),
    }
    for name in TIME_COLUMNS:
        if name in columns:
            values[name] = ISO_MS_SQL.format(f"{alias}.{name}")
    return values


MIGRATIONS = (
    Migration(
        1,
        "events_by_item_rowid",
        "events refer to their item by its rowid and keep their time as integer milliseconds "
        "(were the item's key and ISO text)",
        events_by_item_rowid,
    ),
    Migration(
        2,
        "items_sources_and_times",
        "an item's source is a source_files id and a line (was 'path:line' text); submitted_at and "
        "finished_at are integer milliseconds (were ISO text); created_at and updated_at are gone",
        rebuild_items,
    ),
    Migration(3, "items_job_ids", "an item's job is its id in jobs (was the job's name)", rebuild_items),
)
assert [migration.version for migration in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))


if __name__ == "__main__":
    print("\n".join(listed()))

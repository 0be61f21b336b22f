"""Migrating a checkpoint of layout 1 to the current layout: time and bytes per item.

Builds a layout-1 store as relaybatch wrote it before layout 2 (the fixture SQL of
tests/engine/fixtures/checkpoint_layout1.sql, with its done chat row repeated to ``--items`` items:
each its own key, line and ISO finished time, the data file's full path under a deep folder, two
events each), then opens it for writing once, as the first `relaybatch run` or `export` after an
upgrade does (one transaction, then VACUUM), and prints the wall and CPU seconds and the file's
bytes per item before and after.

    .venv/bin/python benchmarks/checkpoint_migration.py --items 200000
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

from relaybatch.engine import CheckpointStore

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "engine" / "fixtures" / "checkpoint_layout1.sql"
# A data file's path as a clone of the project deep in a home folder gives it (111 characters).
DATA_FILE = (
    "/home/someone/work/projects/model-relay/relaybatch-clone-checked-out-here-by-me/examples/data/"
    "chat-300000.jsonl"
)
# An answer of the emulator's usual length (the fixture's is a few words).
OUTPUT_TEXT = (
    "Emulated answer from relay-chat-small: meteor willow pepper lantern pepper meteor quartz "
    "thistle. You said: row {n}: say something short"
)


def layout1_store(path: Path, items: int) -> None:
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.executescript(FIXTURE.read_text(encoding="utf-8"))
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("begin")
        fixture_items = connection.execute("select max(rowid) from items").fetchone()[0]
        template = connection.execute(
            "select rowid from items where state = 'done' order by rowid limit 1"
        ).fetchone()[0]
        names = [row[1] for row in connection.execute("pragma table_info(items)")]
        replaced = {
            "key": "printf('%032x', n.value)",
            "item_id": "'r' || n.value",
            "request": "replace(request, 'row 0:', 'row ' || n.value || ':')",
            "carry": "json_object('id', 'r' || n.value)",
            "source": f"'{DATA_FILE}:' || (n.value + 1)",
            "result": f"json_set(result, '$.output_text', replace('{OUTPUT_TEXT}', '{{n}}', n.value))",
            "finished_at": (
                "strftime('%Y-%m-%dT%H:%M:%f', 1795483617 + n.value / 1000.0, 'unixepoch') || '+00:00'"
            ),
        }
        values = ", ".join(replaced.get(name, name) for name in names)
        connection.execute(
            "with recursive n(value) as (select 1000 union all select value + 1 from n where value < ?) "
            f"insert into items ({', '.join(names)}) select {values} from items, n where items.rowid = ?",
            [1000 + items - 1, template],
        )
        connection.execute(
            "insert into events (item, state, detail, at) select i.rowid, s.state, null, 1795483617000 "
            "from items i, (select 'sending' as state union all select 'done') s where i.rowid > ? "
            "order by i.rowid, s.state desc",
            [fixture_items],
        )
        connection.execute("commit")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="relaybatch-migration-") as folder:
        path = Path(folder) / "checkpoint.sqlite"
        layout1_store(path, args.items)
        total = args.items + 5  # the fixture's own items
        before = path.stat().st_size
        wall, cpu = time.perf_counter(), time.process_time()
        CheckpointStore(path).close()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        after = sum(side.stat().st_size for side in Path(folder).glob("checkpoint.sqlite*"))
        with sqlite3.connect(path) as connection:
            converted = connection.execute(
                "select count(*) from items where typeof(finished_at) = 'integer' and source_line is not null"
            ).fetchone()[0]
            page_size = connection.execute("pragma page_size").fetchone()[0]
        per_item = cpu / total * 1e6
        print(f"{total:,} items ({converted:,} with a time and a line converted)")
        print(f"migration: {wall:.2f} s wall, {cpu:.2f} s CPU ({per_item:.1f} us per item)")
        ratio = after / before
        print(
            f"checkpoint.sqlite: {before / total:,.0f} -> {after / total:,.0f} bytes per item "
            f"({ratio:.2f}x), {page_size:,}-byte pages after"
        )


if __name__ == "__main__":
    main()

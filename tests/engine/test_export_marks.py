"""Results of an unchanged store are kept: each file carries its store's change mark, and anything
that changes what the export reads makes the next export write it again (the ledger's twin test is
in tests/costs/test_costs_ledger_store.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from engine_items import chat

from relaybatch.engine import CheckpointStore, export_results


def written(path: Path) -> int:
    """The file's inode: a rewrite (temporary name, then rename) gives it a new one."""
    return path.stat().st_ino


def test_results_of_an_unchanged_store_are_not_written_again(store: CheckpointStore, tmp_path: Path) -> None:
    store.save_run("run")
    store.add_items([chat(1), chat(2), chat(3, job="other")])
    store.transition(chat(1).key, "sending")
    store.transition(chat(1).key, "done", result={"output_text": "one"})
    results = tmp_path / "results"
    first = export_results(store, results)
    inodes = [written(path) for path in first]

    store.record_run_event("limiter", {"rpm": 1200})  # run events change no item
    store.record_start()
    again = export_results(store, results)

    assert again == first and [written(path) for path in again] == inodes
    store.transition(chat(2).key, "sending")  # any state change: both files are written again
    changed = export_results(store, results)
    assert changed == first and all(
        written(path) != inode for path, inode in zip(changed, inodes, strict=True)
    )
    assert pq.read_table(changed[0]).column("state").to_pylist() == ["done", "sending"]


def test_new_items_a_removed_file_or_a_foreign_file_are_written_again(
    store: CheckpointStore, tmp_path: Path
) -> None:
    store.add_items([chat(1)])
    results = tmp_path / "results"
    [path] = export_results(store, results)

    store.add_items([chat(2)])  # an item added: no event, a higher rowid
    [path] = export_results(store, results)
    assert pq.read_table(path).num_rows == 2

    path.unlink()
    assert export_results(store, results) == [path] and path.exists()

    pq.write_table(pa.table({"item_id": ["stale"]}), path)  # no mark: a file from elsewhere
    [path] = export_results(store, results)
    assert pq.read_table(path).column("item_id").to_pylist() == ["chat-1", "chat-2"]


def test_a_fold_of_another_store_makes_the_export_write_again(store: CheckpointStore, tmp_path: Path) -> None:
    store.add_items([chat(1)])
    results = tmp_path / "results"
    [path] = export_results(store, results)
    other = CheckpointStore(tmp_path / "shard" / "checkpoint.sqlite")
    other.add_items([chat(1)])
    other.transition(chat(1).key, "sending")
    other.transition(chat(1).key, "done", result={"output_text": "from the shard"})
    other.close()

    assert store.absorb(tmp_path / "shard" / "checkpoint.sqlite") == 1  # an update: no item event here
    [path] = export_results(store, results)

    assert pq.read_table(path).column("output_text").to_pylist() == ["from the shard"]


def test_a_store_made_afresh_never_matches_an_old_export(tmp_path: Path) -> None:
    def fresh_store_with_one_done_item(answer: str) -> CheckpointStore:
        (tmp_path / "run" / "checkpoint.sqlite").unlink(missing_ok=True)
        store = CheckpointStore(tmp_path / "run" / "checkpoint.sqlite")
        store.save_run("run")
        store.add_items([chat(1)])
        store.transition(chat(1).key, "sending")
        store.transition(chat(1).key, "done", result={"output_text": answer})
        return store

    store = fresh_store_with_one_done_item("first")
    export_results(store, tmp_path / "results")
    store.close()
    store = fresh_store_with_one_done_item("second")  # the same events and rowids, another store
    [path] = export_results(store, tmp_path / "results")
    store.close()

    assert pq.read_table(path).column("output_text").to_pylist() == ["second"]


def test_a_rewrite_trusts_no_mark(store: CheckpointStore, tmp_path: Path) -> None:
    store.add_items([chat(1)])
    [path] = export_results(store, tmp_path / "results")
    inode = written(path)
    # A rebuild the user asked for (`relaybatch export`): said by the caller, for this call alone.
    assert export_results(store, tmp_path / "results", rewrite=True) == [path]
    assert written(path) != inode
    inode = written(path)
    assert export_results(store, tmp_path / "results") == [path] and written(path) == inode

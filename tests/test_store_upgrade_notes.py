"""A store kept in an older layout is migrated on the first open for writing, which takes about
half a minute per million items: `relaybatch run` says so before it starts, once."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from relaybatch.costs import CostStore
from relaybatch.engine import CheckpointStore
from relaybatch.run.assemble import upgrade_notes
from relaybatch.run_folder import RunPaths

FIXTURES = Path(__file__).parent
CHECKPOINT_LAYOUT1 = FIXTURES / "engine" / "fixtures" / "checkpoint_layout1.sql"
COSTS_LAYOUT0 = FIXTURES / "costs" / "fixtures" / "costs_layout0.sql"


def from_sql(path: Path, sql: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path)
    connection.executescript(sql.read_text(encoding="utf-8"))
    connection.close()


def test_old_stores_are_named_before_their_migration_and_not_after(tmp_path: Path) -> None:
    paths = RunPaths.for_run(tmp_path / "runs", "old-run")
    from_sql(paths.checkpoint, CHECKPOINT_LAYOUT1)
    from_sql(paths.cost_store, COSTS_LAYOUT0)
    with CheckpointStore.open_read_only(paths.checkpoint) as store:
        items = sum(store.count_by_state().values())

    notes = upgrade_notes(paths)

    assert len(notes) == 2
    assert notes[0].startswith(f"the checkpoint store of {items:,} items is upgraded from layout 1 to ")
    assert notes[1].startswith("the cost store is upgraded from layout 0 to ")
    CheckpointStore(paths.checkpoint).close()  # the first opens for writing migrate them
    CostStore(paths.cost_store).close()
    assert upgrade_notes(paths) == []


def test_a_new_run_or_a_current_one_has_nothing_to_say(tmp_path: Path) -> None:
    paths = RunPaths.for_run(tmp_path / "runs", "new-run")
    assert upgrade_notes(paths) == []  # nothing there yet: nothing is created either
    assert not paths.root.exists() or not any(paths.root.iterdir())

    CheckpointStore(paths.checkpoint).close()
    CostStore(paths.cost_store).close()
    assert upgrade_notes(paths) == []

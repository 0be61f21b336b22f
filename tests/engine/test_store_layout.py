"""The checkpoint store's compact layout, and stores written before it (layout 0) still working.

The layout-0 store is built from ``fixtures/checkpoint_layout0.sql``: the DDL and rows as the
earlier relaybatch wrote them (events keyed by the item's text key, with ISO text times; items
with ``created_at``/``updated_at`` and results carrying ``tokens`` beside ``usage``).
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from engine_items import chat

from relaybatch.engine import Change, CheckpointStore, IllegalTransition, export_results
from relaybatch.engine.normalize import chat_result, result_tokens
from relaybatch.engine.store import (
    MIGRATIONS,
    PAGE_SIZE,
    SCHEMA_VERSION,
    join_source,
    source_sql,
    split_source,
)
from relaybatch.manifests import Item

FIXTURE = Path(__file__).parent / "fixtures" / "checkpoint_layout0.sql"


def store_from_fixture(folder: Path, fixture: Path) -> Path:
    """``folder/run/checkpoint.sqlite`` made by a fixture's SQL (an older layout's DDL and rows)."""
    path = folder / "run" / "checkpoint.sqlite"
    path.parent.mkdir(parents=True)
    connection = sqlite3.connect(path)
    connection.executescript(fixture.read_text(encoding="utf-8"))
    connection.close()
    return path


def layout0_store(folder: Path) -> Path:
    return store_from_fixture(folder, FIXTURE)


def columns(path: Path, table: str) -> set[str]:
    connection = sqlite3.connect(path)
    try:
        return {row[1] for row in connection.execute(f"pragma table_info({table})")}
    finally:
        connection.close()


def user_version(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        return int(connection.execute("pragma user_version").fetchone()[0])
    finally:
        connection.close()


def test_a_layout0_store_reads_the_same_before_and_after_its_migration(tmp_path: Path) -> None:
    path = layout0_store(tmp_path)
    with CheckpointStore.open_read_only(path) as old:  # a reader never migrates
        events_before = list(old.iter_events())
        done_key = old.keys_in_state("done")[0]
        item_events_before = old.events(done_key)
        counts_before = old.count_by_state()
    assert user_version(path) == 0 and "key" in columns(path, "events")
    states = ["limiter", "sending", "done", "sending", "done", "sending"]
    assert [event["state"] for event in events_before] == states

    with CheckpointStore(path) as store:  # opened for writing: migrated
        assert list(store.iter_events()) == events_before
        assert store.events(done_key) == item_events_before
        assert store.count_by_state() == counts_before

    assert user_version(path) == SCHEMA_VERSION
    assert columns(path, "events") == {"id", "item", "state", "detail", "at"}
    with CheckpointStore.open_read_only(path) as reader:
        assert list(reader.iter_events()) == events_before
        assert events_before[0]["key"] == "" and events_before[1]["kind"] == "chat"


def test_a_migrated_store_goes_on_running(tmp_path: Path) -> None:
    path = layout0_store(tmp_path)
    with CheckpointStore(path) as store:
        pending, sending = store.keys_in_state("pending")[0], store.keys_in_state("sending")[0]
        answer = {"model": "m", "choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 3}}
        store.apply(
            [
                Change(pending, "sending", {"attempts": 1}),
                Change(sending, "done", {"result": chat_result(answer)}),
            ]
        )
        assert [event["state"] for event in store.events(sending)] == ["sending", "done"]
        assert [event["state"] for event in store.events(pending)] == ["sending"]
        assert store.item(sending)["result"]["usage"] == {"prompt_tokens": 3}
        # the old results keep their stored token counts; the item times went with the migration
        done = next(store.iter_items(states=["done"], columns=["key", "result"]))
        assert done["result"]["tokens"]["output_tokens"] == 34
        assert "tokens" not in store.item(sending)["result"]
    assert "created_at" not in columns(path, "items") and "updated_at" not in columns(path, "items")


def test_stored_tokens_and_tokens_read_from_usage_agree(tmp_path: Path) -> None:
    """Results written before kept ``tokens`` beside ``usage``: reading them from the usage gives
    the same counts (the results' token columns do not change meaning with the layout)."""
    with CheckpointStore.open_read_only(layout0_store(tmp_path)) as old:
        results = [row["result"] for row in old.iter_items(states=["done"], columns=["result"])]
    assert len(results) == 2
    for result in results:
        stored = result.pop("tokens")
        assert result_tokens("chat", result) == stored
        assert stored["input_tokens"] == result["usage"]["prompt_tokens"]


def test_a_new_store_keeps_each_fact_once(store: CheckpointStore) -> None:
    store.add_items([chat(1), chat(2), chat(3)])
    answer = {
        "model": "relay-chat-small",
        "choices": [{"message": {"content": "hello"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
    }
    store.apply([Change(chat(n).key, "sending", {"attempts": 1}) for n in (1, 2, 3)])
    store.apply([Change(chat(n).key, "done", {"result": chat_result(answer)}) for n in (1, 2, 3)])
    store.record_run_event("limiter", {"rpm": 60})

    assert not {"created_at", "updated_at"} & columns(store.path, "items")
    connection = sqlite3.connect(store.path)
    try:
        result_text, request_text = connection.execute(
            "select result, request from items where key = ?", [chat(1).key]
        ).fetchone()
        stored_events = connection.execute("select item, state, typeof(at) from events").fetchall()
        rowid = connection.execute("select rowid from items where key = ?", [chat(2).key]).fetchone()[0]
    finally:
        connection.close()
    assert ", " not in result_text and ": " not in result_text and ", " not in request_text
    assert "tokens" not in json.loads(result_text)
    assert "tool_calls" not in json.loads(result_text)  # null: not written; .get() reads None
    assert store.item(chat(1).key)["result"].get("tool_calls") is None
    assert (rowid, "done", "integer") in stored_events and (None, "limiter", "integer") in stored_events
    events = list(store.iter_events())
    assert events[-1]["key"] == "" and events[0]["key"] == chat(1).key and events[0]["kind"] == "chat"
    assert all(len(event["at"]) == len("2026-11-24T01:26:57.973+00:00") for event in events)
    assert events[0]["at"].endswith("+00:00")
    assert result_tokens("chat", store.item(chat(1).key)["result"]) == {
        "input_tokens": 7,
        "output_tokens": 2,
        "cached_tokens": 0,
        "reasoning_tokens": 0,
    }


@pytest.mark.parametrize("group", [2, 4], ids=["row by row", "one JSON-array update"])
def test_an_illegal_move_beside_a_legal_one_to_the_same_state_is_named(
    store: CheckpointStore, group: int
) -> None:
    """Nothing in the row tells which of the items moved to 'sending' was refused: the store names
    the one the state machine forbids (a done item sent again), from the states as they were before
    the group."""
    store.add_items([chat(n) for n in range(1, 5)])
    store.transition(chat(2).key, "sending")
    store.transition(chat(2).key, "done")
    keys = [chat(n).key for n in (1, 2, 3, 4)][:group]

    with pytest.raises(IllegalTransition, match="from 'done' to 'sending'") as raised:
        store.apply([Change(key, "sending") for key in keys])

    assert raised.value.key == chat(2).key
    assert store.count_by_state() == {"pending": 3, "done": 1}
    assert [event["state"] for event in store.events(chat(1).key)] == []


def test_a_layout0_shard_store_is_absorbed_by_a_new_one(tmp_path: Path, store: CheckpointStore) -> None:
    """Merging reads the other store's items by the columns both stores have."""
    shard = tmp_path / "shard"
    shard.mkdir()
    other = layout0_store(shard)

    assert store.absorb(other) == 4
    assert store.count_by_state() == {"done": 2, "pending": 1, "sending": 1}
    done = next(store.iter_items(states=["done"], columns=["result"]))
    assert done["result"]["tokens"]["input_tokens"] == 10
    assert store.run_name() == "chat-20000"


# -- layout 1 to 2: each data file's path once, times as integer milliseconds ------------------

FIXTURE_1 = Path(__file__).parent / "fixtures" / "checkpoint_layout1.sql"


def layout1_store(folder: Path) -> Path:
    return store_from_fixture(folder, FIXTURE_1)


def everything(store: CheckpointStore) -> tuple[list[dict], list[dict], dict]:
    """What readers see of a store: every item (all columns), every event, one item by key."""
    items = list(store.iter_items())
    return items, list(store.iter_events()), store.item(items[-1]["key"])


def exported(store: CheckpointStore, folder: Path) -> dict[str, list[dict]]:
    return {path.name: pq.read_table(path).to_pylist() for path in export_results(store, folder)}


def test_a_layout1_store_reads_the_same_before_and_after_its_migration(tmp_path: Path) -> None:
    path = layout1_store(tmp_path)
    with CheckpointStore.open_read_only(path) as old:  # a reader never migrates
        items_before, events_before, one_before = everything(old)
        results_before = exported(old, tmp_path / "before")
    assert user_version(path) == 1 and "source" in columns(path, "items")
    assert [item["source"] for item in items_before] == [
        "/data/chat.jsonl:1",
        "/data/chat.jsonl:2",
        "/data/chat.jsonl:3",
        "/data/chat.jsonl:4",
        "/data/clips.csv:2",
    ]
    assert items_before[0]["finished_at"] == "2026-11-24T01:26:57.906+00:00"

    with CheckpointStore(path) as store:  # opened for writing: migrated
        times = [(item["submitted_at"], item["finished_at"]) for item in store.iter_items()]
        assert times[0] == (None, 1795483617906)  # 2026-11-24T01:26:57.906+00:00 in milliseconds
        assert times[4] == (1795483618001, None)
        assert store.item(items_before[0]["key"])["source"] == "/data/chat.jsonl:1"

    assert user_version(path) == SCHEMA_VERSION == 3
    assert {"source_file", "source_line"} <= columns(path, "items") and "source" not in columns(path, "items")
    connection = sqlite3.connect(path)
    try:
        files = connection.execute("select id, path from source_files order by id").fetchall()
        stored = connection.execute(
            "select source_file, source_line, typeof(finished_at), job from items order by rowid"
        ).fetchall()
        jobs = connection.execute("select id, name from jobs order by id").fetchall()
        indexes = {
            row[0] for row in connection.execute("select name from sqlite_schema where type = 'index'")
        }
        free_pages = connection.execute("pragma freelist_count").fetchone()[0]  # the old table's: vacuumed
    finally:
        connection.close()
    assert files == [(1, "/data/chat.jsonl"), (2, "/data/clips.csv")]
    assert stored == [
        (1, 1, "integer", 1),
        (1, 2, "integer", 1),
        (1, 3, "null", 1),
        (1, 4, "integer", 1),
        (2, 2, "null", 2),
    ]
    assert jobs == [(1, "chat-20000"), (2, "clips")]
    assert {"idx_items_state", "idx_items_job_state"} <= indexes and free_pages == 0

    with CheckpointStore.open_read_only(path) as reader:
        items_after, events_after, one_after = everything(reader)
        results_after = exported(reader, tmp_path / "after")
    for item in items_before:  # the times are the same moments, now as integer milliseconds
        for name in ("submitted_at", "finished_at"):
            if item[name] is not None:
                item[name] = int(datetime.fromisoformat(item[name]).timestamp() * 1000)
    one_before = next(item for item in items_before if item["key"] == one_before["key"])
    assert (items_after, events_after, one_after) == (items_before, events_before, one_before)
    assert results_after == results_before
    assert results_before["chat-20000.parquet"][0]["finished_at"] == datetime(
        2026, 11, 24, 1, 26, 57, 906000, UTC
    )


def test_a_migrated_layout1_store_plans_and_runs_on(tmp_path: Path) -> None:
    """Planning compares an item's source with the manifest's; a moved data file is noted (the
    items keep their state), and new items of a new file get its id."""
    path = layout1_store(tmp_path)
    with CheckpointStore(path) as store:
        planned = {
            item["key"]: item
            for item in store.iter_items(
                columns=["key", "item_id", "job", "kind", "request", "carry", "source"]
            )
        }
        moved = [
            Item.build(
                item_id=item["item_id"],
                job=item["job"],
                kind=item["kind"],
                request=item["request"],
                carry=item["carry"],
                source=item["source"].replace("/data/", "/elsewhere/"),
            )
            for item in planned.values()
        ]
        new = chat(7).model_copy(update={"source": "/data/more.jsonl:1"})
        counts = store.plan_items([*moved, new])
        assert (counts.added, counts.superseded) == (1, 0)
        sources = {
            item["key"]: item["source"] for item in store.iter_items(columns=["key", "source", "state"])
        }
        assert sources[new.key] == "/data/more.jsonl:1"
        assert {sources[key] for key in planned} == {f"/elsewhere/chat.jsonl:{n}" for n in (1, 2, 3, 4)} | {
            "/elsewhere/clips.csv:2"
        }
        assert store.count_by_state() == {"done": 2, "pending": 2, "failed": 1, "submitted": 1}
        store.apply([Change(new.key, "sending", {"attempts": 1})])
        store.apply([Change(new.key, "done", {"finished_at": "2026-11-24T05:00:00.250+00:00"})])
        assert store.item(new.key)["finished_at"] == 1795496400250


@pytest.mark.parametrize(
    "source",
    [
        "/data/chat.jsonl:1",
        "/data/chat.jsonl:0",
        "C:/data/a:b.csv:12",
        "notes.csv",
        "notes.csv:",
        "notes.csv:007",
        "notes.csv:12a",
        ":3",
        "",
        "a:99999999999999999999",
        "a:123456789012345678",
        "a:1234567890123456789",
        "a:١٢",
        "manifest.yaml:jobs[0]",
    ],
)
def test_a_source_text_comes_back_exactly_from_python_and_from_sql(tmp_path: Path, source: str) -> None:
    """New items are split in Python, old stores' text in SQL (migration, absorb): both agree, and
    the reader's "path:line" is the text the item was planned with."""
    path, line = split_source(source)
    assert join_source(path, line) == source
    connection = sqlite3.connect(":memory:")
    try:
        assert connection.execute(
            f"select {source_sql('?1', 'path')}, {source_sql('?1', 'line')}", [source]
        ).fetchone() == (path, line)
    finally:
        connection.close()


def test_a_store_keeps_each_data_file_path_once(store: CheckpointStore) -> None:
    items = [chat(n).model_copy(update={"source": f"/a/long/folder/chat.jsonl:{n + 1}"}) for n in range(5)]
    items.append(chat(9).model_copy(update={"source": "inline"}))
    store.add_items(items)
    connection = sqlite3.connect(store.path)
    try:
        files = connection.execute("select path from source_files order by id").fetchall()
        lines = connection.execute("select source_file, source_line from items order by rowid").fetchall()
    finally:
        connection.close()
    assert files == [("/a/long/folder/chat.jsonl",), ("inline",)]
    assert lines == [(1, 1), (1, 2), (1, 3), (1, 4), (1, 5), (2, None)]
    assert [row["source"] for row in store.iter_items(columns=["source"])] == [item.source for item in items]
    assert store.item(items[2].key)["source"] == "/a/long/folder/chat.jsonl:3"


def test_times_are_kept_as_milliseconds_and_text_that_is_not_a_time_as_it_is(
    tmp_path: Path, store: CheckpointStore
) -> None:
    store.add_items([chat(1), chat(2), chat(3)])
    store.apply([Change(chat(n).key, "sending") for n in (1, 2, 3)])
    store.apply(
        [
            Change(chat(1).key, "done", {"finished_at": 1795483617906}),
            Change(chat(2).key, "done", {"finished_at": "2026-11-24T01:26:57.906"}),  # naive: UTC
            Change(chat(3).key, "done", {"finished_at": "yesterday"}),
        ]
    )
    assert [row["finished_at"] for row in store.iter_items(columns=["finished_at"])] == [
        1795483617906,
        1795483617906,
        "yesterday",
    ]
    [path] = export_results(store, tmp_path / "results")
    moment = datetime(2026, 11, 24, 1, 26, 57, 906000, UTC)
    assert pq.read_table(path).column("finished_at").to_pylist() == [moment, moment, None]


@pytest.mark.parametrize("layout", [1, 2, 3])
def test_a_shard_store_of_any_layout_is_absorbed_with_its_sources_times_and_jobs(
    tmp_path: Path, store: CheckpointStore, layout: int
) -> None:
    # file id 1 and job id 1 here are another file's and another job's
    store.add_items([chat(1, job="first").model_copy(update={"source": "/data/first.jsonl:1"})])
    shard = tmp_path / "shard"
    shard.mkdir()
    other = layout2_store(shard) if layout == 2 else layout1_store(shard)
    if layout == 3:
        CheckpointStore(other).close()  # migrated: its files' and jobs' ids are its own
    with CheckpointStore.open_read_only(other) as reader:
        theirs = {item["key"]: item for item in reader.iter_items()}

    assert store.absorb(other) == 5
    ours = {item["key"]: item for item in store.iter_items() if item["key"] in theirs}
    assert {key: item["source"] for key, item in ours.items()} == {
        key: item["source"] for key, item in theirs.items()
    }
    finished = {key: item["finished_at"] for key, item in ours.items() if item["finished_at"] is not None}
    assert sorted(finished.values()) == [1795483617906, 1795483617916, 1795483618123]
    assert store.item(chat(1, job="first").key)["source"] == "/data/first.jsonl:1"
    assert {key: item["job"] for key, item in ours.items()} == {
        key: item["job"] for key, item in theirs.items()
    }
    assert store.count_by_job_and_state() == {
        "first": {"pending": 1},
        "chat-20000": {"done": 2, "pending": 1, "failed": 1},
        "clips": {"submitted": 1},
    }


# -- layout 2 to 3: each job's name once ---------------------------------------------------------

FIXTURE_2 = Path(__file__).parent / "fixtures" / "checkpoint_layout2.sql"


def layout2_store(folder: Path) -> Path:
    return store_from_fixture(folder, FIXTURE_2)


def job_views(store: CheckpointStore) -> dict[str, object]:
    """Every reader that names or filters by job."""
    return {
        "by job and state": store.count_by_job_and_state(),
        "jobs": store.jobs(),
        "calls": sorted(store.calls()),
        "calls done": sorted(store.calls(["done"])),
        "chat items": [item["key"] for item in store.iter_items("chat-20000", ["done", "pending"])],
        "clips items": [item["job"] for item in store.iter_current_items("clips", ["job", "key"])],
        "profile": list(store.export_profile("clips")),
        "pending page": [(row.key, row.job) for row in store.work_page("pending", 0, 10)],
        "pending outside chat": store.work_page("pending", 0, 10, skip_jobs=["chat-20000"]),
        "has pending outside clips": store.has_state("pending", skip_jobs=["clips"]),
        "has pending outside chat": store.has_state("pending", skip_jobs=["chat-20000"]),
        "submitted page outside chat": [
            row.job for row in store.work_page("submitted", 0, 10, skip_jobs=["chat-20000"])
        ],
        "noted": store.done_with_note("", 5),
    }


def test_a_layout2_store_reads_the_same_before_and_after_its_migration(tmp_path: Path) -> None:
    path = layout2_store(tmp_path)
    with CheckpointStore.open_read_only(path) as old:
        before = (*everything(old), job_views(old))
        results_before = exported(old, tmp_path / "before")
    assert user_version(path) == 2 and before[3]["jobs"] == ["chat-20000", "clips"]
    assert before[3]["pending page"] and not before[3]["pending outside chat"]

    CheckpointStore(path).close()  # opened for writing: migrated

    assert user_version(path) == SCHEMA_VERSION == 3
    connection = sqlite3.connect(path)
    try:
        jobs = connection.execute("select typeof(job), count(*) from items group by 1").fetchall()
        names = connection.execute("select id, name from jobs order by id").fetchall()
    finally:
        connection.close()
    assert jobs == [("integer", 5)] and names == [(1, "chat-20000"), (2, "clips")]
    with CheckpointStore.open_read_only(path) as reader:
        after = (*everything(reader), job_views(reader))
        results_after = exported(reader, tmp_path / "after")
    assert after == before
    assert results_after == results_before


def test_a_new_store_keeps_each_job_name_once(store: CheckpointStore) -> None:
    store.add_items([chat(1, job="alpha"), chat(2, job="beta"), chat(3, job="alpha")])
    store.plan_items([chat(1, job="alpha"), chat(3, job="alpha"), chat(4, job="gamma")])
    connection = sqlite3.connect(store.path)
    try:
        rows = connection.execute("select job from items order by rowid").fetchall()
        names = connection.execute("select id, name from jobs order by id").fetchall()
    finally:
        connection.close()
    assert rows == [(1,), (2,), (1,), (3,)] and names == [(1, "alpha"), (2, "beta"), (3, "gamma")]
    assert store.jobs() == ["alpha", "gamma"]  # beta's item is superseded
    assert store.count_by_job_and_state() == {
        "alpha": {"pending": 2},
        "beta": {"superseded": 1},
        "gamma": {"pending": 1},
    }
    assert [row.job for row in store.work_page("pending", 0, 10, skip_jobs=["alpha"])] == ["gamma"]
    assert store.item(chat(4, job="gamma").key)["job"] == "gamma"
    assert [item["item_id"] for item in store.iter_current_items("alpha")] == ["chat-1", "chat-3"]
    assert sorted(store.calls()) == [
        ("alpha", "chat", "relay-chat-small"),
        ("beta", "chat", "relay-chat-small"),
        ("gamma", "chat", "relay-chat-small"),
    ]


def test_a_new_store_has_larger_pages_and_a_migrated_one_gets_them_when_nobody_reads_it(
    tmp_path: Path, store: CheckpointStore
) -> None:
    """8 KiB pages leave less free space beside rows that grow when their answer is written. A
    migration's VACUUM gives an old store the same pages (it leaves WAL mode for it, where the
    page size is fixed, and comes back); a reader having the file open keeps the old page size, and
    either store works the same, in WAL mode."""

    def pragma(path: Path, name: str) -> object:
        connection = sqlite3.connect(path)
        try:
            return connection.execute(f"pragma {name}").fetchone()[0]
        finally:
            connection.close()

    store.add_items([chat(1)])
    assert pragma(store.path, "page_size") == PAGE_SIZE == 8192
    for layout in (0, 1, 2):
        alone, read = (wal_store_from_fixture(tmp_path / f"{layout}-{name}", layout) for name in ("a", "r"))
        assert pragma(alone, "page_size") == pragma(read, "page_size") == 4096
        with CheckpointStore.open_read_only(read) as reader, CheckpointStore(read) as migrated:
            assert reader.count_by_state() == migrated.count_by_state()
        CheckpointStore(alone).close()
        assert (pragma(alone, "page_size"), pragma(read, "page_size")) == (PAGE_SIZE, 4096)
        assert pragma(alone, "journal_mode") == pragma(read, "journal_mode") == "wal"
        with CheckpointStore.open_read_only(alone) as resized, CheckpointStore.open_read_only(read) as kept:
            assert figures(resized) == figures(kept)
        with CheckpointStore(alone) as migrated:
            before = migrated.count_by_state()
            migrated.add_items([chat(2)])
            assert migrated.count_by_state() == before | {"pending": before.get("pending", 0) + 1}


def wal_store_from_fixture(folder: Path, layout: int) -> Path:
    """An older layout's store in WAL mode, as relaybatch always left its stores."""
    path = store_from_fixture(folder, FIXTURE.with_name(f"checkpoint_layout{layout}.sql"))
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.close()
    return path


def figures(reader: CheckpointStore) -> tuple[object, ...]:
    """What `relaybatch status` and the reports read of a store."""
    return (
        reader.count_by_job_and_state(),
        reader.jobs(),
        [(row["job"], row["source"], row["state"]) for row in reader.iter_items()],
        list(reader.iter_events()),
        reader.failure_reasons(),
    )


@pytest.mark.parametrize("layout", [0, 1, 2])
def test_a_reader_open_while_another_handle_migrates_reads_the_store_as_it_opened_it(
    tmp_path: Path, layout: int
) -> None:
    """`relaybatch status` opened on an old store while a `relaybatch run` opens it for writing:
    the reader's queries follow the layout it saw, so it keeps reading that layout's snapshot (was:
    "no such column: e.key", items without a source, job ids shown as names)."""
    path = wal_store_from_fixture(tmp_path, layout)
    with CheckpointStore.open_read_only(path) as reader:
        before = figures(reader)
        with CheckpointStore(path) as writer:  # migrates, beside the reader, without waiting for it
            assert writer.layout() == SCHEMA_VERSION
            migrated = figures(writer)
        assert figures(reader) == before
    assert user_version(path) == SCHEMA_VERSION
    with CheckpointStore.open_read_only(path) as fresh:
        assert figures(fresh) == before == migrated


def test_a_reader_of_the_current_layout_sees_each_new_write(store: CheckpointStore) -> None:
    """Only an old layout's reader keeps a snapshot: a reader beside a running execution follows it."""
    store.add_items([chat(1)])
    with CheckpointStore.open_read_only(store.path) as reader:
        assert reader.count_by_state() == {"pending": 1}
        store.add_items([chat(2)])
        assert reader.count_by_state() == {"pending": 2}


def test_the_migrations_are_named_one_per_layout_and_say_what_they_changed() -> None:
    # sqlite-utils style: a list that can be read (python -m relaybatch.engine.store.migrations).
    assert [migration.version for migration in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))
    assert len({migration.name for migration in MIGRATIONS}) == len(MIGRATIONS)
    assert all(migration.name.isidentifier() and migration.changed for migration in MIGRATIONS)

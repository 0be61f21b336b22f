"""The checkpoint store's compact layout, and stores written before it (layout 0) still working.

The layout-0 store is built from ``fixtures/checkpoint_layout0.sql``: the DDL and rows as the
earlier relaybatch wrote them (events keyed by the item's text key, with ISO text times; items
with ``created_at``/``updated_at`` and results carrying ``tokens`` beside ``usage``).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from engine_items import chat

from relaybatch.engine import Change, CheckpointStore, IllegalTransition
from relaybatch.engine.normalize import chat_result, result_tokens
from relaybatch.engine.store import SCHEMA_VERSION

FIXTURE = Path(__file__).parent / "fixtures" / "checkpoint_layout0.sql"


def layout0_store(folder: Path) -> Path:
    path = folder / "run" / "checkpoint.sqlite"
    path.parent.mkdir()
    connection = sqlite3.connect(path)
    connection.executescript(FIXTURE.read_text(encoding="utf-8"))
    connection.close()
    return path


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
    """Nothing in the row tells which of two items now 'sending' was skipped: the store names the
    one the state machine forbids, from the states as they were before the group."""
    store.add_items([chat(n) for n in range(1, 5)])
    store.transition(chat(2).key, "sending")
    keys = [chat(n).key for n in (1, 2, 3, 4)][:group]

    with pytest.raises(IllegalTransition, match="from 'sending' to 'sending'") as raised:
        store.apply([Change(key, "sending") for key in keys])

    assert raised.value.key == chat(2).key
    assert store.count_by_state() == {"pending": 3, "sending": 1}
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

"""The checkpoint store: items in once, changes committed with their events, run and price rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from engine_items import chat, item

from relaybatch.engine import Change, CheckpointStore
from relaybatch.engine.store import CACHE_KIB, SCAN_CACHE_KIB


def test_items_are_added_once_and_keep_their_state(store: CheckpointStore) -> None:
    assert store.add_items([chat(1), chat(2)]) == 2
    store.transition(chat(1).key, "sending", attempts=1)

    assert store.add_items([chat(1), chat(2), chat(3)]) == 1
    assert store.count_by_state() == {"pending": 2, "sending": 1}


def test_a_group_of_changes_is_one_transaction_with_one_event_each(store: CheckpointStore) -> None:
    store.add_items([chat(1), chat(2)])
    store.transition(chat(2).key, "sending")

    store.apply(
        [
            Change(chat(1).key, "sending", {"attempts": 1}),
            Change(chat(2).key, "failed", {"last_error": "400 bad"}, "400 bad"),
        ]
    )

    assert [e["state"] for e in store.events(chat(1).key)] == ["sending"]
    assert store.events(chat(2).key)[1]["detail"] == "400 bad"
    assert store.item(chat(1).key)["attempts"] == 1


def test_a_change_to_an_unknown_column_is_refused_before_any_write(store: CheckpointStore) -> None:
    store.add_items([chat(1)])
    with pytest.raises(ValueError, match="request"):
        store.apply([Change(chat(1).key, "done"), Change(chat(1).key, "done", {"request": "{}"})])
    assert store.count_by_state() == {"pending": 1}


def test_committed_changes_are_visible_to_another_connection(store: CheckpointStore) -> None:
    store.add_items([chat(1)])
    store.transition(chat(1).key, "sending", attempts=1)

    other = sqlite3.connect(store.path)
    try:
        assert other.execute("select state from items").fetchone() == ("sending",)
    finally:
        other.close()


def test_costs_are_kept_as_exact_decimal_text(store: CheckpointStore) -> None:
    from decimal import Decimal

    store.add_items([chat(1)])
    store.transition(chat(1).key, "sending")
    store.transition(chat(1).key, "done", cost_usd=Decimal("0.000000150000000001"))

    assert store.item(chat(1).key)["cost_usd"] == "0.000000150000000001"


def test_run_settings_stop_reason_and_price_snapshots(store: CheckpointStore) -> None:
    store.save_run("demo", {"uncertain_policy": "resend"})
    store.record_stop("402: top up")
    store.save_price_snapshot("relay-chat-small", {"text": {"prompt": "0.00000015"}})

    assert store.run_settings() == {"uncertain_policy": "resend"}
    assert store.stop_reason() == "402: top up"
    assert store.price_snapshot("relay-chat-small") == {"text": {"prompt": "0.00000015"}}
    assert store.price_snapshot("relay-chat-small", provider="beta") is None


def test_counts_per_job(store: CheckpointStore) -> None:
    store.add_items([chat(1, job="a"), chat(2, job="b"), chat(3, job="b")])
    store.transition(chat(2, job="b").key, "sending")

    assert store.count_by_job_and_state() == {"a": {"pending": 1}, "b": {"pending": 1, "sending": 1}}


def test_later_changes_to_the_same_item_in_one_group_win_in_order(store: CheckpointStore) -> None:
    """One group is applied as set-based updates; a key changed twice must end in its last state."""
    store.add_items([chat(1), chat(2)])

    store.apply(
        [
            Change(chat(1).key, "sending", {"attempts": 1}),
            Change(chat(2).key, "sending", {"attempts": 1}),
            Change(chat(1).key, "done", {"result": {"output_text": "a"}}),
            Change(chat(1).key, "superseded", {"last_error": "late"}, "late"),
        ]
    )

    assert [e["state"] for e in store.events(chat(1).key)] == ["sending", "done", "superseded"]
    first = store.item(chat(1).key)
    assert (first["state"], first["attempts"], first["last_error"]) == ("superseded", 1, "late")
    assert first["result"] == {"output_text": "a"}
    assert store.item(chat(2).key)["state"] == "sending"


def test_values_keep_their_types_and_text_through_a_group_write(store: CheckpointStore) -> None:
    store.add_items([chat(1), chat(2)])
    awkward = 'quote " backslash \\ newline \n tab \t unicode é ✓ \u0000 end'
    not_before = 1795305600.123456

    store.apply(
        [Change(chat(1).key, "sending", {"last_error": "first"}, awkward), Change(chat(2).key, "sending")]
    )
    store.transition(
        chat(1).key,
        "pending",
        last_error=awkward,
        not_before=not_before,
        attempts=3,
        remote_id=None,
        latency_ms=12.5,
        retryable=1,
    )

    item = store.item(chat(1).key)
    assert item["last_error"] == awkward
    assert item["not_before"] == not_before and isinstance(item["not_before"], float)
    assert item["attempts"] == 3 and isinstance(item["attempts"], int)
    assert item["remote_id"] is None and item["latency_ms"] == 12.5 and item["retryable"] == 1
    assert store.events(chat(1).key)[0]["detail"] == awkward
    assert store.item(chat(2).key)["state"] == "sending"


def test_adding_more_items_than_one_chunk_counts_only_new_ones(store: CheckpointStore) -> None:
    from relaybatch.engine.store import ADD_CHUNK_ROWS

    count = ADD_CHUNK_ROWS + 7
    assert store.add_items(chat(n) for n in range(count)) == count
    assert store.add_items(chat(n) for n in range(count - 2, count + 3)) == 3
    assert store.count_by_state() == {"pending": count + 3}
    first = next(store.iter_items())
    assert first["item_id"] == chat(0).item_id and first["request"] == chat(0).request


def test_an_item_id_with_a_nul_character_is_stored_whole(store: CheckpointStore) -> None:
    from engine_items import item

    odd = item("chat", {"model": "m", "messages": []}, "row\u00001")
    assert store.add_items([odd, chat(1)]) == 2
    assert store.item(odd.key)["item_id"] == "row\u00001"


def test_a_group_that_fails_half_way_leaves_nothing_behind(store: CheckpointStore) -> None:
    """The item updates run before the event rows; a failure in the last statement must undo them."""
    store.add_items([chat(1), chat(2)])
    store.transition(chat(2).key, "sending")
    store.db.execute(
        "create trigger refuse_boom before insert on events when new.detail = 'boom' "
        "begin select raise(abort, 'refused'); end"
    )

    with pytest.raises(sqlite3.IntegrityError, match="refused"):
        store.apply(
            [Change(chat(1).key, "sending", {"attempts": 1}), Change(chat(2).key, "failed", {}, "boom")]
        )

    assert store.count_by_state() == {"pending": 1, "sending": 1}
    assert store.events(chat(1).key) == []
    store.transition(chat(1).key, "sending", attempts=1)  # the connection is usable afterwards
    assert store.count_by_state() == {"sending": 2}


def test_an_illegal_move_raises_and_leaves_the_whole_group_unwritten(store: CheckpointStore) -> None:
    """The state machine is enforced where the write happens: done work can never be sent again."""
    from relaybatch.engine import IllegalTransition

    store.add_items([chat(1), chat(2), chat(3), chat(4)])
    store.transition(chat(1).key, "sending")
    store.transition(chat(1).key, "done")

    with pytest.raises(IllegalTransition, match="from 'done' to 'sending'") as raised:
        store.apply([Change(chat(n).key, "sending") for n in (2, 3, 1, 4)])  # one JSON-array update

    assert raised.value.key == chat(1).key
    assert store.count_by_state() == {"pending": 3, "done": 1}
    # (pending -> done is a reused answer since run.reuse: paid remote work never skips sending)
    with pytest.raises(IllegalTransition, match="from 'pending' to 'submitted'"):
        store.transition(chat(2).key, "submitted")  # one statement per row
    with pytest.raises(IllegalTransition, match="no such item"):
        store.transition("no-such-key", "sending")
    assert [e["state"] for e in store.events(chat(2).key)] == []


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        (["sending", "submitted", "polling", "polling", "done", "superseded", "done"], True),
        (["sending", "uncertain", "pending", "superseded", "pending"], True),
        (["sending", "failed", "pending", "sending", "pending"], True),
        (["sending", "submitted", "sending"], False),  # paid remote work is never created again
        (["sending", "submitted", "superseded"], False),  # nor abandoned while it runs
        (["sending", "sending"], False),  # a second claim (a re-ask counts an attempt: below)
        (["superseded", "sending"], False),
        (["sending", "done", "failed"], False),
    ],
)
def test_every_write_follows_the_state_table(store: CheckpointStore, path: list[str], allowed: bool) -> None:
    from relaybatch.engine import IllegalTransition

    store.add_items([chat(1)])
    *before, last = path
    for state in before:
        store.transition(chat(1).key, state)
    if allowed:
        store.transition(chat(1).key, last)
        assert store.item(chat(1).key)["state"] == last
    else:
        with pytest.raises(IllegalTransition):
            store.transition(chat(1).key, last)


def test_planning_supersedes_what_the_manifest_dropped_and_restores_what_it_brings_back(
    store: CheckpointStore,
) -> None:
    store.add_items([chat(1), chat(2), chat(3), chat(4)])
    for n, end in ((1, "done"), (2, "failed"), (3, "submitted")):
        store.transition(chat(n).key, "sending")
        store.transition(chat(n).key, end, **({"result": {"output_text": "a"}} if end == "done" else {}))

    counts = store.plan_items([chat(5)])

    # chat(3) is paid remote work still running: it finishes before it can be superseded
    assert (counts.added, counts.superseded, counts.restored) == (1, 3, 0)
    assert store.count_by_state() == {"superseded": 3, "submitted": 1, "pending": 1}
    assert store.jobs() == ["job"]

    counts = store.plan_items([chat(1), chat(4), chat(5)])

    assert (counts.added, counts.superseded, counts.restored) == (0, 0, 2)
    assert store.item(chat(1).key)["state"] == "done"  # its answer is still good
    assert store.item(chat(4).key)["state"] == "pending"
    assert [e["state"] for e in store.events(chat(1).key)] == ["sending", "done", "superseded", "done"]


def test_a_shard_skips_items_another_store_settled(store: CheckpointStore, tmp_path) -> None:
    other = CheckpointStore(tmp_path / "other" / "checkpoint.sqlite")
    other.add_items([chat(1), chat(2)])
    other.transition(chat(1).key, "sending")

    counts = store.plan_items([chat(1), chat(2)], skip=other.settled_keys)

    assert counts.added == 1 and store.count_by_state() == {"pending": 1}
    other.transition(chat(1).key, "done", result={"output_text": "a"})
    store.transition(chat(2).key, "sending")
    store.transition(chat(2).key, "done")
    other.close()

    assert store.absorb(tmp_path / "other" / "checkpoint.sqlite") == 1  # chat(2): ours is further
    assert store.count_by_state() == {"done": 2}


def test_status_says_when_the_last_execution_died(store: CheckpointStore) -> None:
    from relaybatch.run.status import last_execution_line

    store.record_start()
    assert "did not finish" in last_execution_line(store)
    store.record_stop("budget reached")
    assert "stopped early" in last_execution_line(store) and "budget reached" in last_execution_line(store)
    store.record_start()
    store.record_stop(None)
    assert last_execution_line(store).startswith("last execution finished")


def test_work_pages_and_the_pending_probe_skip_jobs_held_by_their_budget(store: CheckpointStore) -> None:
    store.add_items([chat(1, job="covers"), chat(2, job="answers"), chat(3, job="covers")])
    store.transition(chat(2, job="answers").key, "sending")

    page = store.work_page("pending", 0, 10, skip_jobs=["covers"])
    assert page == []
    assert [row.job for row in store.work_page("pending", 0, 10, skip_jobs=["answers"])] == ["covers"] * 2
    assert store.has_state("pending") and not store.has_state("pending", skip_jobs=["covers"])
    assert store.has_state("sending", skip_jobs=["covers"])


def test_items_of_several_states_come_in_rowid_order_without_a_sort(store: CheckpointStore) -> None:
    store.add_items([chat(n) for n in range(1, 9)])
    for n in (2, 5, 7):
        store.transition(chat(n).key, "sending")
    store.transition(chat(5).key, "failed", last_error="400 bad")
    statements: list[str] = []
    store.db.conn.set_trace_callback(statements.append)

    rows = list(store.iter_items("job", ["pending", "sending", "failed"], columns=["item_id", "state"]))
    limited = list(store.iter_items(states=["sending", "pending"], columns=["item_id"], limit=3))

    store.db.conn.set_trace_callback(None)
    assert [row["item_id"] for row in rows] == [f"chat-{n}" for n in range(1, 9)]
    assert rows[4] == {"item_id": "chat-5", "state": "failed"}
    assert limited == [{"item_id": "chat-1"}, {"item_id": "chat-2"}, {"item_id": "chat-3"}]
    # A whole-run read must stream: an "order by" that needs a temporary B-tree holds every
    # matching row (text and all) in memory before the first one comes out.
    for sql in [statement for statement in statements if statement.startswith("select")]:
        plan = " / ".join(row[3] for row in store.db.conn.execute("explain query plan " + sql))
        assert "TEMP B-TREE" not in plan, (sql, plan)


def test_scanning_shrinks_the_page_cache_and_restores_it(store: CheckpointStore) -> None:
    def cache_kib() -> int:
        return -int(store.db.execute("pragma cache_size").fetchone()[0])

    with store.scanning():
        assert cache_kib() == SCAN_CACHE_KIB
    assert cache_kib() == CACHE_KIB > SCAN_CACHE_KIB


def _sqlite_memory_used() -> int:
    """Bytes SQLite's allocator holds now (``sqlite3_memory_used``), from the library Python uses."""
    import ctypes
    import ctypes.util

    try:
        used = ctypes.CDLL(ctypes.util.find_library("sqlite3") or "libsqlite3.so.0").sqlite3_memory_used
    except (OSError, AttributeError):
        pytest.skip("sqlite3 is built into Python's module here: its memory cannot be read")
    used.restype, used.argtypes = ctypes.c_int64, []
    return int(used())


def test_release_cache_gives_back_the_page_cache_and_the_store_stays_usable(store: CheckpointStore) -> None:
    """After an execution the ledger's write would otherwise sit on top of a full cache."""
    long_question = {"role": "user", "content": "x" * 2_000}
    requests = [
        {"model": "relay-chat-small", "messages": [long_question], "max_tokens": n} for n in range(3_000)
    ]
    store.add_items([item("chat", request, f"chat-{n}") for n, request in enumerate(requests)])  # about 6 MB
    assert sum(1 for _ in store.iter_current_items("job")) == 3_000  # the cache fills as they are read
    before = _sqlite_memory_used()

    store.release_cache()

    assert before - _sqlite_memory_used() > 3_000_000
    assert sum(1 for _ in store.iter_current_items("job")) == 3_000
    assert -int(store.db.execute("pragma cache_size").fetchone()[0]) == CACHE_KIB  # only the pages went


def test_calls_of_items_in_some_states_only(store: CheckpointStore) -> None:
    store.add_items([chat(1, model="relay-chat-small"), chat(2, model="relay-chat-large")])
    store.transition(chat(1, model="relay-chat-small").key, "sending")
    store.transition(chat(1, model="relay-chat-small").key, "done")

    assert sorted(store.calls()) == [("job", "chat", "relay-chat-large"), ("job", "chat", "relay-chat-small")]
    assert store.calls(("pending", "failed")) == [("job", "chat", "relay-chat-large")]


def test_planning_names_items_anew_through_the_key_index_not_a_scan_of_every_item(
    store: CheckpointStore,
) -> None:
    """A plan of a few rows appended to a big run must not touch every item: the statements that
    bring ids, carried values and lines up to date find their rows from the plan's keys."""
    store.plan_items([chat(n) for n in range(1, 40)])
    statements: list[str] = []
    store.db.conn.set_trace_callback(statements.append)

    store.plan_items([chat(n) for n in range(1, 41)])

    store.db.conn.set_trace_callback(None)
    updates = [sql for sql in statements if sql.startswith("update items set") and "current_keys" in sql]
    assert len(updates) == 2, statements
    for sql in updates:
        plan = " / ".join(row[3] for row in store.db.conn.execute("explain query plan " + sql))
        assert "SCAN items" not in plan and "SCAN i " not in plan, (sql, plan)


def test_a_failed_row_folded_in_once_is_not_taken_again_until_its_store_goes_further(
    store: CheckpointStore, tmp_path: Path
) -> None:
    """An unsharded run folds its shards' stores before every plan: a failure it has already
    taken (and not retried since) is its own, so the fold takes nothing and the plan stays cheap.
    The store that sent more requests for the item (``attempts``) has the newer failure."""
    path = tmp_path / "shard" / "checkpoint.sqlite"
    with CheckpointStore(path) as shard:
        shard.add_items([chat(1)])
        shard.transition(chat(1).key, "sending", attempts=1)
        shard.transition(chat(1).key, "failed", last_error="400 bad request")
    store.add_items([chat(1)])

    assert store.absorb(path) == 1
    assert store.absorb(path) == 0  # the same failure: ours now
    assert store.item(chat(1).key)["last_error"] == "400 bad request"

    with CheckpointStore(path) as shard:  # the shard, run again, tried once more
        shard.transition(chat(1).key, "pending")
        shard.transition(chat(1).key, "sending", attempts=2)
        shard.transition(chat(1).key, "failed", last_error="500 after 2 requests")
    assert store.absorb(path) == 1
    assert store.item(chat(1).key)["attempts"] == 2

    store.transition(chat(1).key, "pending")  # the run retried it: its failure is the newer one
    store.transition(chat(1).key, "sending", attempts=3)
    store.transition(chat(1).key, "failed", last_error="500 after 3 requests")
    assert store.absorb(path) == 0
    assert store.item(chat(1).key)["last_error"] == "500 after 3 requests"
    store.transition(chat(1).key, "pending")  # requeued for a retry, not sent yet: still ours
    assert store.absorb(path) == 0


@pytest.mark.parametrize("group", [1, 4], ids=["row by row", "one JSON-array update"])
def test_a_reask_stays_sending_only_with_one_more_attempt(store: CheckpointStore, group: int) -> None:
    """A structured answer asked again (engine/reasks.py) keeps the item sending and counts the
    request; a second claim of an item already sending, with the attempts it read, is refused."""
    from relaybatch.engine import IllegalTransition

    store.add_items([chat(n) for n in range(1, 5)])
    keys = [chat(n).key for n in range(1, 5)][:group]
    store.apply([Change(key, "sending", {"attempts": 1}) for key in keys])

    store.apply([Change(key, "sending", {"attempts": 2}) for key in keys])
    with pytest.raises(IllegalTransition, match="from 'sending' to 'sending'"):
        store.apply([Change(key, "sending", {"attempts": 2}) for key in keys])

    assert {store.item(key)["attempts"] for key in keys} == {2}
    assert store.count_by_state()["sending"] == group

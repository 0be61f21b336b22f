"""Every transition of the item state machine, each produced by a real exchange with the emulator.

The event log records each transition, so each test reads the path an item took.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from engine_fakes import FAST, ClientFactory
from engine_items import chat, video, video_v1
from starlette.applications import Starlette

from relaybatch.emulator.config import FaultRule, FaultsConfig
from relaybatch.engine import CheckpointStore, execute
from relaybatch.engine.states import ALLOWED, is_allowed


def path_of(store: CheckpointStore, key: str) -> list[str]:
    """The states an item went through; repeats collapsed (each poll that finds remote work
    running records what it saw: polling -> polling)."""
    states = [event["state"] for event in store.events(key)]
    return [state for n, state in enumerate(states) if n == 0 or states[n - 1] != state]


def faults(app: Starlette, *rules: FaultRule) -> None:
    app.state.emulator.faults.replace(FaultsConfig(rules=list(rules)))


def post_counts(app: Starlette) -> list[int]:
    """How many times each distinct billed create (POST body) reached the emulator."""
    counts = app.state.emulator.requests.counts
    return [count for (method, _, _), count in counts.items() if method == "POST"]


def test_the_transition_table_matches_the_design() -> None:
    assert is_allowed("pending", "sending")
    assert is_allowed("sending", "uncertain")
    assert not is_allowed("done", "pending")
    assert not is_allowed("submitted", "sending")  # paid remote work is never created again
    assert ALLOWED["cancelled"] == frozenset({"superseded"})
    # A done item only gets its missing media files (columns only), or leaves the manifest.
    assert ALLOWED["done"] == frozenset({"done", "superseded"})
    assert not is_allowed("submitted", "superseded")  # paid work in flight is never abandoned


async def test_pending_sending_done(store: CheckpointStore, make_client: ClientFactory) -> None:
    store.add_items([chat(1)])
    key = chat(1).key

    await execute(store, make_client(), settings=FAST)

    assert path_of(store, key) == ["sending", "done"]
    assert store.item(key)["attempts"] == 1


async def test_retryable_error_goes_back_to_pending_then_done(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    faults(fast_app, FaultRule(fault="status=503", at=[1], paths=["/v1/chat"]))
    store.add_items([chat(1)])

    await execute(store, make_client(), settings=FAST)

    row = store.item(chat(1).key)
    assert path_of(store, row["key"]) == ["sending", "pending", "sending", "done"]
    assert row["attempts"] == 2
    assert row["not_before"] is not None  # the back-off was recorded


async def test_error_that_cannot_succeed_fails_with_the_reason(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    store.add_items([chat(1, model="relay-no-such-model")])

    summary = await execute(store, make_client(), settings=FAST)

    row = store.item(chat(1, model="relay-no-such-model").key)
    assert path_of(store, row["key"]) == ["sending", "failed"]
    assert "400" in row["last_error"] and "relay-no-such-model" in row["last_error"]
    assert summary.counts == {"failed": 1}
    assert fast_app.state.emulator.total_requests == 1  # a 400 is never retried


async def test_retryable_failures_give_up_then_a_later_run_retries_them(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    faults(fast_app, FaultRule(fault="status=529", every=1, paths=["/v1/chat"]))
    store.add_items([chat(1)])
    assert FAST.retry is not None
    settings = replace(FAST, retry=replace(FAST.retry, max_attempts=3))

    await execute(store, make_client(), settings=settings)
    row = store.item(chat(1).key)
    assert row["state"] == "failed" and row["retryable"] == 1
    assert "gave up after 3 attempts" in row["last_error"]

    faults(fast_app)
    await execute(store, make_client(), settings=settings)

    assert path_of(store, row["key"])[-4:] == ["failed", "pending", "sending", "done"]
    # `attempts` counts every request sent for the item, across executions: 3, then 1 more.
    assert store.item(chat(1).key)["attempts"] == 4


async def test_no_answer_to_a_billed_call_makes_it_uncertain_and_it_is_not_resent(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    faults(fast_app, FaultRule(fault="drop=after", at=[1], paths=["/v1/chat"]))
    store.add_items([chat(1)])

    first = await execute(store, make_client(), settings=FAST)
    second = await execute(store, make_client(), settings=FAST)

    assert path_of(store, chat(1).key) == ["sending", "uncertain"]
    assert first.counts == second.counts == {"uncertain": 1}
    assert second.sent == 0
    assert post_counts(fast_app) == [1]


async def test_uncertain_items_are_resent_only_when_the_policy_says_so(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    faults(fast_app, FaultRule(fault="drop=after", at=[1], paths=["/v1/chat"]))
    store.add_items([chat(1)])
    await execute(store, make_client(), settings=FAST)

    await execute(store, make_client(), settings=replace(FAST, uncertain_policy="resend"))

    assert path_of(store, chat(1).key) == ["sending", "uncertain", "pending", "sending", "done"]


async def test_video_goes_submitted_polling_done(store: CheckpointStore, make_client: ClientFactory) -> None:
    store.add_items([video(1)])

    await execute(store, make_client(), settings=FAST)

    row = store.item(video(1).key)
    assert path_of(store, row["key"]) == ["sending", "submitted", "polling", "done"]
    assert row["remote_id"].startswith("video")
    assert (store.path.parent / row["result"]["media_paths"][0]).read_bytes()[4:8] == b"ftyp"


async def test_a_failing_video_ends_failed_with_the_gateway_reason(
    store: CheckpointStore, make_client: ClientFactory
) -> None:
    store.add_items([video(1, prompt="emulator:fail")])

    await execute(store, make_client(), settings=FAST)

    row = store.item(video(1, prompt="emulator:fail").key)
    assert path_of(store, row["key"])[-1] == "failed"
    assert "video failed" in row["last_error"]


async def test_v1_task_done_and_cancelled(store: CheckpointStore, make_client: ClientFactory) -> None:
    store.add_items([video_v1(1), video_v1(2, prompt="emulator:cancel")])

    await execute(store, make_client(), settings=FAST)

    assert path_of(store, video_v1(1).key) == ["sending", "submitted", "polling", "done"]
    assert path_of(store, video_v1(2, prompt="emulator:cancel").key)[-1] == "cancelled"


async def test_a_remote_task_the_gateway_no_longer_knows_fails(
    store: CheckpointStore, make_client: ClientFactory
) -> None:
    store.add_items([video(1)])
    key = video(1).key
    store.transition(key, "sending", attempts=1)
    store.transition(key, "submitted", remote_id="video_unknown")

    summary = await execute(store, make_client(), settings=FAST)

    assert path_of(store, key)[-1] == "failed"
    assert "video_unknown" in store.item(key)["last_error"]
    assert summary.sent == 0


async def test_stop_with_cancel_remote_deletes_videos_in_flight(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    store.add_items([video(1), video(2)])
    stop = asyncio.Event()
    submitted: list[str] = []

    def hook(point: str, key: str) -> None:
        if point == "result_committed":
            submitted.append(key)
            if len(submitted) == 2:
                stop.set()

    settings = replace(FAST, cancel_remote_on_stop=True)
    summary = await execute(store, make_client(), settings=settings, stop=stop, hook=hook)

    assert summary.counts == {"cancelled": 2}
    assert "stopped on request" in (summary.stopped or "")
    assert (
        fast_app.state.emulator.request_count("DELETE", f"/v2/videos/{store.item(video(1).key)['remote_id']}")
        == 1
    )
    assert "DELETE" in store.item(video(2).key)["last_error"]

"""Paid async work is never abandoned on one answer (issue 18): polls answered with an error are
asked again, a resume polls again what failed only on poll answers, and a download that is not
whole is fetched again. Every video here is created (and billed) exactly once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from engine_fakes import FAST, ClientFactory
from engine_items import video, video_v1
from starlette.applications import Starlette
from test_transitions import faults, path_of

from relaybatch.emulator.config import FaultRule
from relaybatch.engine import CheckpointStore, PollSettings, execute
from relaybatch.engine.states import RETRY_POLL
from relaybatch.gateway.media_checks import check_media_file

# Polls every few milliseconds; a failing poll is retried for a quarter of a second, then given up.
SHORT_WINDOW = replace(FAST, poll=replace(FAST.poll, error_window_seconds=0.25))


def creates(app: Starlette, path: str) -> int:
    return app.state.emulator.request_count("POST", path)


async def test_a_paid_video_survives_4xx_poll_answers(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    # The first four polls are answered 400, 403, 409 and 422: none of them ends the paid video.
    rules = [
        FaultRule(fault=f"status={status}", at=[number], paths=["/v2/videos/"])
        for number, status in enumerate((400, 403, 409, 422), start=1)
    ]
    faults(fast_app, *rules)
    store.add_items([video(1)])

    await execute(store, make_client(), settings=FAST)

    row = store.item(video(1).key)
    assert row["state"] == "done", row["last_error"]
    assert creates(fast_app, "/v2/videos") == 1
    assert fast_app.state.emulator.request_count("GET", f"/v2/videos/{row['remote_id']}") >= 5


async def test_a_v1_task_survives_a_400_poll_answer(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    faults(fast_app, FaultRule(fault="status=400", at=[1], paths=["/v1/tasks/"]))
    store.add_items([video_v1(1)])

    await execute(store, make_client(), settings=FAST)

    assert store.item(video_v1(1).key)["state"] == "done"
    assert creates(fast_app, "/v1/videos/generations") == 1


async def test_polls_failing_past_the_window_fail_the_item_and_a_resume_polls_it_again(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    faults(fast_app, FaultRule(fault="status=403", every=1, paths=["/v2/videos/"]))
    store.add_items([video(1)])

    await execute(store, make_client(), settings=SHORT_WINDOW)

    row = store.item(video(1).key)
    assert row["state"] == "failed" and row["retryable"] == RETRY_POLL
    assert "403" in row["last_error"] and "run again to poll it again" in row["last_error"]

    faults(fast_app)  # the gateway answers polls again
    await execute(store, make_client(), settings=SHORT_WINDOW)

    assert store.item(video(1).key)["state"] == "done"
    assert creates(fast_app, "/v2/videos") == 1  # polled again, never created again
    assert path_of(store, video(1).key)[-2:] == ["polling", "done"]


async def test_a_404_of_an_unknown_id_is_the_one_definitive_poll_answer(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    faults(fast_app, FaultRule(fault="status=404", every=1, paths=["/v2/videos/"]))
    store.add_items([video(1)])

    await execute(store, make_client(), settings=FAST)
    row = store.item(video(1).key)
    assert row["state"] == "failed" and row["retryable"] is None
    assert fast_app.state.emulator.request_count("GET", f"/v2/videos/{row['remote_id']}") == 1

    faults(fast_app)
    await execute(store, make_client(), settings=FAST)
    assert store.item(video(1).key)["state"] == "failed"  # not polled again


async def test_a_truncated_download_is_fetched_again_and_the_saved_file_is_whole(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    """A 200 whose body was cut in half, with a Content-Length that matches the cut body: only the
    MP4 box structure shows it. The first download is refused, the next poll downloads it whole."""
    store.add_items([video(1)])
    truncated: list[str] = []

    def cut_the_first_download(point: str, key: str) -> None:
        remote_id = store.item(key)["remote_id"]
        if point == "poll_sending" and not truncated and remote_id:
            truncated.append(remote_id)
            faults(fast_app, FaultRule(fault="truncate", at=[1], paths=[f"/v2/videos/{remote_id}/content"]))

    await execute(store, make_client(), settings=FAST, hook=cut_the_first_download)

    row = store.item(video(1).key)
    assert row["state"] == "done", row["last_error"]
    assert fast_app.state.emulator.request_count("GET", f"/v2/videos/{truncated[0]}/content") == 2
    saved = Path(store.path.parent) / row["result"]["media_paths"][0]
    check_media_file(saved, "video/mp4")  # raises if the saved file is not whole
    assert creates(fast_app, "/v2/videos") == 1


def test_poll_settings_name_the_window() -> None:
    assert PollSettings().error_window_seconds == 600.0

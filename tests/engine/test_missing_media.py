"""Done items of polled kinds (V2 videos, V1 tasks) whose media files are missing get them on the
next execution: one poll, which downloads as a first completion does; nothing is created again and
the item stays done, with the reason recorded when the files cannot be fetched any more. Images
came inside their answer: a lost one is only reported (sending again would be billed)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow.parquet as pq
from engine_fakes import FAST, ClientFactory
from engine_items import item as make_item
from engine_items import video, video_v1
from starlette.applications import Starlette
from test_v1_media import FakeGateway, client_for

from relaybatch.engine import CheckpointStore, execute, export_results
from relaybatch.engine.media import files_missing
from relaybatch.engine.poller import (
    ANSWER_MEDIA_LOST,
    MEDIA_BACK_MESSAGE,
    MEDIA_FETCHED_MESSAGE,
    MEDIA_MISSING_MESSAGE,
)


def _as_an_older_relaybatch_left_it(store: CheckpointStore) -> None:
    """V1 results as relaybatch wrote them before V1 downloads: the task only, no file listed."""
    connection = sqlite3.connect(store.path)
    with connection:
        connection.execute("update items set result = json_remove(result, '$.media_paths', '$.media_urls')")
    connection.close()
    for path in (store.path.parent / "media").iterdir():
        path.unlink()


def _requests(app: Starlette, method: str, prefix: str) -> int:
    counts = app.state.emulator.requests.counts
    return sum(n for (m, path, _), n in counts.items() if m == method and path.startswith(prefix))


async def test_v1_items_finished_before_v1_downloads_get_their_files_on_resume(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette, tmp_path: Path
) -> None:
    store.add_items([video_v1(1), video_v1(2)])
    assert (await execute(store, make_client(), settings=FAST)).counts == {"done": 2}
    _as_an_older_relaybatch_left_it(store)
    creates = _requests(fast_app, "POST", "/v1/")
    assert all(files_missing(store.path.parent, item["result"]) for item in store.iter_items())

    summary = await execute(store, make_client(), settings=FAST)

    assert summary.counts == {"done": 2} and summary.sent == 0
    assert _requests(fast_app, "POST", "/v1/") == creates  # polled and downloaded, never created again
    for item in store.iter_items():
        [path] = item["result"]["media_paths"]
        assert (store.path.parent / path).read_bytes()[4:8] == b"ftyp"
        assert item["last_error"] is None
        assert [event["detail"] for event in store.events(item["key"])][-1] == MEDIA_FETCHED_MESSAGE
    rows = pq.read_table(export_results(store, tmp_path / "results")[0]).to_pylist()
    assert all(row["media_paths"] and row["media_urls"] for row in rows)


async def test_a_deleted_v2_video_is_downloaded_again_and_files_on_disk_are_left_alone(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    store.add_items([video(1), video(2)])
    assert (await execute(store, make_client(), settings=FAST)).counts == {"done": 2}
    first, second = store.iter_items()
    deleted = store.path.parent / first["result"]["media_paths"][0]
    deleted.unlink()
    polls = _requests(fast_app, "GET", "/v2/videos/")
    on_disk = _requests(fast_app, "GET", f"/v2/videos/{second['remote_id']}")

    summary = await execute(store, make_client(), settings=FAST)

    assert summary.counts == {"done": 2} and summary.sent == 0
    assert deleted.read_bytes()[4:8] == b"ftyp"
    # One poll and one download of the deleted one; nothing for the video still on disk.
    assert _requests(fast_app, "GET", "/v2/videos/") == polls + 2
    assert _requests(fast_app, "GET", f"/v2/videos/{second['remote_id']}") == on_disk

    await execute(store, make_client(), settings=FAST)  # all on disk: nothing asked at all
    assert _requests(fast_app, "GET", "/v2/videos/") == polls + 2


async def test_files_that_cannot_be_fetched_again_leave_the_item_done_with_the_reason(
    tmp_path: Path,
) -> None:
    task = {"id": "task-1", "status": "completed", "type": "image_generation", "data": {"url": "/gone"}}
    gateway = FakeGateway(task)
    store = CheckpointStore(tmp_path / "run" / "checkpoint.sqlite")
    try:
        item = video_v1(1)
        store.add_items([item])
        connection = sqlite3.connect(store.path)
        with connection:  # done by an older relaybatch: the task's answer, no files
            connection.execute(
                "update items set state = 'done', remote_id = 'task-1', result = json(?)",
                ['{"remote": {"id": "task-1"}}'],
            )
        connection.close()

        async with client_for(gateway) as client:
            summary = await execute(store, client, settings=FAST)

        assert summary.counts == {"done": 1}
        stored = store.item(item.key)
        assert stored["state"] == "done" and stored["result"] == {"remote": {"id": "task-1"}}
        assert stored["last_error"].startswith(f"{MEDIA_MISSING_MESSAGE}: ")
        assert "gateway.example/gone" in gateway.authorized  # it was tried
        assert files_missing(store.path.parent, stored["result"])  # so the next execution tries again
    finally:
        store.close()


def test_files_missing_reads_the_result_and_the_shard_folders(tmp_path: Path) -> None:
    assert files_missing(tmp_path, None)
    assert files_missing(tmp_path, {"remote": {}})  # finished before downloads: nothing listed
    assert not files_missing(tmp_path, {"media_paths": []})  # a task with no files: nothing to fetch
    assert files_missing(tmp_path, {"media_paths": ["media/k-0.mp4"]})
    merged = tmp_path / "shards" / "2-of-2" / "media" / "k-0.mp4"
    merged.parent.mkdir(parents=True)
    merged.write_bytes(b"x")  # a merged shard's file stays in the shard's folder
    assert not files_missing(tmp_path, {"media_paths": ["media/k-0.mp4"]})


def test_status_lists_done_items_whose_files_could_not_be_fetched_again(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from relaybatch.cli import app

    store = CheckpointStore(tmp_path / "old" / "checkpoint.sqlite")
    item = video_v1(1)
    store.add_items([item])
    store.transition(item.key, "sending")
    store.transition(item.key, "submitted", remote_id="task-1")
    store.transition(item.key, "done", result={"remote": {"id": "task-1"}})
    store.transition(item.key, "done", last_error=f"{MEDIA_MISSING_MESSAGE}: link expired")
    store.close()

    shown = CliRunner().invoke(app, ["status", "old", "--runs-dir", str(tmp_path)], terminal_width=300)

    assert shown.exit_code == 0, shown.output
    assert "done items without their media files" in shown.output
    assert "v1-1" in shown.output and "link expired" in shown.output


async def test_lost_image_files_are_reported_once_never_sent_again_and_cleared_when_back(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette, tmp_path: Path
) -> None:
    images = [
        make_item("image", {"model": "relay-image-2", "prompt": f"a red square {n}"}, f"image-{n}")
        for n in (1, 2)
    ]
    store.add_items(images)
    assert (await execute(store, make_client(), settings=FAST)).counts == {"done": 2}
    first, second = (store.item(image.key) for image in images)
    lost = store.path.parent / first["result"]["media_paths"][0]
    kept = lost.read_bytes()
    lost.unlink()
    sent = _requests(fast_app, "POST", "/v1/images/")

    for _ in range(2):  # the second execution finds it noted already: nothing written again
        summary = await execute(store, make_client(), settings=FAST)
        assert summary.counts == {"done": 2} and summary.sent == 0
    assert _requests(fast_app, "POST", "/v1/images/") == sent  # never made again: that is billed
    noted = store.item(images[0].key)
    assert noted["last_error"] == ANSWER_MEDIA_LOST and noted["result"] == first["result"]
    assert [e["detail"] for e in store.events(images[0].key)].count(ANSWER_MEDIA_LOST) == 1
    assert store.item(images[1].key)["last_error"] is None  # its file is on disk
    assert store.done_with_note(MEDIA_MISSING_MESSAGE)[0] == 1  # what `relaybatch status` lists

    lost.write_bytes(kept)  # restored from a backup
    await execute(store, make_client(), settings=FAST)
    assert store.item(images[0].key)["last_error"] is None
    assert [e["detail"] for e in store.events(images[0].key)][-1] == MEDIA_BACK_MESSAGE
    assert second["result"] == store.item(images[1].key)["result"]

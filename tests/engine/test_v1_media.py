"""Legacy V1 tasks: the files their results link to are downloaded into media/ when they complete."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from engine_fakes import FAST, ClientFactory
from engine_items import video_v1
from PIL import Image
from pydantic import SecretStr

from relaybatch.engine import CheckpointStore, execute, export_results
from relaybatch.engine.kinds import LinkRefused, poll_task
from relaybatch.engine.media import MediaFiles
from relaybatch.gateway import GatewayClient
from relaybatch.gateway.retry import RetryPolicy

KEY = "sk-v1-media-test"
MP3 = b"ID3\x04\x00\x00\x00\x00\x00\x00" + b"\xff\xfb" * 64


def _png() -> bytes:
    """A real PNG: downloaded images must decode (gateway/media_checks.py)."""
    out = io.BytesIO()
    Image.new("RGB", (4, 4), (10, 20, 30)).save(out, "PNG")
    return out.getvalue()


PNG = _png()


class FakeGateway:
    """Answers one V1 task and serves the files it links to; records who was sent the key."""

    def __init__(self, task: dict) -> None:
        self.task = task
        self.authorized: dict[str, str | None] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.authorized[f"{request.url.host}{request.url.path}"] = request.headers.get("authorization")
        if request.url.path.startswith("/v1/tasks/"):
            return httpx.Response(200, json=self.task)
        if request.url.path.endswith("/speech"):  # served as an mp3 whatever the link says
            return httpx.Response(200, content=MP3)
        if request.url.path.endswith("/gone"):
            return httpx.Response(403, json={"error": {"message": "link expired"}})
        return httpx.Response(200, content=PNG)


def client_for(gateway: FakeGateway) -> GatewayClient:
    return GatewayClient(
        "https://gateway.example",
        SecretStr(KEY),
        transport=httpx.MockTransport(gateway),
        retry=RetryPolicy(max_attempts=1),
    )


async def test_an_audio_task_link_on_another_host_is_downloaded_without_the_key(tmp_path: Path) -> None:
    task = {
        "id": "gen-1",
        "status": "completed",
        "type": "audio_generation",
        "data": {"audio_url": "https://files.example/a/speech?sig=abc", "duration": 3},
    }
    gateway = FakeGateway(task)
    async with client_for(gateway) as client:
        answer = await poll_task(client, "gen-1", MediaFiles(tmp_path, "k1"))

    assert answer.status == "done" and answer.result is not None
    assert answer.result["media_paths"] == ["media/k1-0.mp3"]
    assert answer.result["media_urls"] == ["https://files.example/a/speech?sig=abc"]
    assert (tmp_path / "media" / "k1-0.mp3").read_bytes() == MP3
    assert gateway.authorized == {
        "gateway.example/v1/tasks/gen-1": f"Bearer {KEY}",
        "files.example/a/speech": None,
    }


async def test_the_extension_comes_from_the_bytes_and_payloads_and_links_are_numbered_in_turn(
    tmp_path: Path,
) -> None:
    task = {
        "id": "gen-2",
        "status": "completed",
        "type": "image_generation",
        "data": {
            "b64_json": base64.b64encode(PNG).decode(),
            "urls": [
                "https://gateway.example/files/one.jpg",
                "https://cdn.example/two/speech",
                "file:///etc/x",
            ],
        },
    }
    gateway = FakeGateway(task)
    async with client_for(gateway) as client:
        answer = await poll_task(client, "gen-2", MediaFiles(tmp_path, "k2"))

    assert answer.result is not None
    # one.jpg is really a PNG; "speech" has no suffix and is an mp3 by its bytes.
    assert answer.result["media_paths"] == ["media/k2-0.png", "media/k2-1.png", "media/k2-2.mp3"]
    assert answer.result["media_urls"][-1] == "file:///etc/x"  # kept, never fetched
    assert sorted(path.name for path in (tmp_path / "media").iterdir()) == [
        "k2-0.png",
        "k2-1.png",
        "k2-2.mp3",
    ]
    # The gateway's own host gets the key (it is the gateway); the other host does not.
    assert gateway.authorized["gateway.example/files/one.jpg"] == f"Bearer {KEY}"
    assert gateway.authorized["cdn.example/two/speech"] is None


async def test_a_link_that_cannot_be_fetched_raises_and_leaves_no_file(tmp_path: Path) -> None:
    task = {"id": "gen-3", "status": "completed", "data": {"video_url": "https://cdn.example/gone"}}
    async with client_for(FakeGateway(task)) as client:
        # Refused again after one more poll's fresh link: a failed poll (asked again with back-off),
        # not "the gateway no longer knows the task" (a 404 of the task itself).
        with pytest.raises(LinkRefused, match=r"after a fresh poll too: .*link expired"):
            await poll_task(client, "gen-3", MediaFiles(tmp_path, "k3"))

    assert list((tmp_path / "media").iterdir()) == []


async def test_v1_videos_are_on_disk_and_in_the_parquet_when_the_run_ends(
    store: CheckpointStore, make_client: ClientFactory, tmp_path: Path
) -> None:
    store.add_items([video_v1(1), video_v1(2)])
    summary = await execute(store, make_client(), settings=FAST)
    assert summary.counts == {"done": 2}

    rows = pq.read_table(export_results(store, tmp_path / "results")[0]).to_pylist()

    for row in rows:
        [path] = row["media_paths"]
        assert path == f"media/{row['item_key']}-0.mp4"
        assert (store.path.parent / path).read_bytes()[4:8] == b"ftyp"
        [url] = row["media_urls"]
        assert "/content?token=" in url

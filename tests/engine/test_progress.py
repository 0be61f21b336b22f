"""The progress display: counts per kind, in flight, polling, rate, ETA and dollars."""

from __future__ import annotations

import io
from decimal import Decimal

from engine_fakes import FAST, ClientFactory
from engine_items import chat, video
from rich.console import Console

from relaybatch.engine import CheckpointStore, RichProgress, Snapshot, execute
from relaybatch.engine.progress import render


def text_of(snapshot: Snapshot) -> str:
    console = Console(file=io.StringIO(), width=120)
    console.print(render(snapshot))
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_the_table_shows_each_kind_rate_eta_and_dollars() -> None:
    snapshot = Snapshot(
        finished={"chat:done": 90, "chat:failed": 2, "video:done": 8},
        in_flight=12,
        polling=30,
        elapsed=10.0,
        spent_usd=Decimal("1.23456"),
        stopped=None,
        remaining=200,
    )

    text = text_of(snapshot)

    assert "chat" in text and "90" in text and "video" in text
    assert "in flight 12" in text and "polling 30" in text
    assert "10.0 items/s" in text and "ETA 0:00:20" in text and "$1.2346" in text


async def test_execute_feeds_the_display_and_finishes_it(
    store: CheckpointStore, make_client: ClientFactory
) -> None:
    store.add_items([chat(1), chat(2), video(1)])
    output = io.StringIO()
    progress = RichProgress(Console(file=output, width=120))

    await execute(store, make_client(), settings=FAST, progress=progress)

    text = output.getvalue()
    assert "chat" in text and "video" in text and "ETA" in text
    assert progress.live is None

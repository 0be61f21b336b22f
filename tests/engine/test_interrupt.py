"""Ctrl-C: the first one sets the stop event (a clean, resumable stop); the second one is plain SIGINT."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from engine_fakes import FAST, ClientFactory
from engine_items import chat

from relaybatch.engine import CheckpointStore, execute
from relaybatch.engine.interrupt import install_stop_on_interrupt


async def test_the_first_ctrl_c_stops_submitting_and_checkpoints(
    store: CheckpointStore, make_client: ClientFactory
) -> None:
    store.add_items([chat(n) for n in range(50)])
    stop = asyncio.Event()
    notices: list[str] = []
    remove = install_stop_on_interrupt(stop, notices.append)
    done: list[str] = []

    def hook(point: str, key: str) -> None:
        if point == "result_committed":
            done.append(key)
            if len(done) == 5:
                os.kill(os.getpid(), signal.SIGINT)

    try:
        summary = await execute(store, make_client(), settings=FAST, stop=stop, hook=hook)
    finally:
        remove()

    assert stop.is_set() and "stopping" in notices[0]
    assert summary.stopped is not None and "resume" in summary.stopped
    assert 5 <= summary.counts["done"] < 50
    assert set(summary.counts) == {"done", "pending"}  # nothing left half-sent
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    resumed = await execute(store, make_client(), settings=FAST)
    assert resumed.counts == {"done": 50}


async def test_the_second_ctrl_c_raises_keyboard_interrupt() -> None:
    stop = asyncio.Event()
    install_stop_on_interrupt(stop, lambda text: None)
    os.kill(os.getpid(), signal.SIGINT)
    await asyncio.sleep(0.01)
    assert stop.is_set()

    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(0.01)

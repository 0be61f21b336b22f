"""A cancelled deployment run's SIGTERM waits until the engine has stopped cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
from types import FrameType

from relaybatch.tasks.steps import graceful_sigterm


async def test_sigterm_sets_stop_first_and_reaches_prefects_handler_after_the_engine_stops() -> None:
    received: list[int] = []

    def prefect_handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGTERM, prefect_handler)
    try:
        stop = asyncio.Event()

        async def engine() -> str:
            await stop.wait()  # what the engine does: stop submitting, finish what is in flight
            return "stopped cleanly"

        work = asyncio.ensure_future(engine())
        with graceful_sigterm(stop, work) as termination:
            os.kill(os.getpid(), signal.SIGTERM)
            assert await asyncio.wait_for(asyncio.shield(work), 10) == "stopped cleanly"
            assert received == []  # held back while the engine stopped
        termination.pass_on()

        assert received == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is prefect_handler  # handler given back
    finally:
        signal.signal(signal.SIGTERM, previous)


async def test_without_sigterm_nothing_is_passed_on() -> None:
    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        stop = asyncio.Event()
        work = asyncio.ensure_future(asyncio.sleep(0))
        with graceful_sigterm(stop, work) as termination:
            await work
        termination.pass_on()
        assert received == [] and not stop.is_set()
    finally:
        signal.signal(signal.SIGTERM, previous)

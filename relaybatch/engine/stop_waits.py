"""Waits a stop ends at once: a worker waiting for the limiter's token gives its item back.

At 120 requests a minute most of a run's items wait at the limiter. Those waits come before an
item is written ``sending`` (docs/engine.md, "Sending"), so on a stop they can simply end: the
item stays ``pending``, nothing was sent. Before, the workers already past the stop check took
their tokens one by one during the grace period and sent (13 requests after a Ctrl-C at 120 rpm).

``interrupt`` cancels every task waiting inside ``until`` (a cancel scope, as ``asyncio.timeout``
is one): the wait ends with False, and a cancellation from anywhere else still propagates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class StopWaits:
    """The waits one stop ends; ``interrupted`` once it has (later waits end at once too)."""

    def __init__(self) -> None:
        self.interrupted = False
        self._waiting: set[asyncio.Task[Any]] = set()
        self._cancelled: set[asyncio.Task[Any]] = set()

    def interrupt(self) -> None:
        self.interrupted = True
        for task in self._waiting - self._cancelled:
            self._cancelled.add(task)
            task.cancel()

    async def until(self, wait: Coroutine[Any, Any, None]) -> bool:
        """Run ``wait``; False when the stop ended it first (or had come already)."""
        if self.interrupted:
            wait.close()
            return False
        task = asyncio.current_task()
        assert task is not None
        self._waiting.add(task)
        try:
            await wait
        except asyncio.CancelledError:
            # Ours alone: nobody else asked this task to stop, so it goes on without the wait.
            if task in self._cancelled and task.uncancel() == 0:
                return False
            raise
        finally:
            self._waiting.discard(task)
            self._cancelled.discard(task)
        return True

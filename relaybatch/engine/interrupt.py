"""Ctrl-C during a run: the first one stops submitting cleanly, the second one stops at once.

After the first Ctrl-C the engine sends nothing new, lets requests in flight finish and
checkpoints them (and, when asked, cancels remote videos), then returns a resumable summary.
The handler is removed after the first signal, so a second Ctrl-C raises KeyboardInterrupt as
usual: items then in flight stay ``sending`` and become ``uncertain`` on resume (never resent
blindly).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable


def install_stop_on_interrupt(
    stop: asyncio.Event, notice: Callable[[str], None] | None = None
) -> Callable[[], None]:
    """Make SIGINT set ``stop`` once; returns a function that removes the handler."""
    loop = asyncio.get_running_loop()
    say = notice or (lambda text: print(text, file=sys.stderr))

    def remove() -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(signal.SIGINT)

    def first_interrupt() -> None:
        remove()
        stop.set()
        say("stopping: no new requests; waiting for those in flight (Ctrl-C again to stop at once)")

    try:
        loop.add_signal_handler(signal.SIGINT, first_interrupt)
    except (NotImplementedError, RuntimeError, ValueError):
        return lambda: None  # not the main thread, or no signal support: Ctrl-C keeps its default
    return remove

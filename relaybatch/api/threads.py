"""Running the engine from any thread, Jupyter's included, with Ctrl-C as on a terminal.

A notebook cell runs inside the kernel's event loop: ``asyncio.run`` is refused there, and no
signal handler can be installed for an engine in another thread. So when the calling thread has a
loop running, the work runs in a worker thread with its own loop, and the caller's thread waits for
it, drawing the progress bar; a kernel interrupt (KeyboardInterrupt in the caller's thread) is
passed on to the engine through an ``InterruptRelay``: the first stops cleanly (requests in flight
finish and are checkpointed), the second at once, as Ctrl-C does for `relaybatch run`. With no loop
running (a script), the work runs in the calling thread under ``asyncio.run``, and Ctrl-C is the
CLI's own handling.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from relaybatch.run.stopping import InterruptRelay

T = TypeVar("T")

WAIT_SECONDS = 0.25  # how often the waiting thread redraws the progress bar


def loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run_coroutine(
    make: Callable[[], Coroutine[Any, Any, T]],
    relay: InterruptRelay | None = None,
    tick: Callable[[], None] | None = None,
) -> T:
    """``make()``'s coroutine run to its end, from this thread whatever runs in it; ``tick`` is
    called every ``WAIT_SECONDS`` while it runs in a worker thread (a progress bar's redraw)."""
    if not loop_running_here():
        return asyncio.run(make())
    outcome: list[T] = []
    failure: list[BaseException] = []
    finished = threading.Event()

    def work() -> None:
        try:
            outcome.append(asyncio.run(make()))
        except BaseException as error:  # handed to the waiting thread, raised there
            failure.append(error)
        finally:
            finished.set()

    # Waited for through an Event, not Thread.join: a KeyboardInterrupt inside join() on Python 3.11
    # marks the thread stopped while it still runs (bpo-45274's fix releases its state lock).
    threading.Thread(target=work, name="relaybatch-run", daemon=True).start()
    while not finished.is_set():
        try:
            finished.wait(WAIT_SECONDS)
            if tick is not None:
                tick()
        except KeyboardInterrupt:
            if relay is None or not relay.interrupt():
                print(
                    "relaybatch: interrupted while nothing is in flight: a run starting stops before "
                    "it sends; one that has finished ends once its results are written",
                    file=sys.stderr,
                    flush=True,
                )
    if failure:
        raise failure[0]
    return outcome[0]

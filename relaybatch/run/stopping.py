"""Stopping a run on a signal: the same in every mode (plain `relaybatch run`, a Prefect flow run
in-process, a flow run started by a worker or `relaybatch serve`).

- The first Ctrl-C (SIGINT) or SIGTERM sets the engine's stop event: nothing new is sent, requests
  in flight finish and are checkpointed. If they have not finished after the grace period
  (``RELAYBATCH_STOP_GRACE_SECONDS``, default 7 s), they are cancelled (their items stay
  ``sending`` and are reported uncertain on resume, never resent blindly), so by default the
  process is gone well within 10 s.
- A second Ctrl-C cancels the engine at once (a SIGTERM during the stop changes nothing: it asks
  for the stop already under way). Every state change the engine acted on
  is already committed, so the checkpoint is consistent either way.

SIGTERM matters as much as Ctrl-C: Kubernetes, systemd and Prefect's runner (when a flow run is
cancelled) send it first. Outside the main thread (no signal handlers) nothing is installed; a
caller that runs the engine in a worker thread (the Python API inside Jupyter's event loop) passes
the Ctrl-C it receives (a kernel interrupt) on through an ``InterruptRelay``, with the same effect.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from relaybatch.settings import STOP_GRACE_SECONDS as GRACE_SECONDS

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The parent a flow-run process asked to outlive (stop_when_parent_dies); None elsewhere.
_WATCHED_PARENT: int | None = None


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class StopOnSignal:
    """Which signal stopped the run (``None`` when none did), and whether the stop was forced."""

    def __init__(
        self,
        stop: asyncio.Event,
        work: asyncio.Future[Any],
        say: Callable[[str], None],
        grace: float = GRACE_SECONDS,
    ) -> None:
        self.stop = stop
        self.work = work
        self.say = say
        self.grace = grace
        self.signal: str | None = None
        self.forced = False
        self.forced_by = ""  # what forced the stop: a second Ctrl-C, or the grace period ran out
        self._grace: asyncio.TimerHandle | None = None

    def received(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if _WATCHED_PARENT is not None and os.getppid() != _WATCHED_PARENT:
            _silence_output()
        if self.signal is None:
            self.signal = name
            self.stop.set()
            self.say(
                f"stopping ({name}): no new requests; waiting up to {self.grace:g} s for those in "
                "flight (Ctrl-C again to stop at once)"
            )
            self._grace = asyncio.get_running_loop().call_later(
                self.grace, self.force, f"the {self.grace:g} s grace period ran out"
            )
        elif signum == signal.SIGINT:
            self.force("a second Ctrl-C")
        # A SIGTERM while stopping changes nothing: a supervisor (a Prefect worker passing on the
        # terminal's Ctrl-C, systemd, Kubernetes) asks for the stop already under way.

    def force(self, why: str) -> None:
        if not self.work.done():
            self.forced, self.forced_by = True, why
            self.work.cancel()

    def close(self) -> None:
        if self._grace is not None:
            self._grace.cancel()


class InterruptRelay:
    """A Ctrl-C caught in one thread, passed on to an engine stopping in another's event loop.

    The Python API runs the engine in a worker thread when the caller's thread has an event loop
    running (Jupyter's); there no signal handler can be installed, and a kernel interrupt raises
    KeyboardInterrupt in the caller's thread instead. The caller hands it on with ``interrupt()``:
    the first stops cleanly, the second at once, as on a terminal."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._target: tuple[asyncio.AbstractEventLoop, StopOnSignal] | None = None
        self._early = 0  # Ctrl-Cs that came before the execution was ready to stop

    def attach(self, loop: asyncio.AbstractEventLoop, handling: StopOnSignal) -> None:
        """From the loop's own thread, once the execution stops on signals: a Ctrl-C that came
        while it was starting (opening the store, the client) is acted on now."""
        with self._lock:
            self._target = (loop, handling)
            early, self._early = min(self._early, 2), 0
        for _ in range(early):
            loop.call_soon(handling.received, signal.SIGINT)

    def detach(self) -> None:
        with self._lock:
            self._target = None

    def interrupt(self) -> bool:
        """A Ctrl-C for the engine; False when no execution is stopping on signals now: one that is
        starting acts on it as soon as it can (``attach``); one that has ended is writing its
        results (nothing is in flight then)."""
        with self._lock:
            if self._target is None:
                self._early += 1
                return False
            loop, handling = self._target
            loop.call_soon_threadsafe(handling.received, signal.SIGINT)
            return True


@contextlib.contextmanager
def stop_on_signals(
    stop: asyncio.Event,
    work: asyncio.Future[Any],
    say: Callable[[str], None] = _say,
    grace: float = GRACE_SECONDS,
    relay: InterruptRelay | None = None,
) -> Iterator[StopOnSignal]:
    """Route SIGINT and SIGTERM to a clean stop of ``work`` while the block runs; the handlers
    that were there before (Prefect's, Python's KeyboardInterrupt) come back afterwards. A
    ``relay`` passes on a Ctrl-C another thread caught, the same way."""
    loop = asyncio.get_running_loop()
    handling = StopOnSignal(stop, work, say, grace)
    if relay is not None:
        relay.attach(loop, handling)
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    installed = []
    for signum in SIGNALS:
        try:
            loop.add_signal_handler(signum, handling.received, signum)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # not the main thread, or no signal support: the default behaviour stays
        installed.append(signum)
    try:
        yield handling
    finally:
        if relay is not None:
            relay.detach()
        handling.close()
        for signum in installed:
            loop.remove_signal_handler(signum)
            # remove_signal_handler leaves the default action; give back what was there.
            before = previous[signum]
            signal.signal(signum, before if before is not None else signal.SIG_DFL)


@contextlib.contextmanager
def interrupt_at_once() -> Iterator[None]:
    """While the block runs, Ctrl-C raises KeyboardInterrupt at the next line of Python, also in
    synchronous work inside the event loop (the cost ledger and results written as a run ends).

    ``asyncio.run``'s own handler only cancels the main task, which a synchronous export notices at
    its next ``await``, once it is done: at a million items the second Ctrl-C that was to leave the
    exports to the next run waited half a minute for them. ``stop_on_signals`` inside the block
    gives this handler back when the engine's stop is over."""
    try:
        previous = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread: no handler of ours
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


def stop_when_parent_dies() -> bool:
    """Ask Linux to send this process SIGTERM when its parent dies (PR_SET_PDEATHSIG).

    For flow-run processes that a Prefect runner (`relaybatch serve`) or worker started in their
    own session: a SIGKILL of the runner would otherwise leave them running on their own. With
    this, they stop as on any SIGTERM (cleanly, within 10 s). Not for `relaybatch run` itself,
    whose parent is a shell a user may leave on purpose (nohup). False where unsupported.
    """
    import ctypes

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    pr_set_pdeathsig = 1
    global _WATCHED_PARENT
    _WATCHED_PARENT = os.getppid()
    return bool(libc.prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0) == 0)


def _silence_output() -> None:
    """Point stdout and stderr at /dev/null: the parent that read them is gone.

    A runner (``relaybatch serve``) reads its flow runs' output through a pipe; once it is killed,
    the next progress line or the stop notice would raise BrokenPipeError inside the engine and
    end the run with requests in flight, instead of the clean stop the SIGTERM asked for.
    """
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        for descriptor in (1, 2):
            os.dup2(devnull, descriptor)
        os.close(devnull)

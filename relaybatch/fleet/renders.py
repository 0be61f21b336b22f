"""A cap on renders in flight per model held by the Prefect server, shared by every process that
runs a partition of the run (or any run of the account: the provider caps the account).

The engine's RenderSlots (relaybatch/engine/render_slots.py) on a global concurrency limit per model
(``relaybatch-renders:<model>``, limit = the cap, decay 0, no lease), with a holder limit per store
beside it (``relaybatch-renders:<model>:held-by:<store>``), moved together in one request as the
server budget's are (relaybatch/fleet/budget.py): the holder says how many slots the store holds,
whatever happened to the process. A create takes a slot of both before it is sent; a render's end
gives it back. The store's renders in flight (its checkpoint: submitted, polling) are the truth:
an execution brings its holder to that count when it starts (a dead process's renders still
rendering keep their slots, slots of renders that ended or were never created go back), and
afterwards after every end, in the background, so a render's end never waits for the server.

The count this process keeps of its holder (``held``) moves only with the server's answers, and a
request whose answer is lost may or may not have counted (``Unreachable``): then the holder is read
again (``_stale``). Two rules keep that read true, since a request the server has not processed yet
is not in it, and a count read too early is given back twice (the server then counts fewer renders
than the gateway renders, and a create past the cap is refused):

- the read waits for the takes in flight to answer, and no take starts while it runs;
- the background sync is never cancelled half-way (``close`` waits for it), and after a request
  that may reach the server late (a timeout), the read waits ``LATE_REQUEST_SECONDS``; until then
  the holder may count more than the store's renders, never fewer.

Per-job caps and caps learned from the gateway's refusals stay in the process (LocalRenderSlots).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from relaybatch.engine.render_slots import LocalRenderSlots
from relaybatch.server_limits import (
    LATE_REQUEST_SECONDS,
    MAX_SLOTS,
    LimitState,
    ServerLimits,
    Unreachable,
    may_land_later,
)

PREFIX = "relaybatch-renders"
# While a job waits for a slot another process holds: how often the server's count is read.
WATCH_EVERY_SECONDS = 1.0


class ServerRenderSlots(LocalRenderSlots):
    """Render slots whose per-model caps (``server_caps``) the Prefect server holds (module docstring)."""

    def __init__(
        self,
        limits: ServerLimits,
        holder: str,
        server_caps: dict[str, int],
        per_job: dict[str, int] | None = None,
        per_model: dict[str, int] | None = None,
    ) -> None:
        # The caps the server holds are not counted here too: in-process caps are the others.
        local_caps = {model: cap for model, cap in (per_model or {}).items() if model not in server_caps}
        super().__init__(per_job, local_caps)
        self.limits = limits
        self.holder = holder
        self.server_caps = dict(server_caps)
        self.held: Counter[str] = Counter()  # slots each model's holder has on the server, as last known
        self.waiting: set[str] = set()  # models a job waits for a slot of
        self.refused = 0  # creates the server's cap held back
        self._sync_wanted = asyncio.Event()
        self._stale = False  # a request failed half-way: read the holders before the next sync
        self._reread_not_before = 0.0  # a request that failed may still reach the server until then
        self._synced = False
        self._syncer: asyncio.Task[None] | None = None
        self._syncing = asyncio.Lock()  # held by a sync: ``close`` never cancels one half-way
        self._taking = 0  # takes waiting for the server's answer
        self._no_takes = asyncio.Event()  # set while no take waits for an answer
        self._no_takes.set()
        self._not_reading = asyncio.Event()  # cleared while the holders are read again
        self._not_reading.set()

    def name(self, model: str) -> str:
        return f"{PREFIX}:{model}"

    def holder_name(self, model: str) -> str:
        return f"{PREFIX}:{model}:held-by:{self.holder}"

    async def open(self) -> None:
        """Create the limits (each cap as the run's settings give it), read what this store holds."""
        for model, cap in self.server_caps.items():
            await self._until_reachable(functools.partial(self.limits.ensure, self.name(model), cap))
            holder = await self._until_reachable(
                functools.partial(self.limits.ensure, self.holder_name(model), MAX_SLOTS)
            )
            self.held[model] = holder.active_slots
        # Not synced yet: the execution first counts the renders it finds in flight (``occupy``),
        # then its first sync (asked by that, or the first ``take``) brings the holders to them.
        self._syncer = asyncio.create_task(self._sync_forever())

    async def close(self) -> None:
        """Bring every holder to the renders still in flight, then stop. A holder left with no slot
        is removed from the server (the next execution creates it again), so a run's partitions do
        not leave a limit each behind in the server's list; only this store's executions use it,
        one at a time (its execution lock)."""
        if self._syncer is not None:
            async with self._syncing:  # a sync under way ends first: its request is answered
                self._syncer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._syncer
        if self._stale and time.monotonic() < self._reread_not_before:
            return  # a request may still reach the server: the holder counts more, never fewer
        with contextlib.suppress(Unreachable):  # the next execution brings it right
            await self.sync()
            for model in self.server_caps:
                holder = await self.limits.read(self.holder_name(model))
                if holder is not None and holder.active_slots == 0:
                    await self.limits.delete(self.holder_name(model))

    async def _until_reachable(self, step: Callable[[], Awaitable[LimitState]]) -> LimitState:
        while True:
            try:
                return await step()
            except Unreachable:
                await self.limits.reachable_again()

    # -- the engine's RenderSlots ------------------------------------------------------------

    async def take(self, job: str, model: str) -> bool:
        if model not in self.server_caps:
            return self.take_here(job, model)
        if not self.has_room(job, model):
            return False
        await self.limits.reachable_again()  # no create while the server cannot be reached
        if not self._synced:
            self._sync_wanted.set()  # slots a dead process held for renders that ended go back
        while True:
            try:
                took = await self._take_one(model)
                break
            except Unreachable:
                await self.limits.reachable_again()
        if not took:
            self.refused += 1
            self.waiting.add(model)
            return False
        self.occupy(job, model)
        return True

    async def _take_one(self, model: str) -> bool:
        """One slot of the model's limit and of this store's holder, counted in ``held`` in the
        same step as the answer, never while the holders are read again (module docstring)."""
        await self._not_reading.wait()
        self._taking += 1
        self._no_takes.clear()
        try:
            took = await self.limits.increment([self.name(model), self.holder_name(model)], 1)
        except BaseException:  # unanswered, or cancelled by a stop: it may have counted (or may later)
            self._stale = True
            raise
        finally:
            self._taking -= 1
            if not self._taking:
                self._no_takes.set()
        if took:
            self.held[model] += 1
        return took

    def _failed(self, error: BaseException, giving_back: bool) -> None:
        """A request's answer is lost: read the holders before the next sync. A slot given back
        that may still reach the server waits ``LATE_REQUEST_SECONDS`` for that read: read
        earlier, it would be given back twice. (A slot taken that arrives late only counts one
        more than the store holds, until its next execution.)"""
        self._stale = True
        if giving_back and may_land_later(error):
            self._reread_not_before = time.monotonic() + LATE_REQUEST_SECONDS

    def occupy(self, job: str, model: str) -> None:
        super().occupy(job, model)
        if model in self.server_caps and self.models[model] > self.held[model]:
            self._sync_wanted.set()  # a render found in flight that the holder does not count

    def release(self, job: str, model: str) -> None:
        super().release(job, model)
        if model in self.server_caps:
            self._sync_wanted.set()

    async def freed(self) -> None:
        """Return once a model a job waits for has room on the server."""
        while True:
            await asyncio.sleep(WATCH_EVERY_SECONDS)
            for model in list(self.waiting):
                try:
                    state = await self.limits.read(self.name(model))
                except Unreachable:
                    await self.limits.reachable_again()
                    continue
                if state is None or state.active_slots < state.limit:
                    self.waiting.discard(model)
                    return

    # -- holders to the renders in flight ----------------------------------------------------

    async def sync(self) -> None:
        """Bring each holder to the renders in flight; one sync at a time (module docstring)."""
        async with self._syncing:
            await self._sync()

    async def _sync(self) -> None:
        if self._stale:  # a request that failed may or may not have counted: ask the server
            await self._read_holders()
        self._synced = True
        for model in self.server_caps:
            names = [self.name(model), self.holder_name(model)]
            extra = self.held[model] - self.models[model]
            giving_back = extra > 0
            try:
                if extra > 0:
                    self.held[model] -= extra  # lower first: a failed request leaves the server counting more
                    await self.limits.decrement(names, extra)
                elif extra < 0 and await self.limits.increment(names, -extra):
                    # Renders in flight the holder did not count (found on resume): counted once there
                    # is room; until then the gateway's own cap refuses creates past it.
                    self.held[model] -= extra
            except BaseException as error:
                self._failed(error, giving_back)
                raise

    async def _read_holders(self) -> None:
        """``held`` as the server counts it, read with no request of this store unanswered."""
        self._not_reading.clear()
        try:
            await self._no_takes.wait()
            for model in self.server_caps:
                holder = await self.limits.read(self.holder_name(model))
                self.held[model] = holder.active_slots if holder else 0
            self._stale = False
        finally:
            self._not_reading.set()

    async def _sync_forever(self) -> None:
        while True:
            await self._sync_wanted.wait()
            self._sync_wanted.clear()
            if self._stale:  # outside the lock: ``close`` does not wait for this
                await asyncio.sleep(max(0.0, self._reread_not_before - time.monotonic()))
            try:
                await self.sync()
            except Unreachable:
                await self.limits.reachable_again()
                self._sync_wanted.set()
                continue
            if any(self.models[model] > self.held[model] for model in self.server_caps):
                await asyncio.sleep(WATCH_EVERY_SECONDS)  # a shortfall waits for room: ask again later
                self._sync_wanted.set()

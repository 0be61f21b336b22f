"""One request limit shared by every process and machine that uses the same API key.

Prefect's global concurrency limits are the shared state: a limit with ``limit = burst`` and
``slot_decay_per_second = (rpm - burst) / 60`` is a token bucket kept by the Prefect server.
A process cannot take one token per request from it: ``rate_limit()`` tops out near 10 calls
per second per process and under-delivers when called often (research/prefect-3.md, B7). So each
process leases a *block* of tokens in one request (see ``prefect_lease`` for how, and why not
through ``rate_limit()`` itself), hands them out one request at a time, and passes each request
through its in-process limiter too (the engine's bucket, which also learns from 429s). The
gateway's 429 stays the final authority.

Without a Prefect server (ephemeral mode) the in-process limiter alone is used: a shared limit
only means something when every process talks to the same server.
"""

from __future__ import annotations

import asyncio
import math
import random
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from relaybatch.errors import UserError
from relaybatch.limiting import Limiter, RequestPurpose

DEFAULT_LIMIT_NAME = "relaybatch-gateway"

# Blocks hold half a second of the whole limit. The burst (two blocks) is taken out of the refill
# (see ``decay_per_second``), so it caps what a fleet sending flat out can get: 1 - burst / rpm,
# 96.7 % of the limit with one-second blocks, 98.3 % with half-second ones (measured: 96.0 % and
# 98 % in the steady part of benchmarks/fleet.py at 1,200 rpm). A lease is two API calls (read,
# take), and the whole fleet makes LEASES_PER_SECOND of them however many processes share it:
# 2 a second is far below what one Prefect server answers.
LEASES_PER_SECOND = 2.0

# The Prefect server's answer when a limit has no room for the slots asked for.
LOCKED = 423

# The server decays a limit by floor(rate * seconds since its last update), and every lease
# attempt (granted or refused) is an update: each one throws away the fraction of a slot earned
# since the previous one. Counting a request as 100 slots makes that loss a hundredth of a request
# per attempt instead of up to a whole one (measured: a 5/s limit otherwise delivers about 4/s).
SLOTS_PER_REQUEST = 100

Lease = Callable[[int], Awaitable[None]]

# While the server cannot be reached, a billed send asks for a lease again this often.
UNREACHABLE_RETRY_SECONDS = 1.0


def server_unreachable(error: BaseException) -> bool:
    """The Prefect server did not answer: refused, timed out, cut off, or a 5xx."""
    import httpx

    if isinstance(error, httpx.TransportError | OSError):
        return True
    return isinstance(error, httpx.HTTPStatusError) and error.response.status_code >= 500


@dataclass(frozen=True)
class SharedLimit:
    """A per-minute request limit shared through a Prefect global concurrency limit."""

    rpm: int
    name: str = DEFAULT_LIMIT_NAME
    burst: int | None = None
    block: int | None = None

    def __post_init__(self) -> None:
        if self.rpm <= 0:
            raise UserError(f"shared limit {self.name!r}: rpm must be a positive number, got {self.rpm}")
        if self.block is not None and self.block <= 0:
            raise UserError(f"shared limit {self.name!r}: block must be positive, got {self.block}")
        if self.burst is not None and self.burst < self.block_size:
            raise UserError(
                f"shared limit {self.name!r}: burst {self.burst} is smaller than the block {self.block_size}"
            )
        if self.burst_size >= self.rpm:
            raise UserError(
                f"shared limit {self.name!r}: burst {self.burst_size} leaves no room under {self.rpm} rpm"
            )

    @property
    def per_second(self) -> float:
        return self.rpm / 60

    @property
    def decay_per_second(self) -> float:
        """The shared bucket's refill rate. The gateway counts a sliding 60 s window, and any 60 s
        can see a full bucket (the burst) on top of 60 s of refill, so the refill leaves room for
        the burst: burst + 60 * decay = rpm."""
        return (self.rpm - self.burst_size) / 60

    @property
    def block_size(self) -> int:
        """Tokens taken per lease: about half a second of the whole limit, at least one."""
        if self.block is not None:
            return self.block
        return max(1, math.floor(self.per_second / LEASES_PER_SECOND))

    @property
    def burst_size(self) -> int:
        """The bucket's capacity: two blocks, so two processes can each hold one at once."""
        return self.burst if self.burst is not None else 2 * self.block_size

    @property
    def token_ttl(self) -> float:
        """Leased tokens unused for longer than this are dropped, so an idle process cannot save
        up a block and later add it on top of what the others are sending."""
        return max(1.0, 2 * self.block_size / self.decay_per_second)


class SharedLimitSettings(BaseSettings):
    """Environment switch for the shared limit (``RELAYBATCH_SHARED_LIMIT_*``)."""

    model_config = SettingsConfigDict(env_prefix="RELAYBATCH_SHARED_LIMIT_", extra="ignore")

    rpm: int | None = Field(default=None, description="Requests per minute for all processes together.")
    name: str = Field(default=DEFAULT_LIMIT_NAME, description="Prefect global concurrency limit name.")
    burst: int | None = None
    block: int | None = None

    def shared_limit(self) -> SharedLimit | None:
        if self.rpm is None:
            return None
        return SharedLimit(rpm=self.rpm, name=self.name, burst=self.burst, block=self.block)


def prefect_server_configured() -> bool:
    """True when PREFECT_API_URL points at a server that other processes can reach too."""
    from prefect.settings import PREFECT_API_URL

    return bool(PREFECT_API_URL.value())


def _server_sizes(limit: SharedLimit) -> tuple[int, float]:
    """The global limit's size and decay in slots (SLOTS_PER_REQUEST slots per request)."""
    return limit.burst_size * SLOTS_PER_REQUEST, limit.decay_per_second * SLOTS_PER_REQUEST


async def ensure_shared_limit(limit: SharedLimit) -> None:
    """Create the global concurrency limit, or bring its size and rate up to date."""
    from prefect import get_client
    from prefect.exceptions import ObjectAlreadyExists

    async with get_client() as client:
        try:
            await client.upsert_global_concurrency_limit_by_name(limit.name, *_server_sizes(limit))
        except ObjectAlreadyExists:
            # Prefect's upsert is read-then-create: another process created it in between.
            # The second attempt finds it and only updates what differs.
            await client.upsert_global_concurrency_limit_by_name(limit.name, *_server_sizes(limit))


def prefect_lease(limit: SharedLimit, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> Lease:
    """Take ``tokens`` from the global limit: wait until the bucket has room, then take them.

    Not ``prefect.concurrency.asyncio.rate_limit``, whose loop asks, gets refused, and sleeps the
    server's Retry-After. A refused request is an UPDATE that resets the limit's decay clock
    without decaying its slots, so every refusal throws away the refill earned since the last
    update; two busy processes asking that way got 57-64 % of the limit, and retrying on our own
    schedule still only 80 %. Reading the limit is free (the server decays the count it returns,
    on its own clock, and writes nothing), so we ask only when the room is there, and a refusal
    happens only when two processes race for the same room. The request that takes the slots is
    the one ``rate_limit`` sends (``mode="rate_limit"``), and a missing limit is an error, as
    with ``rate_limit(..., strict=True)``.
    """
    slots = limit.block_size * SLOTS_PER_REQUEST
    decay = limit.decay_per_second * SLOTS_PER_REQUEST

    async def lease(tokens: int) -> None:
        import httpx
        from prefect import get_client
        from prefect.exceptions import ObjectNotFound

        wanted = tokens * SLOTS_PER_REQUEST
        async with get_client() as client:
            while True:
                try:
                    state = await client.read_global_concurrency_limit_by_name(limit.name)
                except ObjectNotFound:
                    raise UserError(
                        f"shared limit {limit.name!r} does not exist on the Prefect server: "
                        "it must be created before acquiring (ensure_shared_limit)"
                    ) from None
                missing = state.active_slots + wanted - state.limit
                if missing > 0:
                    # Jitter keeps processes waiting for the same room from asking together.
                    await sleep(missing / decay + random.uniform(0.0, 0.2) * slots / decay)
                    continue
                try:
                    await client.increment_concurrency_slots(
                        names=[limit.name], slots=wanted, mode="rate_limit"
                    )
                except httpx.HTTPStatusError as exc:
                    if exc.response.status_code != LOCKED:
                        raise
                    continue  # another process took the room first: read again
                return

    return lease


class SharedLimiter:
    """A Limiter that takes each request's token from blocks leased from a shared bucket,
    then from the in-process limiter (which paces within the process and reacts to 429s)."""

    def __init__(
        self,
        limit: SharedLimit,
        lease: Lease,
        local: Limiter | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.limit = limit
        self._lease = lease
        self._local = local
        self._clock = clock
        self._tokens = 0
        self._leased_at = 0.0
        self._used = 0  # tokens of the last lease given out (next_block)
        # FIFO: while one request waits for a lease, the others queue behind it in order.
        self._lock = asyncio.Lock()
        self.leases = 0
        self.tokens_leased = 0
        self.tokens_dropped = 0
        self.lease_wait_seconds = 0.0
        self.unreachable_since: float | None = None  # the server did not answer a lease since then
        self._sleep = sleep

    @property
    def tokens_held(self) -> int:
        return self._tokens

    async def acquire(self, purpose: RequestPurpose = "submit") -> None:
        while not await self._shared_token(purpose):
            await self._sleep(UNREACHABLE_RETRY_SECONDS)  # a billed send waits for the server
        if self._local is not None:
            await self._local.acquire(purpose)

    async def _shared_token(self, purpose: RequestPurpose) -> bool:
        """A token of the shared bucket; False when the server cannot be reached and ``purpose``
        is a billed send. A poll then goes on without one: paid work is never held up by the
        server, and the in-process bucket still paces it (and slows on a 429)."""
        if self.unreachable_since is not None and purpose != "submit":
            return True
        async with self._lock:
            if self._tokens and self._clock() - self._leased_at > self.limit.token_ttl:
                self.tokens_dropped += self._tokens
                self._tokens = 0
            if not self._tokens:
                block = self.next_block()
                asked_at = self._clock()
                try:
                    await self._lease(block)
                except Exception as error:
                    if not server_unreachable(error):
                        raise
                    self._went_unreachable(error)
                    return purpose != "submit"
                self._came_back()
                self.lease_wait_seconds += self._clock() - asked_at
                self._tokens = block
                self._leased_at = self._clock()
                self._used = 0
                self.leases += 1
                self.tokens_leased += block
            self._tokens -= 1
            self._used += 1
        return True

    def next_block(self) -> int:
        """How many tokens the next lease takes: twice as many as the last lease gave out before it
        ran out or was dropped, between one and a block (a first lease takes one).

        A lease waits until the shared bucket has room for all it asks. While the running processes
        use the whole limit, room for a block of 10 comes about twice a second, and each of them
        waits for it; room for one token comes within a tenth of a second. So a process that starts
        then (a partition taking over a worker) gets its first tokens at once instead of waiting
        its turn for a block behind the others (up to 5 s measured in benchmarks/fleet.py at 1,200
        rpm), and doubles up to the block within four more leases when it really sends. A process
        that sends little (a few polls a second) keeps taking little, instead of leasing blocks it
        mostly drops (tokens unused past ``token_ttl``), which is room the others could have used.
        """
        return max(1, min(self.limit.block_size, 2 * self._used))

    def _went_unreachable(self, error: Exception) -> None:
        if self.unreachable_since is None:
            self.unreachable_since = self._clock()
            print(
                f"shared limit {self.limit.name!r}: the Prefect server cannot be reached "
                f"({type(error).__name__}): no new billed request is sent until it answers; polls of "
                "work already paid go on at this process's own pace",
                file=sys.stderr,
                flush=True,
            )

    def _came_back(self) -> None:
        if self.unreachable_since is not None:
            down = self._clock() - self.unreachable_since
            self.unreachable_since = None
            print(
                f"shared limit {self.limit.name!r}: the Prefect server answers again after {down:.0f} s: "
                "sending resumes",
                file=sys.stderr,
                flush=True,
            )

    def observe(
        self,
        status: int,
        headers: Mapping[str, str],
        rate_limit: Mapping[str, Any] | None = None,
    ) -> None:
        if self._local is not None:
            self._local.observe(status, headers, rate_limit)

    def no_answer(self) -> None:
        if self._local is not None:
            self._local.no_answer()


async def open_shared_limiter(limit: SharedLimit, local: Limiter | None = None) -> SharedLimiter:
    """A SharedLimiter on the configured Prefect server; the limit is created if missing."""
    if not prefect_server_configured():
        raise UserError(
            "a shared limit needs a Prefect server: set PREFECT_API_URL "
            "(e.g. http://127.0.0.1:4200/api after `prefect server start`)"
        )
    await ensure_shared_limit(limit)
    return SharedLimiter(limit, prefect_lease(limit), local=local)

"""Counters on the Prefect server that every process of a fleet shares: global concurrency limits
used as plain counters (no decay, no lease), and whether the server can be reached at all.

The server budget and the render cap (relaybatch/fleet/) keep their counts here. A global
concurrency limit is one row of the server's database: ``limit`` and ``active_slots``, both
integers (``sa.Integer``: 64 bits on SQLite, 32 bits on PostgreSQL, so at most ``MAX_SLOTS``).
``POST /v2/concurrency_limits/increment`` adds slots to every limit it names in one transaction,
all or none: refused (423) when any of them would pass its limit; ``/decrement`` takes slots away
(never below 0). Both survive a restart of the server (they are its database), unlike leases,
which Prefect keeps in memory by default and which expire (at most a day): that is why nothing
here uses a lease.

Plain HTTP, not Prefect's client: a client that has connected once retries a refused connection
for about a minute (2, 4, 8, 16, 32 s), and a retried decrement could take slots away twice. Here
every call is one attempt with short timeouts; a refused connection, a timeout or a 5xx answer
marks the server unreachable (``Unreachable``), and whoever needs it waits for ``reachable`` (a
probe of ``/health`` each second), each change said once on stderr.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from relaybatch.errors import UserError
from relaybatch.prefect_server import configured_api_url, configured_setting

# Prefect's limit and active_slots columns are sa.Integer: PostgreSQL's stops here.
MAX_SLOTS = 2_147_483_647
LOCKED = 423  # the server's answer to an increment that does not fit
PROBE_EVERY_SECONDS = 1.0
# While an execution holds something on the server: how often it checks that the server answers,
# so sends stop within that long of an outage even when nothing else asks the server.
WATCH_EVERY_SECONDS = 2.0
# A 503 is the server's SQLite saying "database is locked" (the transaction rolled back): asked
# again after each of these waits before the server counts as unreachable.
BUSY_RETRY_SECONDS = (0.1, 0.25, 0.5, 1.0, 2.0)


class Unreachable(Exception):
    """The Prefect server did not answer (refused, timed out, or a 5xx).

    ``maybe_applied``: the request may have reached the server and may still change its counts
    later (a timeout or a broken connection after it was sent). A refused connection was never
    sent, and a 5xx answer is a transaction the server rolled back."""

    def __init__(self, why: str, maybe_applied: bool = False) -> None:
        super().__init__(why)
        self.maybe_applied = maybe_applied


# A request that may have reached the server (``Unreachable.maybe_applied``) is taken to have
# been processed or dropped after this long: the server's SQLite waits up to 60 s for its lock.
LATE_REQUEST_SECONDS = 75.0


def may_land_later(error: BaseException) -> bool:
    """Whether a request that ended in ``error`` (its answer lost) may still reach the server and
    change its counts: yes after a cancellation, a timeout or a broken connection once sent; no
    after a refused connection or a 5xx (``Unreachable`` without ``maybe_applied``). Such a
    request is taken to have landed or been dropped after ``LATE_REQUEST_SECONDS``."""
    return not isinstance(error, Unreachable) or error.maybe_applied


@dataclass(frozen=True)
class LimitState:
    name: str
    limit: int
    active_slots: int
    active: bool


class ServerLimits:
    """Global concurrency limits on one Prefect server, and whether it answers (module docstring)."""

    def __init__(
        self,
        api_url: str,
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
        out: TextIO | None = None,
        transport: Any = None,
    ) -> None:
        import httpx

        self.api_url = api_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.api_url,
            headers=headers or {},
            # A refused connection fails at once; a busy server on a loaded machine may take seconds.
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
            transport=transport,
        )
        self._out = out
        self.down_since: float | None = None
        self.outages = 0
        self._up = asyncio.Event()
        self._up.set()
        self._probe: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        # Said once per outage to whoever waits: what stops, what goes on.
        self.waiting_for: Callable[[], str] = lambda: ""

    @property
    def reachable(self) -> bool:
        return self._up.is_set()

    # -- the limits -------------------------------------------------------------------------

    async def read(self, name: str) -> LimitState | None:
        response = await self._request("GET", f"/v2/concurrency_limits/{name}")
        if response.status_code == 404:
            return None
        _check(response, f"reading limit {name!r}")
        body = response.json()
        return LimitState(name, int(body["limit"]), int(body["active_slots"]), bool(body.get("active", True)))

    async def ensure(self, name: str, limit: int) -> LimitState:
        """The limit named ``name`` with ``limit`` slots and no decay: created if missing, its size
        set if it differs (its active slots are never touched)."""
        if not 0 < limit <= MAX_SLOTS:
            raise UserError(f"limit {name!r}: {limit} slots is outside 1..{MAX_SLOTS}")
        for _ in range(3):
            state = await self.read(name)
            if state is None:
                body = {"name": name, "limit": limit, "slot_decay_per_second": 0.0}
                response = await self._request("POST", "/v2/concurrency_limits/", json=body)
                if response.status_code == 409:
                    continue  # another process created it in between: read it again
                _check(response, f"creating limit {name!r}")
                return LimitState(name, limit, 0, True)
            if state.limit != limit:
                response = await self._request(
                    "PATCH", f"/v2/concurrency_limits/{name}", json={"limit": limit}
                )
                _check(response, f"resizing limit {name!r}")
                state = LimitState(name, limit, state.active_slots, state.active)
            return state
        raise UserError(f"limit {name!r}: could not create it on the Prefect server at {self.api_url}")

    async def create(self, name: str, limit: int, active_slots: int = 0) -> bool:
        """Create the limit with ``active_slots`` already counted; False when it exists already
        (the server refuses a second limit of one name: whoever creates it first is the one)."""
        body = {"name": name, "limit": limit, "active_slots": active_slots, "slot_decay_per_second": 0.0}
        response = await self._request("POST", "/v2/concurrency_limits/", json=body)
        if response.status_code == 409:
            return False
        _check(response, f"creating limit {name!r}")
        return True

    async def increment(self, names: list[str], slots: int) -> bool:
        """Add ``slots`` to every limit in ``names`` at once; False (nothing added) when one is full."""
        body = {"names": names, "slots": slots, "mode": "concurrency"}
        response = await self._request("POST", "/v2/concurrency_limits/increment", json=body)
        if response.status_code in (LOCKED, 422):
            return False  # 422: more slots than a limit holds at all
        _check(response, f"taking {slots} slots of {names}")
        return True

    async def decrement(self, names: list[str], slots: int) -> None:
        """Take ``slots`` away from every limit in ``names`` (never below 0)."""
        body = {"names": names, "slots": slots}
        response = await self._request("POST", "/v2/concurrency_limits/decrement", json=body)
        _check(response, f"giving back {slots} slots of {names}")

    async def delete(self, name: str) -> None:
        """Remove the limit named ``name`` (nothing happens when it is gone already)."""
        response = await self._request("DELETE", f"/v2/concurrency_limits/{name}")
        if response.status_code != 404:
            _check(response, f"deleting limit {name!r}")

    # -- reachability -----------------------------------------------------------------------

    def start_watch(self) -> None:
        """Check every WATCH_EVERY_SECONDS that the server answers (until ``aclose``)."""
        if self._watch is None:
            self._watch = asyncio.create_task(self._watch_health())

    async def _watch_health(self) -> None:
        while True:
            await asyncio.sleep(WATCH_EVERY_SECONDS)
            if not self._up.is_set():
                continue  # the probe is on it
            with contextlib.suppress(Unreachable):
                await self._request("GET", "/health")

    async def reachable_again(self) -> None:
        """Return once the server answers (at once when nothing says it does not)."""
        if self._up.is_set():
            return
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._probe_until_up())
        await self._up.wait()

    def mark_down(self, why: str) -> None:
        if not self._up.is_set():
            return
        self._up.clear()
        self.down_since = time.monotonic()
        self.outages += 1
        doing = self.waiting_for()
        self._say(
            f"Prefect server at {self.api_url} cannot be reached ({why}): no new billed request is sent "
            f"until it answers{'; ' + doing if doing else ''}"
        )
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._probe_until_up())

    async def _probe_until_up(self) -> None:
        while not self._up.is_set():
            await asyncio.sleep(PROBE_EVERY_SECONDS)
            try:
                response = await self._http.get("/health")
            except Exception:
                continue
            if response.status_code == 200:
                down = time.monotonic() - (self.down_since or time.monotonic())
                self._say(
                    f"Prefect server at {self.api_url} answers again after {down:.0f} s: sending resumes"
                )
                self.down_since = None
                self._up.set()

    def _say(self, line: str) -> None:
        print(line, file=self._out or sys.stderr, flush=True)

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        for delay in (*BUSY_RETRY_SECONDS, None):
            try:
                response = await self._http.request(method, path, **kwargs)
            except httpx.TransportError as error:
                self.mark_down(type(error).__name__)
                never_sent = isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))
                raise Unreachable(str(error) or type(error).__name__, not never_sent) from error
            if response.status_code == 503 and delay is not None:
                # A busy SQLite server ("database is locked"): rolled back, nothing written; asked again.
                await asyncio.sleep(delay)
                continue
            if response.status_code >= 500:
                self.mark_down(f"HTTP {response.status_code}")
                raise Unreachable(f"HTTP {response.status_code}")
            return response
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def aclose(self) -> None:
        for task in (self._probe, self._watch):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self._http.aclose()


def _check(response: Any, doing: str) -> None:
    if response.status_code >= 400:
        raise UserError(f"Prefect server: {doing}: HTTP {response.status_code} {response.text[:200]}")


def api_headers() -> dict[str, str]:
    """What Prefect's own client sends to authenticate: a Prefect Cloud key, or a self-hosted
    server's basic auth string (``PREFECT_API_AUTH_STRING``, user:password)."""
    key = configured_setting("PREFECT_API_KEY")
    if key:
        return {"Authorization": f"Bearer {key}"}
    auth = configured_setting("PREFECT_API_AUTH_STRING")
    if auth:
        return {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()}
    return {}


def server_limits(what: str, out: TextIO | None = None) -> ServerLimits:
    """The configured Prefect server's limits; ``what`` needs one, and says so when none is set."""
    url = configured_api_url()
    if url is None:
        raise UserError(
            f"{what} is held by a Prefect server, and none is configured: set PREFECT_API_URL "
            "(e.g. http://127.0.0.1:4200/api after `prefect server start`)"
        )
    return ServerLimits(url, api_headers(), out=out)

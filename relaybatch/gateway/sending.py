"""The send loop every call goes through: limiter, attempt, classify the outcome, retry or raise.

One place decides what a failure means, so the same rules hold for plain JSON answers, streams
and downloads: ``retry.py`` says what may be retried and how long to wait, ``errors.py`` says which
exception an answer is, and this module applies them in order.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from relaybatch.gateway.auth import AuthStyle
from relaybatch.gateway.errors import (
    APIStatusError,
    BrokenResponse,
    ConnectFailed,
    GatewayError,
    OutcomeUnknown,
    RateLimited,
    StalledConnection,
    TransportError,
    error_from_response,
    is_error_document,
)
from relaybatch.gateway.exchange import Exchange, HttpxExchange
from relaybatch.gateway.request_building import RequestBuilder, RequestParts
from relaybatch.gateway.retry import (
    CallKind,
    RetryPolicy,
    may_retry_status,
    may_retry_unanswered,
    retry_delay,
)
from relaybatch.gateway.transport import never_sent
from relaybatch.limiting import Limiter, RequestPurpose

Sleep = Callable[[float], Awaitable[None]]
ResultT = TypeVar("ResultT")


@dataclass
class SendTiming:
    """Where the time of the calls made in one context went: waiting for the limiter, and when
    the last request left (after its limiter wait), so send-to-answer excludes the wait."""

    limiter_wait_seconds: float = 0.0
    last_sent_at: float | None = None  # time.monotonic() of the last request's send
    requests: int = 0
    # The caller took the next request's limiter token already (``Sender.take_token``): the engine
    # does, before it writes ``sending``, so an item waiting at the limit is never ``sending``.
    token_taken: bool = False


# Set by a caller (the engine, per item) to learn the timing of the calls it makes; None: not asked.
SEND_TIMING: contextvars.ContextVar[SendTiming | None] = contextvars.ContextVar("send_timing", default=None)


@dataclass(frozen=True)
class Call:
    """One logical call: where it goes, how it authenticates, and what a repeat would cost."""

    method: str
    path: str
    auth: AuthStyle
    kind: CallKind
    purpose: RequestPurpose
    json: Any = None
    params: Mapping[str, str] | None = None
    timeout: httpx.Timeout | None = None
    extra_headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.method} {self.path}"


@dataclass
class Sender:
    """Sends calls with retries; the limiter sees every attempt, the sleep is injectable for tests.

    ``exchange`` sends plain JSON calls (exchange.py); streams and downloads always go through
    ``http``, whose responses can be read piece by piece.
    """

    http: httpx.AsyncClient
    headers_for: Callable[[AuthStyle], dict[str, str]]
    limiter: Limiter
    policy: RetryPolicy
    sleep: Sleep = asyncio.sleep
    random_fraction: Callable[[], float] = random.random
    exchange: Exchange | None = None
    _builder: RequestBuilder = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._builder = RequestBuilder(self.http, self.headers_for)
        if self.exchange is None:
            self.exchange = HttpxExchange(self.http)

    async def json(self, call: Call) -> Any:
        """Send and return the parsed JSON body of a success answer."""
        try:
            return await self._with_retries(call, lambda: self._whole_attempt(call))
        except _AnsweredWithError as answered:
            raise self._final_status_error(call, answered.error) from None

    async def run(self, call: Call, consume: Callable[[httpx.Response], Awaitable[ResultT]]) -> ResultT:
        """Send ``call`` and hand a success answer to ``consume`` (aggregate a stream, write a
        file). Error answers, dropped connections and cut-off bodies are retried or raised by the
        same rules as plain JSON calls, whichever way the body is read."""
        return await self._with_retries(call, lambda: self._streamed_attempt(call, consume))

    async def take_token(self, purpose: RequestPurpose = "submit") -> None:
        """Wait for the limiter now, for the next request sent in this context (``SEND_TIMING``).

        The engine takes the token of a billed create before it writes the item ``sending``, so
        between that write and the request's first byte nothing waits for the limit."""
        timing = SEND_TIMING.get()
        if timing is None:
            timing = SendTiming()
            SEND_TIMING.set(timing)
        waiting_since = time.monotonic()
        await self.limiter.acquire(purpose)
        timing.limiter_wait_seconds += time.monotonic() - waiting_since
        timing.token_taken = True

    async def _acquire(self, purpose: RequestPurpose) -> None:
        """The limiter's token for one attempt, unless the caller took it already."""
        timing = SEND_TIMING.get()
        if timing is not None and timing.token_taken:
            timing.token_taken = False
        else:
            waiting_since = time.monotonic()
            await self.limiter.acquire(purpose)
            if timing is not None:
                timing.limiter_wait_seconds += time.monotonic() - waiting_since
        if timing is not None:
            timing.last_sent_at = time.monotonic()
            timing.requests += 1

    async def _with_retries(self, call: Call, attempt_once: Callable[[], Awaitable[ResultT]]) -> ResultT:
        attempt = 0
        while True:
            attempt += 1
            await self._acquire(call.purpose)
            try:
                return await attempt_once()
            except _NoAnswer as missing:
                if not await self._may_retry_unanswered(call, attempt, missing.failure):
                    raise self._unanswered(call, missing.failure) from None
            except _ErrorAnswer as answered:
                error = answered.error
                if attempt >= self.policy.max_attempts or not may_retry_status(call.kind, error.status):
                    raise self._final_status_error(call, error) from None
                await self.sleep(retry_delay(attempt, self.policy, error.headers, self.random_fraction()))

    async def _whole_attempt(self, call: Call) -> Any:
        assert self.exchange is not None
        try:
            answer = await self.exchange(self._build(call))
        except httpx.TransportError as exc:
            self.limiter.no_answer()
            raise _NoAnswer(_transport_error(call, exc, self.http.timeout)) from None
        if answer.status >= 400:
            raise _ErrorAnswer(self._error(answer.status, answer.headers, answer.body))
        self.limiter.observe(answer.status, answer.headers, None)
        return _parse_json(call, answer.status, answer.body)

    async def _streamed_attempt(
        self, call: Call, consume: Callable[[httpx.Response], Awaitable[ResultT]]
    ) -> ResultT:
        try:
            response = await self.http.send(self._build(call).httpx_request(), stream=True)
        except httpx.TransportError as exc:
            self.limiter.no_answer()
            raise _NoAnswer(_transport_error(call, exc, self.http.timeout)) from None
        try:
            if response.status_code >= 400:
                try:
                    raw = await response.aread()
                except httpx.TransportError:
                    raw = b""
                raise _ErrorAnswer(self._error(response.status_code, response.headers, raw))
            self.limiter.observe(response.status_code, response.headers, None)
            try:
                return await consume(response)
            except httpx.TransportError as exc:
                raise _NoAnswer(_transport_error(call, exc, self.http.timeout)) from None
            except BrokenResponse as exc:
                raise _NoAnswer(exc) from None
        finally:
            await response.aclose()

    async def _may_retry_unanswered(self, call: Call, attempt: int, failure: TransportError) -> bool:
        """Wait and say yes when a request that got no usable answer may be sent again."""
        safe = isinstance(failure, ConnectFailed)
        if attempt >= self.policy.max_attempts:
            return False
        if not may_retry_unanswered(call.kind, never_sent=safe, policy=self.policy):
            return False
        await self.sleep(retry_delay(attempt, self.policy, {}, self.random_fraction()))
        return True

    def _build(self, call: Call) -> RequestParts:
        return self._builder.build(
            call.method,
            call.path,
            call.auth,
            json=call.json,
            params=call.params,
            timeout=call.timeout,
            extra_headers=call.extra_headers,
        )

    def _error(self, status: int, headers: Mapping[str, str], raw: bytes) -> APIStatusError:
        """The exception an error answer stands for; the limiter learns from it first."""
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        error = error_from_response(status, headers, body)
        self.limiter.observe(status, headers, error.rate_limit if isinstance(error, RateLimited) else None)
        return error

    def _unanswered(self, call: Call, error: GatewayError) -> GatewayError:
        """No usable answer: for billed work that may have reached the gateway, the outcome is unknown."""
        if call.kind is CallKind.READ or isinstance(error, ConnectFailed):
            return error
        return OutcomeUnknown(call.label, error)

    def _final_status_error(self, call: Call, error: APIStatusError) -> GatewayError:
        """A create the gateway may have processed before failing (5xx, 529) has an unknown outcome."""
        if call.kind is CallKind.BILLED_CREATE and (error.status >= 500 or error.status < 400):
            return OutcomeUnknown(call.label, error)
        return error


def _parse_json(call: Call, status: int, raw: bytes) -> Any:
    try:
        # json.loads skips leading whitespace, so the padding chunks long image requests get
        # before the document need no special case.
        body = json.loads(raw)
    except ValueError:
        raise _NoAnswer(
            BrokenResponse(f"{call.label}: the answer is not complete JSON ({len(raw)} bytes)")
        ) from None
    if is_error_document(body):
        # An error written after a 200 status (behind padding, say) is still an error answer.
        raise _AnsweredWithError(error_from_response(status, {}, body))
    return body


class _NoAnswer(Exception):
    """An attempt got no usable answer: nothing arrived, or the body was cut off or unreadable."""

    def __init__(self, failure: TransportError) -> None:
        super().__init__(str(failure))
        self.failure = failure


class _ErrorAnswer(Exception):
    """An attempt was answered with an error status."""

    def __init__(self, error: APIStatusError) -> None:
        super().__init__(str(error))
        self.error = error


class _AnsweredWithError(Exception):
    """Carries an error document found in a success answer out of the retry loop, never retried."""

    def __init__(self, error: APIStatusError) -> None:
        super().__init__(str(error))
        self.error = error


def _transport_error(call: Call, exc: httpx.TransportError, default: httpx.Timeout) -> TransportError:
    """Our exception for an httpx failure; messages name the call, never headers or the key."""
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if never_sent(exc):
        return ConnectFailed(f"{call.label}: could not connect ({detail})")
    if isinstance(exc, httpx.ReadTimeout):
        read = (call.timeout or default).read
        return StalledConnection(
            f"{call.label}: the gateway sent nothing for {read:g} s (read timeout; "
            "raise the client's read timeout if the gateway is slower than that)"
            if read is not None
            else f"{call.label}: read timed out"
        )
    return BrokenResponse(f"{call.label}: connection failed mid-exchange ({detail})")

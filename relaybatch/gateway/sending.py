"""The send loop every call goes through: limiter, attempt, classify the outcome, retry or raise.

One place decides what a failure means, so the same rules hold for plain JSON answers, streams
and downloads: ``retry.py`` says what may be retried and how long to wait, ``errors.py`` says which
exception an answer is, and this module applies them in order.
"""

from __future__ import annotations

import asyncio
import json
import random
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
from relaybatch.gateway.request_building import RequestBuilder
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
    """Sends calls with retries; the limiter sees every attempt, the sleep is injectable for tests."""

    http: httpx.AsyncClient
    headers_for: Callable[[AuthStyle], dict[str, str]]
    limiter: Limiter
    policy: RetryPolicy
    sleep: Sleep = asyncio.sleep
    random_fraction: Callable[[], float] = random.random
    _builder: RequestBuilder = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._builder = RequestBuilder(self.http, self.headers_for)

    async def json(self, call: Call) -> Any:
        """Send and return the parsed JSON body of a success answer."""
        try:
            return await self.run(call, self._parse_json)
        except _AnsweredWithError as answered:
            raise self._final_status_error(call, answered.error) from None

    async def run(self, call: Call, consume: Callable[[httpx.Response], Awaitable[ResultT]]) -> ResultT:
        """Send ``call`` and hand a success answer to ``consume`` (read JSON, aggregate a stream,
        write a file). Error answers, dropped connections and cut-off bodies are retried or raised
        here, by the same rules whichever way the body is read."""
        attempt = 0
        while True:
            attempt += 1
            await self.limiter.acquire(call.purpose)
            try:
                response = await self.http.send(self._build(call), stream=True)
            except httpx.TransportError as exc:
                failure = _transport_error(call, exc, self.http.timeout)
                if not await self._may_retry_unanswered(call, attempt, failure):
                    raise self._unanswered(call, failure) from None
                continue
            try:
                if response.status_code < 400:
                    self._observe(response, None)
                    try:
                        return await consume(response)
                    except httpx.TransportError as exc:
                        failure = _transport_error(call, exc, self.http.timeout)
                    except BrokenResponse as exc:
                        failure = exc
                    if not await self._may_retry_unanswered(call, attempt, failure):
                        raise self._unanswered(call, failure) from None
                    continue
                error = await self._read_error(call, response)
            finally:
                await response.aclose()
            if attempt < self.policy.max_attempts and may_retry_status(call.kind, error.status):
                await self.sleep(retry_delay(attempt, self.policy, error.headers, self.random_fraction()))
                continue
            raise self._final_status_error(call, error)

    async def _may_retry_unanswered(self, call: Call, attempt: int, failure: TransportError) -> bool:
        """Wait and say yes when a request that got no usable answer may be sent again."""
        safe = isinstance(failure, ConnectFailed)
        if attempt >= self.policy.max_attempts:
            return False
        if not may_retry_unanswered(call.kind, never_sent=safe, policy=self.policy):
            return False
        await self.sleep(retry_delay(attempt, self.policy, {}, self.random_fraction()))
        return True

    async def _parse_json(self, response: httpx.Response) -> Any:
        raw = await response.aread()
        try:
            # json.loads skips leading whitespace, so the padding chunks long image requests get
            # before the document need no special case.
            body = json.loads(raw)
        except ValueError:
            label = f"{response.request.method} {response.request.url.path}"
            raise BrokenResponse(f"{label}: the answer is not complete JSON ({len(raw)} bytes)") from None
        if is_error_document(body):
            # An error written after a 200 status (behind padding, say) is still an error answer.
            raise _AnsweredWithError(error_from_response(response.status_code, {}, body))
        return body

    def _build(self, call: Call) -> httpx.Request:
        return self._builder.build(
            call.method,
            call.path,
            call.auth,
            json=call.json,
            params=call.params,
            timeout=call.timeout,
            extra_headers=call.extra_headers,
        )

    async def _read_error(self, call: Call, response: httpx.Response) -> APIStatusError:
        try:
            raw = await response.aread()
        except httpx.TransportError:
            raw = b""
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        error = error_from_response(response.status_code, response.headers, body)
        self._observe(response, error.rate_limit if isinstance(error, RateLimited) else None)
        return error

    def _observe(self, response: httpx.Response, rate_limit: Mapping[str, Any] | None) -> None:
        self.limiter.observe(response.status_code, response.headers, rate_limit)

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


class _AnsweredWithError(Exception):
    """Carries an error document found in a success answer out of ``run`` without retrying it."""

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

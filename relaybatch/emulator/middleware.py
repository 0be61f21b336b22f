"""The gateway layer every public route passes through, as plain ASGI (no per-request task overhead).

In order: log the request (method, path, body hash, account; its answer's status once it
starts), apply the account's rate limit (429 with ``error.rate_limit`` when the window is full),
apply an injected fault, run the route, and put the ``x-ratelimit-*`` headers on the answer.
Admin routes under ``/_emulator/`` skip it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from relaybatch.emulator.auth import read_presented
from relaybatch.emulator.errors import ErrorShape, error_response, shape_for_path, shaped_error
from relaybatch.emulator.faults import FAULT_HEADER, INVALID_JSON, DroppedConnection, Fault, FaultSyntaxError
from relaybatch.emulator.ratelimit import WindowReport, rate_limit_body
from relaybatch.emulator.state import Account, EmulatorState, RequestRecord, hash_body

ADMIN_PREFIX = "/_emulator/"
# Injected latency waits here; a module attribute so tests can record the wait instead of sleeping.
sleep = asyncio.sleep


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


_FAULT_HEADER_BYTES = FAULT_HEADER.encode()


def _fault_header(scope: Scope) -> str | None:
    for raw_name, raw_value in scope["headers"]:
        if raw_name.lower() == _FAULT_HEADER_BYTES:
            return str(raw_value.decode("latin-1"))
    return None


def _with_headers(send: Send, extra: list[tuple[bytes, bytes]], record: RequestRecord) -> Send:
    """``send`` that adds ``extra`` headers to the answer and notes its status in the request log."""

    async def send_with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            record.status = int(message["status"])
            if extra:
                message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return send_with_headers


async def _break_connection(send: Send) -> None:
    """Start an answer that promises a body, then abort: the client sees a broken connection."""
    headers = [(b"content-type", b"application/json"), (b"content-length", b"1024")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    raise DroppedConnection("emulator fault: connection dropped")


class GatewayMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(ADMIN_PREFIX):
            await self.app(scope, receive, send)
            return
        state: EmulatorState = scope["app"].state.emulator
        body = await _read_body(receive)
        body_hash = hash_body(body)
        presented = read_presented(scope["headers"])
        request_state = scope.setdefault("state", {})
        request_state["body_hash"] = body_hash
        request_state["body"] = body  # request_body() hands it to routes without re-reading
        request_state["presented_keys"] = presented  # authenticate() reuses it
        account = self._account(state, presented.any_key())
        name = account.name if account else None
        record = state.record_request(scope["method"], scope["path"], body_hash, name)

        window: WindowReport | None = None
        if account is not None and account.rate_limit_rpm > 0:
            window = state.rate_limiter.admit(account.name, account.rate_limit_rpm, state.clock.now())
        extra = [(k.encode(), v.encode()) for k, v in window.headers().items()] if window else []
        send = _with_headers(send, extra, record)
        shape = shape_for_path(scope["path"])
        if window is not None and not window.allowed:
            message = f"rate limit exceeded: {window.limit_rpm} requests per minute"
            await _error(shape, 429, message, rate_limit=window.body())(scope, receive, send)
            return

        try:
            fault = state.faults.pick(_fault_header(scope), scope["path"])
        except FaultSyntaxError as error:
            await _error(ErrorShape.STANDARD, 400, f"{FAULT_HEADER}: {error}")(scope, receive, send)
            return
        receive = _replay(body, receive)
        if fault is None:
            await self.app(scope, receive, send)
            return
        await self._faulty(scope, receive, send, fault, state, account, shape)

    @staticmethod
    def _account(state: EmulatorState, key: str | None) -> Account | None:
        if key is None or key in state.revoked_keys:
            return None
        return state.account_for_key(key)

    async def _faulty(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        fault: Fault,
        state: EmulatorState,
        account: Account | None,
        shape: ErrorShape,
    ) -> None:
        if fault.invalid_json:
            scope.setdefault("state", {})[INVALID_JSON] = True  # the text route reads it (routes.py)
        if fault.latency:
            await sleep(fault.latency)
        if fault.drop == "before":
            await _break_connection(send)
        if fault.status is not None:
            extra: dict[str, Any] = {}
            if fault.status == 429:
                rpm = account.rate_limit_rpm if account and account.rate_limit_rpm else None
                extra["rate_limit"] = rate_limit_body(rpm or state.config.fallback_rate_limit_rpm)
            message = f"emulator fault: injected status {fault.status}"
            await _error(shape, fault.status, message, **extra)(scope, receive, send)
            return
        if fault.drop is None and not fault.truncate:
            await self.app(scope, receive, send)
            return
        start, body = await _capture(self.app, scope, receive)
        if fault.drop == "after":
            await _break_connection(send)
        cut = body[: len(body) // 2]
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(cut)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": cut, "more_body": False})


def _error(shape: ErrorShape, status: int, message: str, **extra: Any) -> Response:
    if shape is ErrorShape.STANDARD:
        return error_response(status, None, message, **extra)
    return shaped_error(shape, status, message)


async def _capture(app: ASGIApp, scope: Scope, receive: Receive) -> tuple[Message, bytes]:
    """Run the route to the end, keeping its answer instead of sending it."""
    start: Message = {}
    chunks: list[bytes] = []

    async def keep(message: Message) -> None:
        nonlocal start
        if message["type"] == "http.response.start":
            start = message
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, keep)
    return start, b"".join(chunks)

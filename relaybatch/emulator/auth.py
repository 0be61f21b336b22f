"""Authentication per route, exactly as the interface's table says, with the real header names.

- ``bearer``: ``Authorization: Bearer KEY``; chat completions, responses, video, pricing,
  judgment, images, tasks, web search.
- ``anthropic``: ``x-api-key: KEY`` and ``anthropic-version: 2023-06-01``; messages.
- ``goog``: ``x-goog-api-key: KEY``; generate-content.
- ``bearer_or_x_api_key``: either ``Authorization: Bearer`` or ``x-api-key``; the model catalog.

A missing, unknown or revoked key is 401 ``authentication_error`` (web search: 403 for a revoked key,
its flat envelope); the messages route without the version header is 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from starlette.requests import Request
from starlette.responses import Response

from relaybatch.emulator.errors import ErrorShape, shaped_error
from relaybatch.emulator.state import Account, EmulatorState

Scheme = Literal["bearer", "anthropic", "goog", "bearer_or_x_api_key"]
ANTHROPIC_VERSION = "2023-06-01"
KEY_HEADERS = {
    "bearer": "Authorization: Bearer",
    "anthropic": "x-api-key",
    "goog": "x-goog-api-key",
    "bearer_or_x_api_key": "Authorization: Bearer or x-api-key",
}


@dataclass(slots=True)
class PresentedKeys:
    """What a request carries in the auth headers, read once per request."""

    bearer: str | None = None
    x_api_key: str | None = None
    goog: str | None = None
    anthropic_version: str | None = None

    def any_key(self) -> str | None:
        return self.bearer or self.x_api_key or self.goog


def read_presented(raw_headers: list[tuple[bytes, bytes]]) -> PresentedKeys:
    """One pass over the raw ASGI headers (cheaper than a Headers object asked four times)."""
    found = PresentedKeys()
    for raw_name, raw_value in raw_headers:
        name = raw_name.lower()
        if name == b"authorization":
            scheme, _, value = raw_value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and value.strip():
                found.bearer = value.strip()
        elif name == b"x-api-key":
            found.x_api_key = raw_value.decode("latin-1") or None
        elif name == b"x-goog-api-key":
            found.goog = raw_value.decode("latin-1") or None
        elif name == b"anthropic-version":
            found.anthropic_version = raw_value.decode("latin-1")
    return found


def presented_keys(request: Request) -> PresentedKeys:
    """The request's keys: as the gateway middleware read them, or read now."""
    state = request.scope.get("state") or {}
    presented = state.get("presented_keys")
    return presented if isinstance(presented, PresentedKeys) else read_presented(request.scope["headers"])


def key_for_scheme(presented: PresentedKeys, scheme: Scheme) -> str | None:
    """The key the request presents in the header(s) this scheme reads."""
    if scheme == "bearer":
        return presented.bearer
    if scheme == "anthropic":
        return presented.x_api_key
    if scheme == "goog":
        return presented.goog
    return presented.bearer or presented.x_api_key


def default_shape(scheme: Scheme) -> ErrorShape:
    return ErrorShape.GENERATE_CONTENT if scheme == "goog" else ErrorShape.STANDARD


def authenticate(request: Request, scheme: Scheme, *, shape: ErrorShape | None = None) -> Account | Response:
    """The caller's account, or the error response to return as is."""
    state: EmulatorState = request.app.state.emulator
    shape = shape or default_shape(scheme)
    presented = presented_keys(request)
    key = key_for_scheme(presented, scheme)
    if key is None:
        return shaped_error(shape, 401, f"missing API key: send it as {KEY_HEADERS[scheme]}")
    if key in state.revoked_keys:
        # Web search's documented answer to a revoked key is 403; every other route says 401.
        status = 403 if shape is ErrorShape.FLAT else 401
        return shaped_error(shape, status, "the API key has been revoked")
    account = state.account_for_key(key)
    if account is None:
        return shaped_error(shape, 401, "invalid API key")
    if scheme == "anthropic":
        version = presented.anthropic_version
        if version != ANTHROPIC_VERSION:
            found = f"'{version}'" if version else "missing"
            return shaped_error(
                shape, 400, f"anthropic-version header must be {ANTHROPIC_VERSION} (found {found})"
            )
    return account

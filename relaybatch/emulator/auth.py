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

from typing import Literal

from starlette.datastructures import Headers
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


def _bearer(headers: Headers) -> str | None:
    scheme, _, key = headers.get("authorization", "").partition(" ")
    return key.strip() or None if scheme.lower() == "bearer" else None


def key_for_scheme(headers: Headers, scheme: Scheme) -> str | None:
    """The key the request presents in the header(s) this scheme reads."""
    if scheme == "bearer":
        return _bearer(headers)
    if scheme == "anthropic":
        return headers.get("x-api-key") or None
    if scheme == "goog":
        return headers.get("x-goog-api-key") or None
    return _bearer(headers) or headers.get("x-api-key") or None


def default_shape(scheme: Scheme) -> ErrorShape:
    return ErrorShape.GENERATE_CONTENT if scheme == "goog" else ErrorShape.STANDARD


def authenticate(request: Request, scheme: Scheme, *, shape: ErrorShape | None = None) -> Account | Response:
    """The caller's account, or the error response to return as is."""
    state: EmulatorState = request.app.state.emulator
    shape = shape or default_shape(scheme)
    key = key_for_scheme(request.headers, scheme)
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
        version = request.headers.get("anthropic-version")
        if version != ANTHROPIC_VERSION:
            found = f"'{version}'" if version else "missing"
            return shaped_error(
                shape, 400, f"anthropic-version header must be {ANTHROPIC_VERSION} (found {found})"
            )
    return account

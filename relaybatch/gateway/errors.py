"""The gateway client's exceptions, mapped from HTTP status and ``error.type`` in one place.

GatewayError
├── InvalidRequest            refused before sending: the request does not fit the route's schema
├── UnexpectedResponse        a 2xx answer whose body is not the documented shape
├── OutcomeUnknown            a billed create may have been processed and no usable answer came back;
│                             never resend it blindly (``cause`` holds the underlying error)
├── TransportError            no usable answer (connect failure, timeout, dropped or truncated body)
│   ├── ConnectFailed         no connection was made: nothing was sent, always safe to retry
│   ├── StalledConnection     no byte arrived within the read timeout (the gateway went quiet)
│   └── BrokenResponse        the connection dropped mid-answer or the body was cut short
└── APIStatusError            the gateway answered with an error (an error status, or an error
    │                         event inside a streamed 200)
    ├── BadRequest            400, 405, 422 (INVALID_ARGUMENT on generate-content)
    ├── AuthenticationFailed  401 (UNAUTHENTICATED): stop the run
    ├── InsufficientBalance   402: stop new billed work
    ├── PermissionDenied      403
    ├── NotFound              404
    ├── Conflict              409: ``candidate_providers`` when the body names them
    ├── RateLimited           429 (RESOURCE_EXHAUSTED): carries the parsed ``rate_limit`` and headers
    ├── Overloaded            529
    ├── ServerError           500 and above
    └── StreamError           an ``error`` event (or a failed response) arrived after HTTP 200

Three error envelopes reach ``error_from_response``: the interface's ``{error: {type, code,
message}}``, generate-content's ``{error: {code: int, message, status}}`` and web search's flat
``{code, message}``. ``error.code`` is never read to choose a class: the gateway fills it with the
status string on some routes and with free-form tokens on others.

No message built here contains request headers, so the API key can never reach one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from relaybatch.gateway.retry import parse_rate_limit_headers


class GatewayError(Exception):
    """Base class of every error the gateway client raises."""


class InvalidRequest(GatewayError):
    """The request failed local validation and was not sent."""


class UnexpectedResponse(GatewayError):
    """A success answer that does not parse as the route's documented result."""


class OutcomeUnknown(GatewayError):
    """A billed create was sent and no usable answer arrived: it may have been charged."""

    def __init__(self, message: str, cause: GatewayError) -> None:
        super().__init__(f"{message} (outcome unknown, not resent: {cause})")
        self.cause = cause


class TransportError(GatewayError):
    """The request got no usable answer."""


class ConnectFailed(TransportError):
    """The connection could not be made; the request never left this process."""


class StalledConnection(TransportError):
    """The gateway sent nothing for longer than the read timeout."""


class BrokenResponse(TransportError):
    """The answer was cut off (connection dropped mid-body, truncated JSON)."""


class APIStatusError(GatewayError):
    """The gateway answered with an error; ``status``, ``error_type`` and ``message`` say which."""

    def __init__(
        self,
        status: int,
        error_type: str | None,
        message: str,
        headers: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(f"{status} {error_type or 'error'}: {message}")
        self.status = status
        self.error_type = error_type
        self.message = message
        self.headers = dict(headers or {})
        self.body = body


class BadRequest(APIStatusError): ...


class AuthenticationFailed(APIStatusError): ...


class InsufficientBalance(APIStatusError): ...


class PermissionDenied(APIStatusError): ...


class NotFound(APIStatusError): ...


class Conflict(APIStatusError):
    @property
    def candidate_providers(self) -> list[str]:
        """Providers the gateway offered for an ambiguous pricing lookup; empty when not given."""
        return _candidate_providers(self.body)


class RateLimited(APIStatusError):
    @property
    def rate_limit(self) -> Mapping[str, Any] | None:
        """The body's ``error.rate_limit`` (``rpm``, ``qps``) when present."""
        error = self.body.get("error") if isinstance(self.body, dict) else None
        limit = error.get("rate_limit") if isinstance(error, dict) else None
        return limit if isinstance(limit, dict) else None

    @property
    def rate_limit_headers(self) -> dict[str, float]:
        """The ``x-ratelimit-*`` headers as numbers (reset in seconds)."""
        return parse_rate_limit_headers(self.headers)


class Overloaded(APIStatusError): ...


class ServerError(APIStatusError): ...


class StreamError(APIStatusError):
    """An error reported inside a stream whose HTTP status was 200."""


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequest,
    401: AuthenticationFailed,
    402: InsufficientBalance,
    403: PermissionDenied,
    404: NotFound,
    405: BadRequest,
    409: Conflict,
    422: BadRequest,
    429: RateLimited,
    529: Overloaded,
}

# Consulted only when the status alone does not decide (a 2xx body carrying an error, an odd status).
_BY_TYPE: dict[str, type[APIStatusError]] = {
    "invalid_request_error": BadRequest,
    "INVALID_ARGUMENT": BadRequest,
    "authentication_error": AuthenticationFailed,
    "UNAUTHENTICATED": AuthenticationFailed,
    "insufficient_balance": InsufficientBalance,
    "permission_error": PermissionDenied,
    "PERMISSION_DENIED": PermissionDenied,
    "not_found_error": NotFound,
    "NOT_FOUND": NotFound,
    "rate_limit_error": RateLimited,
    "RESOURCE_EXHAUSTED": RateLimited,
    "overloaded_error": Overloaded,
    "api_error": ServerError,
    "INTERNAL": ServerError,
}


def error_fields(body: Any) -> tuple[str | None, str] | None:
    """``(error_type, message)`` from any of the three envelopes, or None when the body is no error."""
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, dict):
        # Generate-content names its error in ``status``; the other families in ``type``.
        kind = error.get("type") or error.get("status")
        return (str(kind) if kind else None), str(error.get("message", ""))
    if isinstance(error, str):
        return None, error
    code = body.get("code")
    if isinstance(code, int) and not isinstance(code, bool) and code >= 400 and "message" in body:
        return None, str(body["message"])
    return None


def is_error_document(body: Any) -> bool:
    """Whether a success answer's body is nothing but an error envelope (written after padding).

    Only a bare envelope counts: a failed task or video also carries an ``error`` field, beside its
    id and status, and is a normal resource.
    """
    if not isinstance(body, dict):
        return False
    if set(body) == {"error"}:
        return isinstance(body["error"], dict)
    code = body.get("code")
    return set(body) <= {"code", "message"} and isinstance(code, int) and code >= 400


def error_from_response(status: int, headers: Mapping[str, str], body: Any) -> APIStatusError:
    """The exception for an error answer: chosen by status first, by ``error.type`` second."""
    fields = error_fields(body)
    error_type, message = fields if fields else (None, _short(body))
    cls = _BY_STATUS.get(status)
    if cls is None and error_type is not None:
        cls = _BY_TYPE.get(error_type)
    if cls is None:
        cls = ServerError if status >= 500 or status < 400 else APIStatusError
    return cls(status, error_type, message, headers, body)


def _short(body: Any) -> str:
    text = body if isinstance(body, str) else repr(body)
    return text.strip()[:200] or "(empty body)"


# "... providers with different prices (alpha, beta) ..." as the emulator and gateway word it.
_PROVIDERS_IN_MESSAGE = re.compile(r"providers?\b[^()]*\(([^()]+)\)")


def _candidate_providers(body: Any) -> list[str]:
    """Provider names from a 409 body: a structured list when there is one, else the message's list."""
    places = [body, body.get("error")] if isinstance(body, dict) else []
    for place in places:
        if not isinstance(place, dict):
            continue
        for key in ("candidate_providers", "providers", "candidates"):
            value = place.get(key)
            if isinstance(value, list):
                names = [_provider_name(entry) for entry in value]
                return [name for name in names if name]
    fields = error_fields(body)
    found = _PROVIDERS_IN_MESSAGE.search(fields[1]) if fields else None
    return [name.strip() for name in found.group(1).split(",") if name.strip()] if found else []


def _provider_name(entry: Any) -> str | None:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict):
        name = entry.get("provider") or entry.get("name")
        return str(name) if name else None
    return None

"""The gateway client's exceptions, mapped from HTTP status and ``error.type`` in one place.

GatewayError
├── TransportError            no usable answer (connect failure, timeout, dropped or truncated body)
│   └── OutcomeUnknown        a billed create may have reached the gateway; never resend it blindly
└── APIStatusError            the gateway answered with an error status
    ├── BadRequest            400 (and 405, 422)
    ├── AuthenticationFailed  401: stop the run
    ├── InsufficientBalance   402: stop new billed work
    ├── PermissionDenied      403
    ├── NotFound              404
    ├── Conflict              409
    ├── RateLimited           429: carries the parsed rate_limit and headers
    ├── Overloaded            529
    └── ServerError           500 and above
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class GatewayError(Exception):
    """Base class of every error the gateway client raises."""


class TransportError(GatewayError):
    """The request got no usable answer."""


class OutcomeUnknown(TransportError):
    """A billed create was sent and no answer arrived: it may have been charged."""


class APIStatusError(GatewayError):
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


class Conflict(APIStatusError): ...


class RateLimited(APIStatusError):
    @property
    def rate_limit(self) -> Mapping[str, Any] | None:
        error = self.body.get("error") if isinstance(self.body, dict) else None
        return error.get("rate_limit") if isinstance(error, dict) else None


class Overloaded(APIStatusError): ...


class ServerError(APIStatusError): ...


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


def status_error(status: int, headers: Mapping[str, str], body: Any) -> APIStatusError:
    """Build the exception for an error answer, from the status first and ``error.type`` second."""
    error = body.get("error") if isinstance(body, dict) else None
    error_type = error.get("type") if isinstance(error, dict) else None
    message = error.get("message", "") if isinstance(error, dict) else str(body)[:200]
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else APIStatusError)
    return cls(status, error_type, message, headers, body)

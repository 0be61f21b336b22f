"""The gateway client: typed requests and responses for every route, one error tree."""

from relaybatch.gateway.client import ChatCompletion, GatewayClient
from relaybatch.gateway.errors import (
    APIStatusError,
    AuthenticationFailed,
    BadRequest,
    Conflict,
    GatewayError,
    InsufficientBalance,
    NotFound,
    OutcomeUnknown,
    Overloaded,
    PermissionDenied,
    RateLimited,
    ServerError,
    TransportError,
)

__all__ = [
    "APIStatusError",
    "AuthenticationFailed",
    "BadRequest",
    "ChatCompletion",
    "Conflict",
    "GatewayClient",
    "GatewayError",
    "InsufficientBalance",
    "NotFound",
    "OutcomeUnknown",
    "Overloaded",
    "PermissionDenied",
    "RateLimited",
    "ServerError",
    "TransportError",
]

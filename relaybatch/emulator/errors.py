"""The three error body shapes the gateway answers with, and the status -> type table.

- standard envelope (every route but two families): ``{error: {type, code, message}}``, code = status string;
- generate-content shape: ``{error: {code: int, message, status: "INVALID_ARGUMENT"...}}``;
- web search's flat envelope: ``{code: int, message}``.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from relaybatch.emulator.codecs.fast_json import JSONResponse


class ErrorShape(Enum):
    STANDARD = "standard"
    GENERATE_CONTENT = "generate_content"
    FLAT = "flat"


# The interface's error table: the error.type each status carries in the standard envelope.
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "insufficient_balance",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    # The interface does not show the 409 type; this name is the emulator's assumption.
    409: "conflict_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}

# Status names of the generate-content error shape (google.rpc codes).
GOOGLE_STATUS_NAMES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    402: "FAILED_PRECONDITION",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    529: "UNAVAILABLE",
}


def error_type_for(status: int) -> str:
    return ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_response(
    status: int,
    error_type: str | None,
    message: str,
    *,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """The standard envelope; ``error_type=None`` takes the type from the status table.

    ``extra`` fields go inside ``error`` (e.g. ``rate_limit={"rpm": 120, "qps": 2.0}`` on a 429).
    """
    error: dict[str, Any] = {"type": error_type or error_type_for(status), "code": str(status)}
    error["message"] = message
    error.update(extra)
    return JSONResponse({"error": error}, status_code=status, headers=headers)


def generate_content_error(
    status: int, message: str, *, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The generate-content error shape: ``{error: {code: <int>, message, status: <NAME>}}``."""
    name = GOOGLE_STATUS_NAMES.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
    body = {"error": {"code": status, "message": message, "status": name, "details": []}}
    return JSONResponse(body, status_code=status, headers=headers)


def flat_error(status: int, message: str, *, headers: dict[str, str] | None = None) -> JSONResponse:
    """Web search's flat envelope: ``{code: <int>, message}``."""
    return JSONResponse({"code": status, "message": message}, status_code=status, headers=headers)


def shaped_error(shape: ErrorShape, status: int, message: str, **extra: Any) -> JSONResponse:
    """An error in the given family's shape; ``extra`` only reaches the standard envelope."""
    if shape is ErrorShape.GENERATE_CONTENT:
        return generate_content_error(status, message)
    if shape is ErrorShape.FLAT:
        return flat_error(status, message)
    return error_response(status, None, message, **extra)


def shape_for_path(path: str) -> ErrorShape:
    """Which error shape a path answers in when the route itself is not known (404, 405, faults)."""
    if path.startswith(("/v1beta/", "/gemini/")):
        return ErrorShape.GENERATE_CONTENT
    if path.startswith("/v1/websearch/"):
        return ErrorShape.FLAT
    return ErrorShape.STANDARD

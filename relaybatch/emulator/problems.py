"""The one exception every route's validators raise: a refusal naming the offending field."""

from __future__ import annotations


class InvalidRequest(ValueError):
    """A request the gateway refuses: 400 ``invalid_request_error`` unless ``status`` says otherwise
    (403 ``permission_error`` for a model the account may not use)."""

    def __init__(self, message: str, *, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status

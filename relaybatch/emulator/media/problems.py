"""The one exception the media validators raise: a 400 naming the offending field."""

from __future__ import annotations


class InvalidMediaRequest(ValueError):
    """A request body or query the gateway refuses with 400 (``invalid_request_error``)."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

"""JSON in and out through pydantic-core's Rust codec: about 5x faster than the json module,
which matters at thousands of requests per second on one core."""

from __future__ import annotations

from typing import Any

import pydantic_core
from starlette.responses import JSONResponse as StarletteJSONResponse


def loads(raw: bytes | str) -> Any:
    """Parse JSON; raises ValueError on bad input, like json.loads."""
    return pydantic_core.from_json(raw)


def dumps(value: Any) -> bytes:
    return pydantic_core.to_json(value)


class JSONResponse(StarletteJSONResponse):
    def render(self, content: Any) -> bytes:
        return pydantic_core.to_json(content)

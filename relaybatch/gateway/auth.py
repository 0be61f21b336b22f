"""Authentication headers per protocol family, all from the one account key.

The key lives in a ``SecretStr`` and is unwrapped only here, into the header dict handed to httpx,
so it never reaches a repr, a log line or an exception message.
"""

from __future__ import annotations

from enum import Enum

from pydantic import SecretStr

MESSAGES_VERSION = "2023-06-01"


class AuthStyle(Enum):
    BEARER = "bearer"  # chat completions, responses, video, catalog, pricing, images, judgment, search
    MESSAGES = "messages"  # x-api-key plus the messages version header
    GENERATE_CONTENT = "generate_content"  # x-goog-api-key
    # A file link a task result points to on another host (a storage service's signed URL): the
    # link carries its own credential, and the account key never goes to a host we did not choose.
    NONE = "none"


def auth_headers(style: AuthStyle, api_key: SecretStr) -> dict[str, str]:
    """The headers that authenticate one request of this family."""
    if style is AuthStyle.NONE:
        return {}
    key = api_key.get_secret_value()
    if style is AuthStyle.MESSAGES:
        return {"x-api-key": key, "anthropic-version": MESSAGES_VERSION}
    if style is AuthStyle.GENERATE_CONTENT:
        return {"x-goog-api-key": key}
    return {"Authorization": f"Bearer {key}"}

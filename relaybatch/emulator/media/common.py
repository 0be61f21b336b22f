"""What every media, judgment and search route shares: the media store, body parsing, model lookup.

The store lives on the Starlette app's state (``app.state.media``), created on first use, so each
app has its own videos and tasks exactly as it has its own accounts and ledger.
"""

from __future__ import annotations

import json
import secrets
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from relaybatch.emulator.config import ModelConfig
from relaybatch.emulator.errors import error_response
from relaybatch.emulator.media.problems import InvalidMediaRequest
from relaybatch.emulator.media.settings import MediaSettings, parse_media_settings
from relaybatch.emulator.state import Account, EmulatorState

if TYPE_CHECKING:
    from relaybatch.emulator.media.video_v1 import VideoTask
    from relaybatch.emulator.media.video_v2 import VideoJob

# Documented prompt triggers (case-insensitive substrings) that drive the rarer outcomes.
FAIL_TRIGGER = "emulator:fail"  # a V2 video or V1 task fails while rendering
CANCEL_TRIGGER = "emulator:cancel"  # a V1 task ends as cancelled (V2 videos are cancelled by DELETE)
# An image prompt refused on safety grounds: generate-content answers 200 + IMAGE_SAFETY,
# /v1/images/generations answers 400 (moderation_blocked), uncharged.
SAFETY_TRIGGER = "emulator:unsafe"


def has_trigger(prompt: str, trigger: str) -> bool:
    return trigger in prompt.lower()


@dataclass
class MediaStore:
    settings: MediaSettings
    videos: dict[str, VideoJob] = field(default_factory=dict)
    tasks: dict[str, VideoTask] = field(default_factory=dict)
    # Times of each account's recent web searches, for the search upstream's own limit.
    searches: dict[str, deque[float]] = field(default_factory=dict)


def emulator_state(request: Request) -> EmulatorState:
    state: EmulatorState = request.app.state.emulator
    return state


def media_store(request: Request) -> MediaStore:
    store: MediaStore | None = getattr(request.app.state, "media", None)
    if store is None:
        store = MediaStore(parse_media_settings(emulator_state(request).config.media))
        request.app.state.media = store
    return store


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


async def json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object, or InvalidMediaRequest."""
    raw = await request.body()
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        raise InvalidMediaRequest("the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise InvalidMediaRequest("the request body must be a JSON object")
    return body


def invalid(problem: InvalidMediaRequest) -> Response:
    return error_response(problem.status, None, problem.message)


def models_of_kind(state: EmulatorState, kinds: Iterable[str]) -> list[ModelConfig]:
    wanted = set(kinds)
    return sorted((m for m in state.models.values() if m.kind in wanted), key=lambda m: m.id)


def resolve_model(
    state: EmulatorState, account: Account, model_id: Any, kinds: tuple[str, ...], route: str
) -> ModelConfig:
    """The catalog entry for a request's ``model``; 400 when missing, unknown or of another kind,
    403 when the account may not use it (as the core's routes answer)."""
    if not isinstance(model_id, str) or not model_id:
        raise InvalidMediaRequest("'model' is required", param="model")
    model = state.model(model_id)
    if model is None:
        raise InvalidMediaRequest(f"unknown model '{model_id}'", param="model")
    if not state.can_use(account, model):
        raise InvalidMediaRequest(
            f"this account has no access to model '{model_id}'", param="model", status=403
        )
    if model.kind not in kinds:
        usable = ", ".join(m.id for m in models_of_kind(state, kinds) if state.can_use(account, m))
        raise InvalidMediaRequest(
            f"model '{model_id}' is not served by {route}; models for this route: {usable or 'none'}",
            param="model",
        )
    return model


def missing_price(model_id: str) -> Response:
    return error_response(500, None, f"emulator configuration: model '{model_id}' has no price")

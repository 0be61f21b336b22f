"""The videos and tasks one app remembers, and the prompt triggers that drive their rarer outcomes.

The store lives on the Starlette app's state (``app.state.media``), created on first use, so each
app has its own videos and tasks exactly as it has its own accounts and ledger.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.requests import Request

if TYPE_CHECKING:
    from relaybatch.emulator.media.video_v1 import VideoTask
    from relaybatch.emulator.media.video_v2 import VideoJob

# Documented prompt triggers (case-insensitive substrings) that drive the rarer outcomes.
FAIL_TRIGGER = "emulator:fail"  # a V2 video or V1 task fails while rendering
CANCEL_TRIGGER = "emulator:cancel"  # a V1 task ends as cancelled (V2 videos are cancelled by DELETE)
# An image prompt refused on safety grounds: generate-content answers 200 + IMAGE_SAFETY,
# /v1/images/generations answers 400 (moderation_blocked), uncharged.
SAFETY_TRIGGER = "emulator:unsafe"
# Long video batches (V2): a render that never ends, and one that completes with no content (paid,
# nothing to download). A V2 prompt with SAFETY_TRIGGER fails as the safety system refuses it.
STUCK_TRIGGER = "emulator:stuck"
EMPTY_TRIGGER = "emulator:empty"


def has_trigger(prompt: str, trigger: str) -> bool:
    return trigger in prompt.lower()


@dataclass
class MediaStore:
    videos: dict[str, VideoJob] = field(default_factory=dict)
    tasks: dict[str, VideoTask] = field(default_factory=dict)


def media_store(request: Request) -> MediaStore:
    store: MediaStore | None = getattr(request.app.state, "media", None)
    if store is None:
        store = MediaStore()
        request.app.state.media = store
    return store

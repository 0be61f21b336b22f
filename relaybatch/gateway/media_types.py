"""Images, V2 video, legacy V1 video and tasks: request and response models."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from relaybatch.gateway.wire import WireModel


class ImageGenerationRequest(WireModel):
    prompt: str
    model: str | None = None
    n: int | None = None
    size: str | None = None
    quality: str | None = None
    background: str | None = None
    output_format: str | None = None
    output_compression: int | None = None
    moderation: str | None = None
    user: str | None = None


class ImageData(WireModel):
    b64_json: str
    revised_prompt: str | None = None


class ImageUsage(WireModel):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    input_tokens_details: dict[str, int] | None = None
    output_tokens_details: dict[str, int] | None = None


class ImagesResponse(WireModel):
    created: int = 0
    data: list[ImageData] = Field(default_factory=list)
    size: str | None = None
    quality: str | None = None
    output_format: str | None = None
    background: str | None = None
    usage: ImageUsage | None = None


# The statuses the interface's analogue names. Any other word a gateway sends is kept verbatim and
# read as still running (a paid render is never ended on a word the client does not know).
VideoStatus = Literal["queued", "in_progress", "completed", "failed", "cancelled"]
VIDEO_TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


class VideoCreateRequest(WireModel):
    model: str
    prompt: str
    seconds: str | None = None
    size: str | None = None


class VideoError(WireModel):
    code: str | None = None
    message: str = ""


class Video(WireModel):
    """A V2 video task; ``quote_usd`` is the price fixed and charged at creation."""

    id: str
    object: str = "video"
    model: str | None = None
    status: str
    progress: int | None = None
    created_at: int | str | None = None
    completed_at: int | str | None = None
    expires_at: int | str | None = None
    seconds: str | None = None
    size: str | None = None
    quote_usd: str | None = None
    error: VideoError | None = None


class VideoDeleted(WireModel):
    """Either ``{id, deleted: true, object: "video.deleted"}`` or the video, now ``cancelled``."""

    id: str
    object: str | None = None
    deleted: bool | None = None
    status: str | None = None


class VideoV1CreateRequest(WireModel):
    """Legacy V1 bodies depend on the model; only ``model`` and ``prompt`` are known."""

    model: str
    prompt: str


class TaskCreated(WireModel):
    """The legacy V1 create answer: its task id is named ``id`` or ``task_id`` (both are seen)."""

    id: str | None = None
    task_id: str | None = None
    status: str | None = None

    @property
    def remote_id(self) -> str:
        found = self.task_id or self.id
        if not found:
            raise ValueError("the V1 create answer carries no task id")
        return found


TaskStatus = Literal["pending", "processing", "completed", "failed", "cancelled"]
TASK_TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


class Task(WireModel):
    """``data`` is opaque (its shape depends on ``type``); keep it as the raw result."""

    id: str
    status: str  # TaskStatus, or a word the client does not know: kept, read as still running
    type: str | None = None
    model: str | None = None
    created_at: str | int | None = None
    data: dict[str, Any] | list[Any] | None = None
    error: str | dict[str, Any] | None = None

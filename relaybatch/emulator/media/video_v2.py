"""Video V2: POST /v2/videos, GET/DELETE /v2/videos/{id}, GET /v2/videos/{id}/content.

A video's status is computed from the emulator clock each time it is read (no background work):

    queued (queued_seconds) -> in_progress (render time, progress 0..99) -> completed (progress 100)
                                          \\-> failed at half the render time (prompt trigger)
    queued | in_progress --DELETE--> cancelled; DELETE on a finished video deletes it (then 404).

Render time = render_seconds_base + render_seconds_per_video_second x seconds (media.video settings),
spread by up to ``render_jitter`` either way, the same for the same video id.

Fault modes of long batches (docs/emulator.md): ``running_status`` renames ``in_progress`` (a status
the client does not know); prompt triggers ``emulator:stuck`` (renders forever, progress stops at 99),
``emulator:empty`` (completed, but the content route has nothing: 404), ``emulator:unsafe`` (failed
as the safety system refuses it, error code ``moderation_blocked``, as soon as rendering starts); and
``max_in_flight``: videos queued or rendering per account and model, past which a create is 429
``rate_limit_error`` with ``error.concurrency{limit, in_flight}`` and no ``error.rate_limit``
(the gateway's concurrency error, not the request window's), uncharged.
The quote (``quote_usd`` = seconds x the model's per-second price, the with-audio price for
``audio: true``; see video_pricing.py) is fixed and charged at creation;
polls, cancels and downloads are free. Unknown ids and other accounts' ids are 404.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from relaybatch.emulator.auth import authenticate
from relaybatch.emulator.codecs.images import ImageFormat, render_image
from relaybatch.emulator.codecs.mp4 import build_mp4
from relaybatch.emulator.errors import error_response
from relaybatch.emulator.media.store import (
    EMPTY_TRIGGER,
    FAIL_TRIGGER,
    SAFETY_TRIGGER,
    STUCK_TRIGGER,
    MediaStore,
    has_trigger,
    media_store,
)
from relaybatch.emulator.media.video_body import read_v2_body
from relaybatch.emulator.media.video_pricing import AUDIO_FIELD, video_quote, wants_audio
from relaybatch.emulator.parsing import required_text, unknown_fields
from relaybatch.emulator.problems import InvalidRequest
from relaybatch.emulator.route_common import (
    emulator_state,
    invalid,
    missing_price,
    new_id,
    resolve_model,
    route_settings,
)
from relaybatch.emulator.route_settings import VideoSettings
from relaybatch.emulator.state import Account, EmulatorState, request_body_hash

ROUTE = "/v2/videos"
SECONDS = ("4", "8", "12")
SIZES = ("720x1280", "1280x720", "1024x1792", "1792x1024")
MAX_PROMPT_CHARS = 32_000
V2_FIELDS = frozenset({"model", "prompt", "seconds", "size", "input_reference", AUDIO_FIELD})
REFERENCE_MIME_TYPES = ("image/png", "image/jpeg", "image/webp")
CONTENT_VARIANTS = {"video": "video/mp4", "thumbnail": "image/webp", "spritesheet": "image/jpeg"}


@dataclass
class VideoJob:
    id: str
    account: str
    model: str
    prompt: str
    seconds: int
    size: str
    quote_usd: Decimal
    created_at: float
    render_seconds: float
    queued_seconds: float
    expires_after: float
    # How it ends: "completed", "failed" (half-way), "refused" (safety, at the start), "stuck"
    # (never), "empty" (completed with no content).
    outcome: str = "completed"
    running_status: str = "in_progress"
    cancelled_at: float | None = None
    deleted: bool = False

    @property
    def fails(self) -> bool:
        return self.outcome in ("failed", "refused")

    @property
    def started_at(self) -> float:
        return self.created_at + self.queued_seconds

    @property
    def finished_at(self) -> float:
        """When rendering ends: completed, failed half-way for a failing prompt, refused at once."""
        share = {"failed": 0.5, "refused": 0.0, "stuck": float("inf")}.get(self.outcome, 1.0)
        return self.started_at + self.render_seconds * share

    def status(self, now: float) -> str:
        if self.cancelled_at is not None:
            return "cancelled"
        if now < self.started_at:
            return "queued"
        if now < self.finished_at:
            return self.running_status
        return "failed" if self.fails else "completed"

    def rendering(self, now: float) -> bool:
        """Queued or rendering: what the gateway's cap on videos in flight counts."""
        return self.status(now) not in ("completed", "failed", "cancelled")

    def progress(self, now: float) -> int:
        status = self.status(now)
        if status == "completed":
            return 100
        moment = min(now, self.cancelled_at if self.cancelled_at is not None else now, self.finished_at)
        if moment <= self.started_at or self.render_seconds <= 0:
            return 0
        return min(99, int(100 * (moment - self.started_at) / self.render_seconds))

    def as_json(self, now: float) -> dict[str, Any]:
        status = self.status(now)
        completed_at = int(self.finished_at) if status == "completed" else None
        return {
            "id": self.id,
            "object": "video",
            "model": self.model,
            "status": status,
            "progress": self.progress(now),
            "created_at": int(self.created_at),
            "completed_at": completed_at,
            "expires_at": int(self.finished_at + self.expires_after) if completed_at is not None else None,
            "seconds": str(self.seconds),
            "size": self.size,
            "prompt": self.prompt,
            "quote_usd": str(self.quote_usd),
            "error": self._error() if status == "failed" else None,
        }

    def _error(self) -> dict[str, str]:
        if self.outcome == "refused":
            return {
                "code": "moderation_blocked",
                "message": "the request was rejected by the safety system",
            }
        return {
            "code": "video_generation_failed",
            "message": "the upstream provider could not render this video",
        }


def _check_reference(value: Any) -> None:
    """``input_reference``: a base64 data URL of a PNG, JPEG or WebP image (an upload arrives as one)."""
    if not isinstance(value, str) or not value.startswith("data:"):
        raise InvalidRequest(
            "'input_reference' must be a data URL such as data:image/png;base64,...", param="input_reference"
        )
    header, _, payload = value[5:].partition(",")
    mime, _, encoding = header.partition(";")
    if mime not in REFERENCE_MIME_TYPES or encoding != "base64":
        raise InvalidRequest(
            f"'input_reference' must be base64 {', '.join(REFERENCE_MIME_TYPES)}", param="input_reference"
        )
    try:
        base64.b64decode(payload, validate=True)
    except binascii.Error:
        raise InvalidRequest("'input_reference' is not valid base64", param="input_reference") from None


def validate_v2_body(body: dict[str, Any]) -> tuple[str, int, str]:
    """(prompt, seconds, size) of a V2 body; V1 fields and anything unknown are refused."""
    unknown = unknown_fields(body, V2_FIELDS)
    if unknown:
        raise InvalidRequest(
            f"field '{unknown[0]}' is not part of the V2 video schema (legacy V1 bodies go to "
            "/v1/videos/generations; a URL change alone is not a migration)",
            param=unknown[0],
        )
    prompt = required_text(body, "prompt")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise InvalidRequest(f"'prompt' is longer than {MAX_PROMPT_CHARS} characters", param="prompt")
    # A JSON null means "not given" throughout, as clients that serialise optional fields send it.
    seconds = "4" if body.get("seconds") is None else body["seconds"]
    if seconds not in SECONDS:
        raise InvalidRequest(
            f'\'seconds\' must be one of "4", "8", "12" (a string); got {seconds!r}', param="seconds"
        )
    size = "720x1280" if body.get("size") is None else body["size"]
    if size not in SIZES:
        raise InvalidRequest(f"'size' must be one of {', '.join(SIZES)}; got {size!r}", param="size")
    if body.get("input_reference") is not None:
        _check_reference(body["input_reference"])
    return prompt, int(seconds), size


def _outcome(prompt: str) -> str:
    for trigger, outcome in (
        (SAFETY_TRIGGER, "refused"),
        (FAIL_TRIGGER, "failed"),
        (STUCK_TRIGGER, "stuck"),
        (EMPTY_TRIGGER, "empty"),
    ):
        if has_trigger(prompt, trigger):
            return outcome
    return "completed"


def _render_seconds(video_id: str, seconds: int, settings: VideoSettings) -> float:
    base = settings.render_seconds_base + settings.render_seconds_per_video_second * seconds
    if not settings.render_jitter:
        return base
    # The same id always renders as long: a uniform share in [-jitter, +jitter] from its hash.
    unit = int.from_bytes(hashlib.sha256(video_id.encode()).digest()[:4], "big") / 2**32
    return base * (1.0 + settings.render_jitter * (2.0 * unit - 1.0))


def _new_job(
    account: Account,
    model: str,
    prompt: str,
    seconds: int,
    size: str,
    quote: Decimal,
    now: float,
    settings: VideoSettings,
) -> VideoJob:
    video_id = new_id("video_")
    return VideoJob(
        id=video_id,
        account=account.name,
        model=model,
        prompt=prompt,
        seconds=seconds,
        size=size,
        quote_usd=quote,
        created_at=now,
        render_seconds=_render_seconds(video_id, seconds, settings),
        queued_seconds=settings.queued_seconds,
        expires_after=settings.expires_after_seconds,
        outcome=_outcome(prompt),
        running_status=settings.running_status,
    )


def _over_the_cap(store: MediaStore, account: Account, model: str, now: float, cap: int) -> Response | None:
    """The gateway's concurrency error when the account already has ``cap`` videos of this model
    queued or rendering: 429 with no ``error.rate_limit`` (the request window is not the cause)."""
    if not cap:
        return None
    in_flight = sum(
        1
        for job in store.videos.values()
        if job.account == account.name and job.model == model and not job.deleted and job.rendering(now)
    )
    if in_flight < cap:
        return None
    message = (
        f"too many videos in flight for model '{model}': {in_flight} queued or rendering, the limit is "
        f"{cap}; create more when one finishes"
    )
    return error_response(429, None, message, concurrency={"limit": cap, "in_flight": in_flight})


async def create_video(request: Request) -> Response:
    account = authenticate(request, "bearer")
    if isinstance(account, Response):
        return account
    state = emulator_state(request)
    store = media_store(request)
    try:
        body = await read_v2_body(request)
        _refuse_v1_model(state, body.get("model"))
        model = resolve_model(state, account, body.get("model"), ("video",), ROUTE)
        prompt, seconds, size = validate_v2_body(body)
        with_audio = wants_audio(body)
        pricing = state.price_for(model.id)
        if pricing is None:
            return missing_price(model.id)
        quote = video_quote(pricing, model.id, seconds, with_audio=with_audio)
    except InvalidRequest as problem:
        return invalid(problem)
    settings = route_settings(request).video
    busy = _over_the_cap(store, account, model.id, state.clock.now(), settings.max_in_flight)
    if busy is not None:
        return busy
    usage = {"seconds": seconds, "size": size, "with_audio": with_audio}
    refused = state.charge(account, ROUTE, model.id, quote, usage, request_body_hash(request))
    if refused is not None:
        return refused
    job = _new_job(account, model.id, prompt, seconds, size, quote, state.clock.now(), settings)
    store.videos[job.id] = job
    return JSONResponse(job.as_json(state.clock.now()))


def _refuse_v1_model(state: EmulatorState, model_id: Any) -> None:
    """V1 models are not automatically supported by V2: say so, and where they belong."""
    model = state.model(model_id) if isinstance(model_id, str) else None
    if model is not None and model.kind == "video_v1":
        raise InvalidRequest(
            f"model '{model_id}' is a legacy V1 video model and is not available on /v2/videos; "
            "use POST /v1/videos/generations with the V1 body",
            param="model",
        )


def _owned_job(request: Request, account: Account) -> VideoJob | None:
    job = media_store(request).videos.get(request.path_params["video_id"])
    if job is None or job.deleted or job.account != account.name:
        return None
    return job


def _not_found(request: Request) -> Response:
    return error_response(404, None, f"no video '{request.path_params['video_id']}'")


def _requested_job(request: Request) -> VideoJob | Response:
    """The caller's video named in the path, or the answer to give instead (401, or 404 for
    unknown and other accounts' ids alike)."""
    account = authenticate(request, "bearer")
    if isinstance(account, Response):
        return account
    job = _owned_job(request, account)
    return _not_found(request) if job is None else job


async def get_video(request: Request) -> Response:
    job = _requested_job(request)
    if isinstance(job, Response):
        return job
    return JSONResponse(job.as_json(emulator_state(request).clock.now()))


async def delete_video(request: Request) -> Response:
    """Cancel a queued or rendering video (the object comes back ``cancelled``); delete a finished one."""
    job = _requested_job(request)
    if isinstance(job, Response):
        return job
    now = emulator_state(request).clock.now()
    if job.status(now) in ("queued", "in_progress"):
        job.cancelled_at = now
        return JSONResponse(job.as_json(now))
    job.deleted = True
    return JSONResponse({"id": job.id, "object": "video.deleted", "deleted": True})


async def video_content(request: Request) -> Response:
    job = _requested_job(request)
    if isinstance(job, Response):
        return job
    variant = request.query_params.get("variant", "video")
    if variant not in CONTENT_VARIANTS:
        return error_response(400, None, f"'variant' must be one of {', '.join(CONTENT_VARIANTS)}")
    now = emulator_state(request).clock.now()
    status = job.status(now)
    if status != "completed":
        return error_response(400, None, f"video '{job.id}' has no content: its status is {status}")
    if now > job.finished_at + job.expires_after:
        return error_response(404, None, f"the content of video '{job.id}' has expired")
    if job.outcome == "empty":
        return error_response(404, None, f"video '{job.id}' completed without content")
    width, height = (int(side) for side in job.size.split("x"))
    seed = hashlib.sha256(f"{job.model}\n{job.prompt}\n{job.size}".encode()).digest()
    if variant == "video":
        data = build_mp4(width, height, job.seconds, seed)
    else:
        image_format: ImageFormat = "webp" if variant == "thumbnail" else "jpeg"
        data = render_image(width, height, seed=seed, output_format=image_format, compression=80)
    return Response(data, media_type=CONTENT_VARIANTS[variant])

"""Legacy V1 video: POST /v1/videos/generations, GET /v1/tasks/{task_id} and the file it points to.

The interface shows nothing of the V1 body beyond ``model`` and ``prompt``; the emulator's V1 schema
(an assumption, documented) is: ``seconds`` (integer 1-20, default 5), ``aspect_ratio`` (16:9, 9:16,
1:1), ``resolution`` (480p, 720p, 1080p), and optional ``image_url``, ``negative_prompt``, ``seed``,
``audio`` (video_pricing.py).
V2 fields (``size``, ``input_reference``, string ``seconds``) are refused: the schemas do not mix.

Task states follow the emulator clock: pending (v1_pending_seconds) -> processing
(v1_processing_seconds) -> completed with ``data`` | failed with ``error`` (prompt trigger
``emulator:fail``) | cancelled (prompt trigger ``emulator:cancel``; the interface shows no cancel
route). Charged at creation: seconds x the model's per-second price.

File links: ``data.video_url`` carries its own credential (``token``). With ``v1_link_seconds`` set,
each poll gives a link that expires that long after it (``expires`` in the URL, signed into the
token): a download after it is 403 "link expired", and the next poll gives a fresh link.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from relaybatch.emulator.auth import authenticate
from relaybatch.emulator.clock import rfc3339
from relaybatch.emulator.codecs.mp4 import build_mp4
from relaybatch.emulator.errors import error_response
from relaybatch.emulator.media.store import CANCEL_TRIGGER, FAIL_TRIGGER, has_trigger, media_store
from relaybatch.emulator.media.video_pricing import AUDIO_FIELD, video_quote, wants_audio
from relaybatch.emulator.parsing import required_text, unknown_fields
from relaybatch.emulator.problems import InvalidRequest
from relaybatch.emulator.route_common import (
    emulator_state,
    invalid,
    json_object,
    missing_price,
    new_id,
    resolve_model,
    route_settings,
)
from relaybatch.emulator.state import EmulatorState, request_body_hash

ROUTE = "/v1/videos/generations"
V1_FIELDS = frozenset(
    {
        "model",
        "prompt",
        "seconds",
        "aspect_ratio",
        "resolution",
        "image_url",
        "negative_prompt",
        "seed",
        AUDIO_FIELD,
    }
)
V2_ONLY_FIELDS = ("size", "input_reference")
SECONDS_RANGE = (1, 20)
DEFAULT_SECONDS = 5
ASPECT_RATIOS = ("16:9", "9:16", "1:1")
RESOLUTIONS = {"480p": 480, "720p": 720, "1080p": 1080}


@dataclass(frozen=True)
class V1Request:
    prompt: str
    seconds: int
    aspect_ratio: str
    resolution: str

    def dimensions(self) -> tuple[int, int]:
        short = RESOLUTIONS[self.resolution]
        long = short * 16 // 9
        return {"16:9": (long, short), "9:16": (short, long), "1:1": (short, short)}[self.aspect_ratio]


@dataclass
class VideoTask:
    id: str
    account: str
    model: str
    request: V1Request
    created_at: float
    pending_seconds: float
    processing_seconds: float
    # The file URL is a capability, like a provider's presigned link: no auth header needed.
    file_token: str = field(default_factory=lambda: secrets.token_hex(16))
    link_seconds: float = 0.0  # 0: the link never expires

    def link_token(self, expires: int | None) -> str:
        if expires is None:
            return self.file_token
        return hashlib.sha256(f"{self.file_token}:{expires}".encode()).hexdigest()[:32]

    def file_url(self, now: float, base_url: str) -> str:
        url = f"{base_url}/v1/videos/generations/{self.id}/content"
        if not self.link_seconds:
            return f"{url}?token={self.file_token}"
        expires = int(now + self.link_seconds)
        return f"{url}?expires={expires}&token={self.link_token(expires)}"

    @property
    def ends(self) -> str:
        if has_trigger(self.request.prompt, FAIL_TRIGGER):
            return "failed"
        if has_trigger(self.request.prompt, CANCEL_TRIGGER):
            return "cancelled"
        return "completed"

    def status(self, now: float) -> str:
        elapsed = now - self.created_at
        if elapsed < self.pending_seconds:
            return "pending"
        if elapsed < self.pending_seconds + self.processing_seconds:
            return "processing"
        return self.ends

    def as_json(self, now: float, base_url: str) -> dict[str, Any]:
        status = self.status(now)
        resource: dict[str, Any] = {
            "id": self.id,
            "status": status,
            "type": "video_generation",
            "model": self.model,
            "created_at": rfc3339(self.created_at),
        }
        if status == "completed":
            width, height = self.request.dimensions()
            resource["data"] = {
                "video_url": self.file_url(now, base_url),
                "mime_type": "video/mp4",
                "seconds": self.request.seconds,
                "width": width,
                "height": height,
            }
        elif status == "failed":
            resource["error"] = "the upstream provider could not render this video"
        return resource


def _choice(body: dict[str, Any], name: str, allowed: tuple[str, ...], default: str) -> str:
    value = default if body.get(name) is None else body[name]
    if value not in allowed:
        raise InvalidRequest(f"'{name}' must be one of {', '.join(allowed)}; got {value!r}", param=name)
    return str(value)


def _check_url(body: dict[str, Any]) -> None:
    url = body.get("image_url")
    if url is None:
        return
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or not ((parts.scheme in ("http", "https") and parts.netloc) or parts.scheme == "data"):
        raise InvalidRequest("'image_url' must be an http(s) URL or a data URL", param="image_url")


def validate_v1_body(body: dict[str, Any]) -> V1Request:
    for name in V2_ONLY_FIELDS:
        if body.get(name) is not None:
            raise InvalidRequest(
                f"field '{name}' belongs to the V2 video schema (/v2/videos); "
                "legacy V1 bodies do not take it",
                param=name,
            )
    unknown = unknown_fields(body, V1_FIELDS)
    if unknown:
        raise InvalidRequest(f"unknown field '{unknown[0]}' for legacy V1 video", param=unknown[0])
    prompt = required_text(body, "prompt")
    # A JSON null means "not given", as clients that serialise optional fields send it.
    seconds = DEFAULT_SECONDS if body.get("seconds") is None else body["seconds"]
    low, high = SECONDS_RANGE
    if isinstance(seconds, str):
        raise InvalidRequest(
            "'seconds' is an integer in legacy V1 (string seconds are the V2 form)", param="seconds"
        )
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not low <= seconds <= high:
        raise InvalidRequest(f"'seconds' must be an integer from {low} to {high}", param="seconds")
    for name in ("negative_prompt",):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise InvalidRequest(f"'{name}' must be a string", param=name)
    if body.get("seed") is not None and (isinstance(body["seed"], bool) or not isinstance(body["seed"], int)):
        raise InvalidRequest("'seed' must be an integer", param="seed")
    _check_url(body)
    return V1Request(
        prompt=prompt,
        seconds=seconds,
        aspect_ratio=_choice(body, "aspect_ratio", ASPECT_RATIOS, "16:9"),
        resolution=_choice(body, "resolution", tuple(RESOLUTIONS), "720p"),
    )


def _refuse_v2_model(state: EmulatorState, model_id: Any) -> None:
    model = state.model(model_id) if isinstance(model_id, str) else None
    if model is not None and model.kind == "video":
        raise InvalidRequest(
            f"model '{model_id}' is a V2 video model: use POST /v2/videos with the V2 body", param="model"
        )


def _base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


async def create_task(request: Request) -> Response:
    account = authenticate(request, "bearer")
    if isinstance(account, Response):
        return account
    state = emulator_state(request)
    store = media_store(request)
    try:
        body = await json_object(request)
        _refuse_v2_model(state, body.get("model"))
        model = resolve_model(state, account, body.get("model"), ("video_v1",), ROUTE)
        v1_request = validate_v1_body(body)
        with_audio = wants_audio(body)
        pricing = state.price_for(model.id)
        if pricing is None:
            return missing_price(model.id)
        cost: Decimal = video_quote(pricing, model.id, v1_request.seconds, with_audio=with_audio)
    except InvalidRequest as problem:
        return invalid(problem)
    usage = {"seconds": v1_request.seconds, "with_audio": with_audio}
    refused = state.charge(account, ROUTE, model.id, cost, usage, request_body_hash(request))
    if refused is not None:
        return refused
    settings = route_settings(request).video
    task = VideoTask(
        id=new_id("gen-"),
        account=account.name,
        model=model.id,
        request=v1_request,
        created_at=state.clock.now(),
        pending_seconds=settings.v1_pending_seconds,
        processing_seconds=settings.v1_processing_seconds,
        link_seconds=settings.v1_link_seconds,
    )
    store.tasks[task.id] = task
    return JSONResponse(task.as_json(state.clock.now(), _base_url(request)))


async def get_task(request: Request) -> Response:
    account = authenticate(request, "bearer")
    if isinstance(account, Response):
        return account
    task_id = request.path_params["task_id"]
    task = media_store(request).tasks.get(task_id)
    if task is None or task.account != account.name:
        return error_response(404, None, f"no task '{task_id}'")
    return JSONResponse(task.as_json(emulator_state(request).clock.now(), _base_url(request)))


async def task_file(request: Request) -> Response:
    """The finished video behind ``data.video_url``: the token in the URL is the credential."""
    task_id = request.path_params["task_id"]
    task = media_store(request).tasks.get(task_id)
    token = request.query_params.get("token", "")
    expires_text = request.query_params.get("expires")
    expires = int(expires_text) if expires_text and expires_text.isdigit() else None
    if task is None or not secrets.compare_digest(token, task.link_token(expires)):
        return error_response(404, None, f"no video file for task '{task_id}'")
    now = emulator_state(request).clock.now()
    if expires is not None and now > expires:
        return error_response(
            403, None, f"the link to task '{task_id}''s file has expired; poll the task for a fresh one"
        )
    if task.status(now) != "completed":
        return error_response(404, None, f"task '{task_id}' has no finished video")
    width, height = task.request.dimensions()
    seed = hashlib.sha256(f"{task.model}\n{task.request.prompt}".encode()).digest()
    return Response(build_mp4(width, height, task.request.seconds, seed), media_type="video/mp4")

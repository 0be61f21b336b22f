"""Per-kind calls: how an item's request becomes gateway calls, and the answer a result row.

Each kind has a ``submit`` that sends the billed create and returns either ``Finished`` (sync
kinds: the answer is the result) or ``Submitted`` (async kinds: a remote id to poll). Async kinds
also have ``poll`` (one status check, no charge) and optionally ``cancel``. Results are plain
dicts with the same keys for every kind (normalize.py), so result_columns.py can write typed
columns without knowing the families.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from relaybatch.engine.media import MediaFiles, link_extension
from relaybatch.engine.normalize import (
    as_dict,
    chat_result,
    generate_content_result,
    image_result,
    judgment_result,
    messages_result,
    responses_result,
    web_search_result,
)
from relaybatch.gateway import APIStatusError, GatewayClient, GatewayError, NotFound


class KindNotAvailable(Exception):
    """The gateway client in use has no method for this kind (yet): the item fails with this reason."""


@dataclass(frozen=True)
class Finished:
    result: dict[str, Any]


@dataclass(frozen=True)
class Submitted:
    remote_id: str
    result: dict[str, Any]


PollStatus = Literal["running", "done", "failed", "cancelled"]


@dataclass(frozen=True)
class PollAnswer:
    status: PollStatus
    result: dict[str, Any] | None = None
    error: str | None = None


Submit = Callable[[GatewayClient, dict[str, Any], MediaFiles], Awaitable[Finished | Submitted]]
Poll = Callable[[GatewayClient, str, MediaFiles], Awaitable[PollAnswer]]
Cancel = Callable[[GatewayClient, str], Awaitable[None]]


@dataclass(frozen=True)
class KindCalls:
    submit: Submit
    poll: Poll | None = None
    cancel: Cancel | None = None

    @property
    def is_async(self) -> bool:
        return self.poll is not None


def _method(client: GatewayClient, name: str) -> Callable[..., Awaitable[Any]]:
    method = getattr(client, name, None)
    if method is None:
        raise KindNotAvailable(f"this gateway client has no {name}(); update relaybatch")
    return method


async def _streamable(method: Callable[..., Awaitable[Any]], *args: Any, options: dict[str, bool]) -> Any:
    """Pass ``stream`` and ``converter`` only when asked: the answer is the same model either way."""
    return await method(*args, **options)


def _split_stream(request: dict[str, Any]) -> tuple[dict[str, Any], dict[str, bool]]:
    """The body to send, and the client options the request names: ``stream``, and ``via:
    converter`` (docs/manifests.md, "Converter routes": call through the converter base)."""
    body = dict(request)
    options = {"stream": bool(body.pop("stream", False)), "converter": body.pop("via", None) == "converter"}
    return body, {name: True for name, wanted in options.items() if wanted}


async def submit_chat(client: GatewayClient, request: dict[str, Any], media: MediaFiles) -> Finished:
    body, options = _split_stream(request)
    answer = await _streamable(_method(client, "chat_completions"), body, options=options)
    return Finished(chat_result(as_dict(answer)))


async def submit_responses(client: GatewayClient, request: dict[str, Any], media: MediaFiles) -> Finished:
    body, options = _split_stream(request)
    answer = await _streamable(_method(client, "responses"), body, options=options)
    return Finished(responses_result(as_dict(answer)))


async def submit_messages(client: GatewayClient, request: dict[str, Any], media: MediaFiles) -> Finished:
    body, options = _split_stream(request)
    answer = await _streamable(_method(client, "messages"), body, options=options)
    return Finished(messages_result(as_dict(answer)))


async def submit_generate_content(
    client: GatewayClient, request: dict[str, Any], media: MediaFiles
) -> Finished:
    body, options = _split_stream(request)
    model = body.pop("model")
    answer = await _streamable(_method(client, "generate_content"), model, body, options=options)
    return Finished(generate_content_result(as_dict(answer), media))


async def submit_image(client: GatewayClient, request: dict[str, Any], media: MediaFiles) -> Finished:
    answer = await _method(client, "images_generate")(dict(request))
    output_format = request.get("output_format") or "png"
    return Finished(image_result(as_dict(answer), media, output_format, request.get("model")))


async def submit_judgment(client: GatewayClient, request: dict[str, Any], media: MediaFiles) -> Finished:
    answer = await _method(client, "typed_judgment")(dict(request))
    return Finished(judgment_result(as_dict(answer)))


async def submit_web_search(client: GatewayClient, request: dict[str, Any], media: MediaFiles) -> Finished:
    params = dict(request)
    route = params.pop("route", "search")
    answer = await _method(client, "web_search")(route, params)
    return Finished(web_search_result(as_dict(answer)))


# -- V2 video ---------------------------------------------------------------------------------

# Only these end a paid render; any other status (``queued``, ``in_progress``, or a word this
# client does not know, such as ``processing``) is still running, and the word is kept verbatim.
VIDEO_TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})


def _video_summary(video: dict[str, Any]) -> dict[str, Any]:
    keep = (
        "id",
        "status",
        "model",
        "seconds",
        "size",
        "quote_usd",
        "progress",
        "created_at",
        "completed_at",
        "expires_at",
        "error",
    )
    return {name: video.get(name) for name in keep if video.get(name) is not None}


async def submit_video(client: GatewayClient, request: dict[str, Any], media: MediaFiles) -> Submitted:
    video = as_dict(await _method(client, "video_create")(dict(request)))
    return Submitted(str(video["id"]), {"remote": _video_summary(video)})


# Failures of paid renders that are not the gateway's ordinary "failed", each with what to do. The
# render was billed at its create (as quoted); none of these is retried by the engine.
COMPLETED_WITHOUT_MEDIA = (
    "completed without media: the gateway finished the video (billed as quoted) and has no content "
    "for it, often a safety filter applied after rendering; change the prompt and run it as a new item"
)
MEDIA_EXPIRED = (
    "expired before it was downloaded: the video's content is gone (billed as quoted); create it "
    "again as a new item, and download sooner (a run downloads at the first poll that sees it done)"
)
SAFETY_REFUSED = (
    "refused by the provider's safety system: billed as quoted; change the prompt and run it as a new item"
)
# Error codes (any case, any part) that name a safety or moderation refusal.
_SAFETY_WORDS = ("moderation", "safety", "content_policy", "content_filter", "blocked")


def _failure_reason(status: str, error: Any) -> str:
    code = str(error.get("code") or "") if isinstance(error, dict) else ""
    message = error.get("message") if isinstance(error, dict) else (str(error) if error else "")
    if any(word in code.lower() for word in _SAFETY_WORDS):
        return f"video {status}: {SAFETY_REFUSED} ({code}: {message or 'no message'})"
    return f"video {status}: {message or 'no reason given'}"


def _expired(video: dict[str, Any], missing: NotFound) -> bool:
    """The content is gone because it expired: ``expires_at`` has passed (by this machine's clock),
    or the gateway's 404 says so (its clock is the one that counts)."""
    expires = video.get("expires_at")
    return (
        isinstance(expires, int | float) and expires <= time.time()
    ) or "expire" in missing.message.lower()


async def poll_video(client: GatewayClient, video_id: str, media: MediaFiles) -> PollAnswer:
    video = as_dict(await _method(client, "video_get")(video_id))
    status = str(video.get("status", ""))
    if status not in VIDEO_TERMINAL_STATUSES:
        return PollAnswer("running", {"remote": _video_summary(video)})
    summary = {"remote": _video_summary(video)}
    if status == "completed":
        path = media.path_for(0, "mp4")
        try:
            await _method(client, "video_download")(video_id, path)
        except NotFound as missing:
            # The video is known (the poll just answered) but its content is not there.
            reason = MEDIA_EXPIRED if _expired(video, missing) else COMPLETED_WITHOUT_MEDIA
            return PollAnswer("failed", summary, f"video {video_id} {reason} ({missing.message})")
        return PollAnswer("done", {**summary, "media_paths": [media.relative(path)]})
    if status == "cancelled":
        return PollAnswer("cancelled", summary, "the video was cancelled")
    return PollAnswer("failed", summary, _failure_reason(status, video.get("error")))


async def cancel_video(client: GatewayClient, video_id: str) -> None:
    await _method(client, "video_delete")(video_id)


# -- legacy V1 media tasks --------------------------------------------------------------------

_TASK_TERMINAL = {"completed", "failed", "cancelled"}  # anything else is still running (as V2)


def _task_id(answer: dict[str, Any]) -> str:
    data: dict[str, Any] = answer["data"] if isinstance(answer.get("data"), dict) else {}
    for candidate in (answer.get("task_id"), answer.get("id"), data.get("task_id"), data.get("id")):
        if candidate:
            return str(candidate)
    raise ValueError("the V1 create answer carries no task id")


async def submit_video_v1(client: GatewayClient, request: dict[str, Any], media: MediaFiles) -> Submitted:
    answer = as_dict(await _method(client, "video_v1_create")(dict(request)))
    return Submitted(_task_id(answer), {"remote": answer})


# Keys of a finished task's ``data`` that hold file links (V1 data is opaque; public-facts.md).
_LINK_KEYS = ("url", "video_url", "audio_url", "image_url", "file_url")


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _task_links(data: dict[str, Any]) -> list[str]:
    links = [data[key] for key in _LINK_KEYS if isinstance(data.get(key), str)]
    links.extend(url for url in _listed(data.get("urls")) if isinstance(url, str))
    for entry in [*_listed(data.get("images")), *_listed(data.get("files"))]:
        if isinstance(entry, dict) and isinstance(entry.get("url"), str):
            links.append(entry["url"])
    return list(dict.fromkeys(links))


def _downloadable(link: str) -> bool:
    """http(s) links and paths on the gateway; anything else (a data: or file: URL) is only kept."""
    return link.startswith(("https://", "http://", "/"))


def _task_blobs(data: dict[str, Any]) -> list[str]:
    blobs = [data["b64_json"]] if isinstance(data.get("b64_json"), str) else []
    for image in _listed(data.get("images")):
        if isinstance(image, dict) and isinstance(image.get("b64_json"), str):
            blobs.append(image["b64_json"])
    return blobs


async def _task_files(
    client: GatewayClient, task: dict[str, Any], data: dict[str, Any], media: MediaFiles
) -> tuple[list[str], list[str]]:
    """A finished task's files in ``media/``: base64 payloads decoded, links downloaded now
    (real gateways' links expire within hours). Returns the local paths and the links."""
    paths: list[str] = []
    for blob in _task_blobs(data):
        path = media.write_base64(len(paths), blob)
        if path:
            paths.append(path)
    links = _task_links(data)
    for link in filter(_downloadable, links):
        expected = link_extension(link, data.get("mime_type") or data.get("content_type"), task.get("type"))
        paths.append(await media.download(client, len(paths), link, expected))
    return paths, links


# A file link answered with one of these has expired (or its signature no longer holds).
_LINK_REFUSED = frozenset({401, 403, 404, 410})


class LinkRefused(GatewayError):
    """A finished task's file links were refused, even fresh ones: the poll counts as failed (the
    poller asks again with back-off), never as "the gateway no longer knows the task"."""


def _task_data(task: dict[str, Any]) -> dict[str, Any]:
    return task["data"] if isinstance(task.get("data"), dict) else {}


async def poll_task(client: GatewayClient, task_id: str, media: MediaFiles) -> PollAnswer:
    task = as_dict(await _method(client, "task_get")(task_id))
    status = str(task.get("status", ""))
    if status not in _TASK_TERMINAL:
        return PollAnswer("running", {"remote": task})
    if status == "completed":
        try:
            paths, urls = await _task_files(client, task, _task_data(task), media)
        except APIStatusError as refused:
            if refused.status not in _LINK_REFUSED:
                raise
            # A task's links are presigned and expire (within hours): one more poll gives fresh ones.
            task = as_dict(await _method(client, "task_get")(task_id))
            try:
                paths, urls = await _task_files(client, task, _task_data(task), media)
            except APIStatusError as again:
                if again.status not in _LINK_REFUSED:
                    raise
                raise LinkRefused(
                    f"the task's file link was refused ({again.status}) after a fresh poll too: {again}; "
                    "polled again later (the paid task is kept)"
                ) from again
        return PollAnswer("done", {"remote": task, "media_paths": paths, "media_urls": urls})
    if status == "cancelled":
        return PollAnswer("cancelled", {"remote": task}, "the task was cancelled")
    return PollAnswer(
        "failed", {"remote": task}, f"task {status or 'failed'}: {task.get('error') or 'no reason'}"
    )


CALLS: dict[str, KindCalls] = {
    "chat": KindCalls(submit_chat),
    "responses": KindCalls(submit_responses),
    "messages": KindCalls(submit_messages),
    "generate_content": KindCalls(submit_generate_content),
    "image": KindCalls(submit_image),
    "judgment": KindCalls(submit_judgment),
    "web_search": KindCalls(submit_web_search),
    "video": KindCalls(submit_video, poll_video, cancel_video),
    "video_v1": KindCalls(submit_video_v1, poll_task),
}

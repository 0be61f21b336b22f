"""The emulator's media, judgment and search routes (images, video V2 and V1 tasks, typed
judgment, web search) and the generate-content image hook the core calls.

``create_app`` adds :func:`routes`; the core's generate-content handler calls
:func:`generate_content_image_reply` for models of ``kind: image``.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from relaybatch.emulator.billing import TokenCounts
from relaybatch.emulator.config import ModelConfig
from relaybatch.emulator.errors import generate_content_error
from relaybatch.emulator.media import image_route, judgment_route, search_route, video_v1, video_v2
from relaybatch.emulator.media.common import media_store
from relaybatch.emulator.media.gemini_images import plan_image_reply
from relaybatch.emulator.media.problems import InvalidMediaRequest
from relaybatch.emulator.state import Account
from relaybatch.emulator.synth import InlineImage, Reply

__all__ = ["generate_content_image_reply", "routes"]


def routes() -> list[Route]:
    return [
        Route(image_route.ROUTE, image_route.images_generations, methods=["POST"]),
        Route("/v2/videos", video_v2.create_video, methods=["POST"]),
        Route("/v2/videos/{video_id}", video_v2.get_video, methods=["GET"]),
        Route("/v2/videos/{video_id}", video_v2.delete_video, methods=["DELETE"]),
        Route("/v2/videos/{video_id}/content", video_v2.video_content, methods=["GET"]),
        Route(video_v1.ROUTE, video_v1.create_task, methods=["POST"]),
        Route("/v1/videos/generations/{task_id}/content", video_v1.task_file, methods=["GET"]),
        Route("/v1/tasks/{task_id}", video_v1.get_task, methods=["GET"]),
        Route(judgment_route.ROUTE, judgment_route.typed_judgment, methods=["POST"]),
        *search_route.routes(),
    ]


async def generate_content_image_reply(
    request: Request, account: Account, model: ModelConfig, body: dict[str, Any]
) -> Reply | Response:
    """An image model's generate-content answer for the core to bill and render.

    The account is already authenticated; billing stays with the core, from the counts here.
    Drawing runs in a worker thread so a large picture does not stall the event loop.
    """
    del account  # the answer does not depend on who asks
    settings = media_store(request).settings
    try:
        plan = await run_in_threadpool(
            plan_image_reply, model, body, max_edge=settings.images.render_max_edge
        )
    except InvalidMediaRequest as problem:
        return generate_content_error(400, problem.message)
    counts = TokenCounts(
        input=plan.input_text_tokens,
        input_image=plan.input_image_tokens,
        output=plan.output_text_tokens,
        output_image=plan.output_image_tokens,
    )
    images = tuple(InlineImage(mime, data) for mime, data in plan.images)
    return Reply(text=plan.text or "", finish=plan.finish, counts=counts, images=images)

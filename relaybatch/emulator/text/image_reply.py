"""An image model's answer on the generate-content route: drawn by the media package, billed here.

The account is already authenticated; billing stays with the text route, from the counts here.
Drawing runs in a worker thread so a large picture does not stall the event loop.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from relaybatch.emulator.billing import TokenCounts
from relaybatch.emulator.config import ModelConfig
from relaybatch.emulator.errors import generate_content_error
from relaybatch.emulator.media.gemini_images import plan_image_reply
from relaybatch.emulator.problems import InvalidRequest
from relaybatch.emulator.route_common import route_settings
from relaybatch.emulator.text.synth import InlineImage, Reply


async def image_reply(request: Request, model: ModelConfig, body: dict[str, Any]) -> Reply | Response:
    """The reply to bill and render, or the ready 400 for a request the image model refuses."""
    max_edge = route_settings(request).images.render_max_edge
    try:
        plan = await run_in_threadpool(plan_image_reply, model, body, max_edge=max_edge)
    except InvalidRequest as problem:
        return generate_content_error(400, problem.message)
    counts = TokenCounts(
        input=plan.input_text_tokens,
        input_image=plan.input_image_tokens,
        output=plan.output_text_tokens,
        output_image=plan.output_image_tokens,
    )
    images = tuple(InlineImage(mime, data) for mime, data in plan.images)
    return Reply(text=plan.text or "", finish=plan.finish, counts=counts, images=images)

"""Media routes: image generation, video V2 jobs and legacy V1 video tasks.

``create_app`` adds :func:`routes`. Image models on the generate-content route are answered by the
text routes, which call :func:`relaybatch.emulator.media.gemini_images.plan_image_reply`.
"""

from starlette.routing import Route

from relaybatch.emulator.media import image_route, video_v1, video_v2

__all__ = ["routes"]


def routes() -> list[Route]:
    return [
        Route(image_route.ROUTE, image_route.images_generations, methods=["POST"]),
        Route(video_v2.ROUTE, video_v2.create_video, methods=["POST"]),
        Route(video_v2.ROUTE + "/{video_id}", video_v2.get_video, methods=["GET"]),
        Route(video_v2.ROUTE + "/{video_id}", video_v2.delete_video, methods=["DELETE"]),
        Route(video_v2.ROUTE + "/{video_id}/content", video_v2.video_content, methods=["GET"]),
        Route(video_v1.ROUTE, video_v1.create_task, methods=["POST"]),
        Route(video_v1.ROUTE + "/{task_id}/content", video_v1.task_file, methods=["GET"]),
        Route("/v1/tasks/{task_id}", video_v1.get_task, methods=["GET"]),
    ]

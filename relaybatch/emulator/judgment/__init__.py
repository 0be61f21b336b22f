"""Typed judgment: POST /v1/typedjudge (``rules`` validates and answers, ``route`` bills)."""

from starlette.routing import Route

from relaybatch.emulator.judgment.route import ROUTE, typed_judgment

__all__ = ["routes"]


def routes() -> list[Route]:
    return [Route(ROUTE, typed_judgment, methods=["POST"])]

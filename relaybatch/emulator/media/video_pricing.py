"""What a video costs: seconds x the per-second price, with or without an audio track.

The interface names no audio flag; the emulator accepts an optional boolean ``audio`` on both video
routes (the runner's cost code reads the same flag) for models whose price has
``generation.video.per_second_with_audio``; other models refuse ``audio: true``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from relaybatch.emulator.billing import generation_cost
from relaybatch.emulator.problems import InvalidRequest

AUDIO_FIELD = "audio"


def wants_audio(body: dict[str, Any]) -> bool:
    value = body.get(AUDIO_FIELD)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequest("'audio' must be true or false", param=AUDIO_FIELD)
    return value


def video_quote(pricing: dict[str, Any], model_id: str, seconds: int, *, with_audio: bool) -> Decimal:
    """USD for ``seconds`` of video; raises InvalidRequest when audio is asked of a silent model."""
    video = (pricing.get("generation") or {}).get("video") or {}
    if with_audio and video.get("per_second_with_audio") is None:
        raise InvalidRequest(f"model '{model_id}' has no audio track option", param=AUDIO_FIELD)
    return generation_cost(pricing, video_seconds=seconds, with_audio=with_audio)

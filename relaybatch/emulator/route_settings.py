"""Settings of the media, judgment and search routes, read from the config file's ``media:`` mapping.

Every timing has a default that mirrors the real gateway (90 s before the first padding chunk, then
one every 30 s); tests and benchmarks pass fractions of a second instead.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from relaybatch.errors import UserError


class PaddingSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Seconds without an upstream answer before the first whitespace chunk, then between chunks.
    first_seconds: float = Field(default=90.0, gt=0)
    interval_seconds: float = Field(default=30.0, gt=0)
    # The whitespace written each time; JSON allows it before the document.
    chunk: str = Field(default="\n", pattern=r"^[ \t\r\n]+$")


class ImageSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Simulated upstream latency of a non-streaming image request (seconds, wall clock), unless
    # the model's options or the x-emulator-fault header (``upstream=SECONDS``) say otherwise.
    upstream_seconds: float = Field(default=0.0, ge=0)
    # Size shortcut: images are drawn with this longest edge (aspect kept) while the response
    # reports the resolved size; 0 draws at the full resolved size.
    render_max_edge: int = Field(default=256, ge=0)
    # The largest custom side the emulator accepts (the interface gives no upper bound).
    max_custom_edge: int = Field(default=3840, ge=16)


class VideoSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Emulator-clock seconds a V2 video stays queued, then renders (per second of video).
    queued_seconds: float = Field(default=5.0, ge=0)
    render_seconds_base: float = Field(default=10.0, ge=0)
    render_seconds_per_video_second: float = Field(default=2.0, ge=0)
    # How long finished content stays downloadable (expires_at - completed_at).
    expires_after_seconds: float = Field(default=3600.0, gt=0)
    # Fault modes of long video batches (docs/emulator.md, "Video V2"): the word a rendering video's
    # status carries (a gateway that says `processing` or anything else the client does not know);
    # each video's render time spread by up to this share either way (deterministic per video);
    # and a cap on videos queued or rendering per account and model (0 = none): a create past it
    # is refused 429 with the gateway's concurrency error, uncharged.
    running_status: str = Field(default="in_progress", min_length=1)
    render_jitter: float = Field(default=0.0, ge=0, lt=1)
    max_in_flight: int = Field(default=0, ge=0)
    # Legacy V1 tasks: pending, then processing.
    v1_pending_seconds: float = Field(default=3.0, ge=0)
    v1_processing_seconds: float = Field(default=15.0, ge=0)
    # Legacy V1 file links expire this long after the poll that gave them (0 = never), as a
    # provider's presigned links do; a later poll gives a fresh one.
    v1_link_seconds: float = Field(default=0.0, ge=0)


class JudgmentSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The answer's `model` names an exact build, unlike the requested identifier.
    build_suffix: str = "-2026-03-01"
    # Used only when the catalog has no price for the judgment model.
    fallback_usd_per_million_input: Decimal = Decimal("0.042")


class SearchSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Used only when the catalog has no search model with a per-request price.
    fallback_usd_per_request: Decimal = Decimal("0.05")
    # The search upstream's own limit per account (requests per rolling minute of the emulator
    # clock; 0 = none). Past it a call is 503 with Retry-After, as the real search routes answer;
    # the account's gateway-wide limit stays the core's 429.
    upstream_rpm: int = Field(default=0, ge=0)


class RouteSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    padding: PaddingSettings = Field(default_factory=PaddingSettings)
    images: ImageSettings = Field(default_factory=ImageSettings)
    video: VideoSettings = Field(default_factory=VideoSettings)
    judgment: JudgmentSettings = Field(default_factory=JudgmentSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)


def parse_route_settings(raw: dict[str, Any] | None) -> RouteSettings:
    """Validate the config's ``media:`` mapping; a bad value is a UserError naming the field."""
    try:
        return RouteSettings.model_validate(raw or {})
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UserError(f"emulator config: media.{where}: {first['msg']}") from None

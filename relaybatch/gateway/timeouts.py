"""Timeouts per kind of call, in seconds; every one is a setting.

A long image request gets no byte for up to 90 s, then a whitespace padding chunk every 30 s
until the JSON arrives, so its read timeout must outlast the first silence with room to spare.
The read timeout restarts with every chunk: a gateway that pads forever is bounded by nothing but
the caller, and a connection that goes quiet past ``image_read`` fails with ``StalledConnection``.
"""

from __future__ import annotations

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

# The interface's padding schedule: first chunk after 90 s of silence, then one every 30 s.
PADDING_FIRST_CHUNK_SECONDS = 90.0
PADDING_INTERVAL_SECONDS = 30.0


class ClientTimeouts(BaseModel):
    model_config = ConfigDict(frozen=True)

    connect: float = Field(default=10.0, gt=0, description="Seconds to open a connection.")
    read: float = Field(default=300.0, gt=0, description="Seconds without a byte before a call fails.")
    write: float = Field(default=60.0, gt=0, description="Seconds to send a request body.")
    pool: float = Field(default=120.0, gt=0, description="Seconds to wait for a free pooled connection.")
    image_read: float = Field(
        default=150.0, gt=0, description="Read timeout of image generation; must exceed the 30 s padding gap."
    )
    padding_interval: float = Field(
        default=PADDING_INTERVAL_SECONDS, gt=0, description="The gateway's padding interval (30 s)."
    )
    download_read: float = Field(default=120.0, gt=0, description="Read timeout of a video download.")

    @model_validator(mode="after")
    def _image_read_outlasts_padding(self) -> ClientTimeouts:
        if self.image_read <= self.padding_interval:
            raise ValueError(
                f"image_read ({self.image_read:g} s) must be longer than the gateway's "
                f"{self.padding_interval:g} s padding interval"
            )
        return self

    def default(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.write, pool=self.pool)

    def long_image(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect, read=self.image_read, write=self.write, pool=self.pool)

    def download(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect, read=self.download_read, write=self.write, pool=self.pool)

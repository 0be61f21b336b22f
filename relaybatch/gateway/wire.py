"""The base every request and response model shares: unknown fields are kept, never refused."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class WireModel(BaseModel):
    """A JSON object from or to the gateway; fields the client does not know are carried along."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

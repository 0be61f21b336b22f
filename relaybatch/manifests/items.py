"""Items: one gateway call each, with a stable key that survives reloads of the same manifest."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, Field

from relaybatch.kinds import Kind


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: equal requests give equal text, so equal keys."""
    # default=str: dates and other scalars read from Parquet hash by their text, never by identity.
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def item_key(job: str, kind: str, request: dict[str, Any], request_json: str | None = None) -> str:
    """The stable key of an item: a hash of (job name, kind, canonical request).

    `request_json` is `canonical_json(request)` when the caller has it: the key's text is then
    joined from it instead of dumping the request a second time (the same text either way).
    """
    if request_json is None:
        text = canonical_json([job, kind, request])
    else:
        text = canonical_json([job, kind])[:-1] + "," + request_json + "]"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class Item(BaseModel):
    """One gateway call to make: where it came from, what to send, and what to carry to results."""

    key: str
    item_id: str
    job: str
    kind: Kind
    request: dict[str, Any]
    carry: dict[str, Any] = Field(default_factory=dict)
    source: str = Field(default="", description="file:line the item came from, for error messages")

    @classmethod
    def build(
        cls,
        *,
        item_id: str,
        job: str,
        kind: Kind,
        request: dict[str, Any],
        carry: dict[str, Any] | None = None,
        source: str = "",
        request_json: str | None = None,
    ) -> Item:
        # model_construct: every field is built here from checked parts, so skip re-validation
        # (it is a third of the cost of expanding a million-row file).
        return cls.model_construct(
            key=item_key(job, kind, request, request_json),
            item_id=item_id,
            job=job,
            kind=kind,
            request=request,
            carry=carry or {},
            source=source,
        )

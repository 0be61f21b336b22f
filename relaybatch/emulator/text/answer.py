"""What every text format renders: the reply, its projected usage and the ids of this answer."""

from __future__ import annotations

from dataclasses import dataclass

from relaybatch.emulator.billing import TokenCounts
from relaybatch.emulator.text.synth import Reply


@dataclass(slots=True)
class Answer:
    reply: Reply
    counts: TokenCounts  # projected onto the caller's format (converters.project_counts)
    model: str
    digest: str  # request digest: ids derive from it, so the same request gets the same ids
    created: int

    def id(self, prefix: str) -> str:
        return prefix + self.digest[:24]

"""Each kind's raw usage, normalised into one set of counts that never overlap.

The vendor families count differently (shared conventions, DESIGN.md): chat completions and
responses include cache reads in the prompt count and reasoning in the completion count;
messages report cache reads and writes beside an input count that excludes them;
generate-content includes cache reads in the prompt but reports thoughts beside the candidates.
``UsageCounts`` removes those overlaps once, here, so pricing adds components and never
double-counts a token.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import Any


class UsageError(ValueError):
    """A usage object whose counts contradict each other (e.g. more cached than prompt tokens)."""


@dataclass(frozen=True)
class UsageCounts:
    """Disjoint billable quantities of one call; each is priced at exactly one rate."""

    input_tokens: int = 0  # uncached text input, not counting cache reads or writes
    output_tokens: int = 0  # visible text output, not counting reasoning
    reasoning_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    input_image_tokens: int = 0
    output_image_tokens: int = 0
    images: int = 0
    audio_seconds: Decimal = Decimal(0)
    video_seconds: Decimal = Decimal(0)  # without audio
    video_seconds_with_audio: Decimal = Decimal(0)
    requests: int = 0  # successful per-request-priced calls (web search)
    quote_usd: Decimal | None = None  # a video quote fixed by the gateway at creation

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if value is not None and value < 0:
                raise UsageError(f"usage {item.name} is negative: {value}")

    @property
    def prompt_tokens(self) -> int:
        """The prompt the over-200k tier is measured against: uncached + cache reads + cache writes.

        Input image tokens are not part of it (the shared pricing rule, and the emulator's billing).
        """
        return (
            self.input_tokens
            + self.cache_read_tokens
            + self.cache_write_5m_tokens
            + self.cache_write_1h_tokens
        )


def _count(section: Mapping[str, Any] | None, name: str) -> int:
    value = section.get(name) if isinstance(section, Mapping) else None
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"usage {name} is not a whole number: {value!r}")
    return value


def _section(parent: Mapping[str, Any] | None, name: str) -> Mapping[str, Any] | None:
    value = parent.get(name) if isinstance(parent, Mapping) else None
    return value if isinstance(value, Mapping) else None


def _part(total: int, included: int, total_name: str, part_name: str) -> int:
    """``total`` minus a part it includes; a part larger than the total is a broken usage object."""
    if included > total:
        raise UsageError(f"usage {part_name} ({included}) exceeds {total_name} ({total})")
    return total - included


def _openai_usage(usage: Mapping[str, Any], prompt_name: str, completion_name: str) -> UsageCounts:
    """Chat completions and responses: cache reads inside the prompt, reasoning inside the completion.

    The two families differ only in their names (``prompt_tokens`` / ``input_tokens`` and
    ``completion_tokens`` / ``output_tokens``, each with a ``<name>_details`` section).
    """
    prompt, completion = _count(usage, prompt_name), _count(usage, completion_name)
    cached = _count(_section(usage, f"{prompt_name}_details"), "cached_tokens")
    reasoning = _count(_section(usage, f"{completion_name}_details"), "reasoning_tokens")
    return UsageCounts(
        input_tokens=_part(prompt, cached, prompt_name, "cached_tokens"),
        cache_read_tokens=cached,
        output_tokens=_part(completion, reasoning, completion_name, "reasoning_tokens"),
        reasoning_tokens=reasoning,
    )


def chat_completions_usage(usage: Mapping[str, Any]) -> UsageCounts:
    return _openai_usage(usage, "prompt_tokens", "completion_tokens")


def responses_usage(usage: Mapping[str, Any]) -> UsageCounts:
    return _openai_usage(usage, "input_tokens", "output_tokens")


def messages_usage(usage: Mapping[str, Any]) -> UsageCounts:
    # input_tokens excludes every cache token; cache_creation_input_tokens = 5m + 1h writes.
    writes = _count(usage, "cache_creation_input_tokens")
    writes_1h = _count(_section(usage, "cache_creation"), "ephemeral_1h_input_tokens")
    return UsageCounts(
        input_tokens=_count(usage, "input_tokens"),
        cache_read_tokens=_count(usage, "cache_read_input_tokens"),
        cache_write_5m_tokens=_part(
            writes, writes_1h, "cache_creation_input_tokens", "ephemeral_1h_input_tokens"
        ),
        cache_write_1h_tokens=writes_1h,
        output_tokens=_count(usage, "output_tokens"),  # includes thinking: billed as output
    )


def _modality_tokens(details: Any, modality: str) -> int:
    if not isinstance(details, list):
        return 0
    return sum(_count(entry, "tokenCount") for entry in details if entry.get("modality") == modality)


def generate_content_usage(metadata: Mapping[str, Any]) -> UsageCounts:
    prompt, cached = _count(metadata, "promptTokenCount"), _count(metadata, "cachedContentTokenCount")
    candidates = _count(metadata, "candidatesTokenCount")  # excludes thoughtsTokenCount
    image_out = _modality_tokens(metadata.get("candidatesTokensDetails"), "IMAGE")
    # Inline images in the prompt are reported per modality and priced as image tokens.
    image_in = _modality_tokens(metadata.get("promptTokensDetails"), "IMAGE")
    text_in = _part(prompt, cached, "promptTokenCount", "cachedContentTokenCount")
    return UsageCounts(
        input_tokens=_part(text_in, image_in, "uncached promptTokenCount", "IMAGE tokenCount"),
        input_image_tokens=image_in,
        cache_read_tokens=cached,
        output_tokens=_part(candidates, image_out, "candidatesTokenCount", "IMAGE tokenCount"),
        output_image_tokens=image_out,
        reasoning_tokens=_count(metadata, "thoughtsTokenCount"),
    )


def images_usage(usage: Mapping[str, Any] | None, images: int) -> UsageCounts:
    """Image generation: tokens (for token-priced models) and the image count (for per-image ones)."""
    input_total, output_total = _count(usage, "input_tokens"), _count(usage, "output_tokens")
    input_details = _section(usage, "input_tokens_details")
    output_details = _section(usage, "output_tokens_details")
    image_in = _count(input_details, "image_tokens")
    # Without details every output token of an image call is an image token.
    image_out = _count(output_details, "image_tokens") if output_details else output_total
    return UsageCounts(
        input_tokens=_part(input_total, image_in, "input_tokens", "image_tokens"),
        input_image_tokens=image_in,
        output_tokens=_part(output_total, image_out, "output_tokens", "image_tokens"),
        output_image_tokens=image_out,
        images=images,
    )


def seconds_value(value: Any, default: Decimal | None = None) -> Decimal | None:
    """A video length as the request or answer gives it ("8", 8 or "8s"), as a Decimal."""
    if value is None or isinstance(value, bool):
        return default
    text = str(value).strip().removesuffix("s")
    try:
        seconds = Decimal(text)
    except ArithmeticError:
        return default
    return seconds if seconds.is_finite() and seconds >= 0 else default


def video_usage(seconds: Decimal, *, with_audio: bool, quote_usd: Decimal | None = None) -> UsageCounts:
    if with_audio:
        return UsageCounts(video_seconds_with_audio=seconds, quote_usd=quote_usd)
    return UsageCounts(video_seconds=seconds, quote_usd=quote_usd)


def judgment_usage(usage: Mapping[str, Any]) -> UsageCounts:
    return UsageCounts(
        input_tokens=_count(usage, "input_tokens"), output_tokens=_count(usage, "output_tokens")
    )


def web_search_usage(succeeded: bool) -> UsageCounts:
    return UsageCounts(requests=1 if succeeded else 0)


def token_columns(counts: UsageCounts | None) -> dict[str, int | None]:
    """The results Parquet's token columns, with the ledger's meaning (docs/costs.md, "Usage")."""
    if counts is None:
        return dict.fromkeys(("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens"))
    return {
        "input_tokens": counts.input_tokens,
        "output_tokens": counts.output_tokens,
        "cached_tokens": counts.cache_read_tokens,
        "reasoning_tokens": counts.reasoning_tokens,
    }


def read_or_none(reader: Any, usage: Any, *extra: Any) -> UsageCounts | None:
    """A family reader applied to an answer's usage; None when it is absent or contradicts itself."""
    if not isinstance(usage, Mapping) or not usage:
        return None
    try:
        counts: UsageCounts = reader(usage, *extra)
    except UsageError:
        return None
    return counts


# The one table of kind -> reader of the answer's usage object, for the kinds whose answer carries
# one (an answer without it is an unknown cost, never a silent zero): the ledger (``usage_for_call``)
# and the results' token columns (``token_counts``) both read usage through it.
USAGE_READERS: dict[str, Callable[[Mapping[str, Any]], UsageCounts]] = {
    "chat": chat_completions_usage,
    "responses": responses_usage,
    "messages": messages_usage,
    "generate_content": generate_content_usage,
    "judgment": judgment_usage,
}


def token_counts(kind: str, usage: Any, images: int) -> dict[str, int | None] | None:
    """The results' token columns of a stored answer's ``usage`` (``images``: the files an image
    call returned); None for kinds without token counts."""
    if kind == "image":
        return token_columns(read_or_none(images_usage, usage, images))
    reader = USAGE_READERS.get(kind)
    return None if reader is None else token_columns(read_or_none(reader, usage))

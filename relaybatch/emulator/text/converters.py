"""Converters and usage projection: answering a model of one family in another family's format.

A reply's ``TokenCounts`` are first projected onto what the caller's format can express, and the
call is billed on the projected counts, so a client can always recompute its cost from the usage
it was shown and the pricing route:

- openai formats (chat completions, responses) and generate-content have no cache-write fields:
  cache writes are reported, and billed, as uncached input;
- the messages format has no separate reasoning count: reasoning is reported, and billed, as output.
"""

from __future__ import annotations

from typing import Literal

from relaybatch.emulator.billing import TokenCounts

Format = Literal["chat_completions", "responses", "messages", "generate_content"]

FAMILY_OF_FORMAT: dict[Format, str] = {
    "chat_completions": "openai",
    "responses": "openai",
    "messages": "anthropic",
    "generate_content": "gemini",
}

# Where a caller of each format reaches models of other families.
CONVERTER_BASE: dict[Format, str] = {
    "chat_completions": "/openai/v1",
    "responses": "/openai/v1",
    "messages": "/anthropic",
    "generate_content": "/gemini",
}

# Hosted (built-in) tool types the responses converter cannot run.
FUNCTION_TOOL_TYPES = {"function"}


def project_counts(counts: TokenCounts, fmt: Format) -> TokenCounts:
    if fmt == "messages":
        if not counts.reasoning:
            return counts
        return TokenCounts(
            counts.input,
            counts.cache_read,
            counts.cache_write,
            counts.cache_write_1h,
            counts.output + counts.reasoning,
            0,
            counts.input_image,
            counts.output_image,
        )
    writes = counts.cache_write + counts.cache_write_1h
    if not writes:
        return counts
    return TokenCounts(
        counts.input + writes,
        counts.cache_read,
        0,
        0,
        counts.output,
        counts.reasoning,
        counts.input_image,
        counts.output_image,
    )


def family_mismatch(fmt: Format, model_family: str, model_id: str) -> str | None:
    """The 400 message when a native route gets a model of another family, else None."""
    family = FAMILY_OF_FORMAT[fmt]
    if model_family == family:
        return None
    return (
        f"model '{model_id}' is a {model_family} model; this native route serves only {family} "
        f"models (use the converter base {CONVERTER_BASE[fmt]} to call other families)"
    )

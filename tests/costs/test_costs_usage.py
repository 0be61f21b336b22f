"""Each family's usage object becomes disjoint counts: no token is counted twice."""

from __future__ import annotations

from decimal import Decimal

import pytest

from relaybatch.cost_model.usage import (
    UsageCounts,
    UsageError,
    chat_completions_usage,
    generate_content_usage,
    images_usage,
    judgment_usage,
    messages_usage,
    responses_usage,
    seconds_value,
)


def test_chat_completions_prompt_includes_cached_and_completion_includes_reasoning() -> None:
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 300,
        "total_tokens": 1300,
        "prompt_tokens_details": {"cached_tokens": 600},
        "completion_tokens_details": {"reasoning_tokens": 200},
    }
    assert chat_completions_usage(usage) == UsageCounts(
        input_tokens=400, cache_read_tokens=600, output_tokens=100, reasoning_tokens=200
    )


def test_chat_completions_without_details() -> None:
    assert chat_completions_usage({"prompt_tokens": 7, "completion_tokens": 3}) == UsageCounts(
        input_tokens=7, output_tokens=3
    )


def test_responses_usage_has_the_same_inclusion() -> None:
    usage = {
        "input_tokens": 50,
        "output_tokens": 40,
        "input_tokens_details": {"cached_tokens": 20},
        "output_tokens_details": {"reasoning_tokens": 15},
    }
    assert responses_usage(usage) == UsageCounts(
        input_tokens=30, cache_read_tokens=20, output_tokens=25, reasoning_tokens=15
    )


def test_messages_input_excludes_cache_and_1h_writes_are_a_subset_of_creation() -> None:
    usage = {
        "input_tokens": 10,
        "output_tokens": 90,
        "cache_read_input_tokens": 5000,
        "cache_creation_input_tokens": 700,
        "cache_creation": {"ephemeral_5m_input_tokens": 500, "ephemeral_1h_input_tokens": 200},
    }
    assert messages_usage(usage) == UsageCounts(
        input_tokens=10,
        cache_read_tokens=5000,
        cache_write_5m_tokens=500,
        cache_write_1h_tokens=200,
        output_tokens=90,
    )


def test_generate_content_thoughts_are_beside_candidates_and_image_tokens_split_out() -> None:
    metadata = {
        "promptTokenCount": 120,
        "cachedContentTokenCount": 100,
        "candidatesTokenCount": 1300,
        "thoughtsTokenCount": 40,
        "totalTokenCount": 1460,
        "candidatesTokensDetails": [
            {"modality": "TEXT", "tokenCount": 10},
            {"modality": "IMAGE", "tokenCount": 1290},
        ],
    }
    assert generate_content_usage(metadata) == UsageCounts(
        input_tokens=20,
        cache_read_tokens=100,
        output_tokens=10,
        output_image_tokens=1290,
        reasoning_tokens=40,
    )


def test_generate_content_prompt_images_are_image_tokens() -> None:
    metadata = {
        "promptTokenCount": 300,
        "cachedContentTokenCount": 40,
        "candidatesTokenCount": 5,
        "promptTokensDetails": [
            {"modality": "TEXT", "tokenCount": 42},
            {"modality": "IMAGE", "tokenCount": 258},
        ],
    }
    assert generate_content_usage(metadata) == UsageCounts(
        input_tokens=2, input_image_tokens=258, cache_read_tokens=40, output_tokens=5
    )


def test_images_usage_splits_text_and_image_tokens() -> None:
    usage = {
        "input_tokens": 60,
        "input_tokens_details": {"text_tokens": 50, "image_tokens": 10},
        "output_tokens": 4200,
        "output_tokens_details": {"image_tokens": 4160, "text_tokens": 40},
        "total_tokens": 4260,
    }
    assert images_usage(usage, images=2) == UsageCounts(
        input_tokens=50, input_image_tokens=10, output_tokens=40, output_image_tokens=4160, images=2
    )


def test_images_usage_without_output_details_counts_output_as_image_tokens() -> None:
    assert images_usage({"input_tokens": 5, "output_tokens": 100}, images=1) == UsageCounts(
        input_tokens=5, output_image_tokens=100, images=1
    )


def test_judgment_usage() -> None:
    assert judgment_usage({"input_tokens": 12, "output_tokens": 2}) == UsageCounts(
        input_tokens=12, output_tokens=2
    )


def test_cached_more_than_prompt_is_an_error_not_a_negative_count() -> None:
    with pytest.raises(UsageError, match="cached_tokens"):
        chat_completions_usage({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 6}})


def test_non_integer_count_is_an_error() -> None:
    with pytest.raises(UsageError, match="prompt_tokens"):
        chat_completions_usage({"prompt_tokens": 1.5})


@pytest.mark.parametrize(
    ("raw", "expected"), [("8", Decimal(8)), (4, Decimal(4)), ("12s", Decimal(12)), (None, None)]
)
def test_seconds_value(raw: object, expected: Decimal | None) -> None:
    assert seconds_value(raw) == expected

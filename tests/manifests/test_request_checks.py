"""Per-kind request checks mirror the gateway's rules: a bad row fails before it costs anything."""

from __future__ import annotations

from typing import Any

import pytest

from relaybatch.manifests.checks import check_request

Q = {"type": "noul", "instructions": "Is it spam?"}


@pytest.mark.parametrize(
    ("kind", "request_body", "field", "words"),
    [
        ("chat", {"model": "m", "messages": []}, "messages", "give at least 1 entry"),
        (
            "chat",
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 3},
            "temperature",
            "2",
        ),
        ("responses", {"model": "m"}, "input", "is required"),
        (
            "messages",
            {"model": "m", "messages": [{"role": "user", "content": "x"}]},
            "max_tokens",
            "is required",
        ),
        (
            "messages",
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "temperature": 1.5,
            },
            "temperature",
            "1",
        ),
        (
            "generate_content",
            {"model": "m", "contents": [{"parts": []}]},
            "contents.0.parts",
            "give at least 1 entry",
        ),
        (
            "generate_content",
            {
                "model": "m",
                "contents": [
                    {"parts": [{"text": "a", "inlineData": {"mimeType": "image/png", "data": "AA=="}}]}
                ],
            },
            "contents.0.parts.0",
            "exactly one of text or inlineData",
        ),
        (
            "generate_content",
            {
                "model": "m",
                "contents": [{"parts": [{"text": "a"}]}],
                "generationConfig": {"imageConfig": {"aspectRatio": "5:4"}},
            },
            "generationConfig.imageConfig.aspectRatio",
            "'5:4' is not an aspect ratio; use one of 16:9, 1:1",
        ),
        ("image", {"model": "m", "prompt": "x" * 32_001}, "prompt", "at most 32,000"),
        ("image", {"model": "m", "prompt": "x", "n": 11}, "n", "10"),
        ("image", {"model": "m", "prompt": "x", "size": "1000x1000"}, "size", "multiples of 16"),
        ("image", {"model": "m", "prompt": "x", "size": "1600x400"}, "size", "between 1:3 and 3:1"),
        (
            "image",
            {"model": "m", "prompt": "x", "quality": "hd"},
            "quality",
            "standard and hd are not accepted",
        ),
        (
            "image",
            {"model": "m", "prompt": "x", "background": "transparent", "output_format": "jpeg"},
            "background",
            "png or webp",
        ),
        (
            "image",
            {"model": "m", "prompt": "x", "output_compression": 50},
            "output_compression",
            "jpeg or webp",
        ),
        (
            "image",
            {"model": "m", "prompt": "x", "output_format": "webp", "output_compression": 101},
            "output_compression",
            "100",
        ),
        ("video", {"model": "m", "prompt": "x", "seconds": 5}, "seconds", 'use "4", "8" or "12"'),
        (
            "video",
            {"model": "m", "prompt": "x", "size": "640x480"},
            "size",
            "'640x480' is not a video size; use one of",
        ),
        (
            "video_v1",
            {"model": "m", "prompt": "x", "seconds": 0},
            "seconds",
            "is 0, below the least allowed (1); use 1 or more",
        ),
        ("judgment", {"model": "j", "state": "s", "questions": {}}, "questions", "give at least 1 entry"),
        (
            "judgment",
            {"model": "j", "state": "s", "questions": {"q": {"type": "choice", "instructions": "i"}}},
            "questions.q.criteria",
            "1 to 255 options",
        ),
        (
            "judgment",
            {
                "model": "j",
                "state": "s",
                "questions": {"q": {"type": "score", "instructions": "i", "criteria": ["only"]}},
            },
            "questions.q.criteria",
            "2 to 10 level",
        ),
        (
            "judgment",
            {"model": "j", "state": "s", "questions": {"q": {**Q, "criteria": {"yes": "a"}}}},
            "questions.q.criteria",
            "exactly the keys true and false",
        ),
        ("judgment", {"model": "j", "questions": {"q": Q}}, "state", "is required"),
        ("web_search", {"route": "search"}, "q", "needs q"),
        ("web_search", {"route": "reader", "q": "x"}, "url", "needs url"),
        ("web_search", {"route": "images", "q": "x"}, "route", "use one of search, simple-search"),
    ],
)
def test_a_request_the_gateway_would_refuse_is_caught(
    kind: str, request_body: dict[str, Any], field: str, words: str
) -> None:
    problems = check_request(kind, request_body)
    assert any(found == field and words in message for found, message in problems), problems


@pytest.mark.parametrize(
    ("kind", "request_body"),
    [
        ("image", {"model": "m", "prompt": "x", "size": "2048x1152", "quality": "xhigh", "n": 10}),
        (
            "image",
            {
                "model": "m",
                "prompt": "x",
                "background": "transparent",
                "output_format": "webp",
                "output_compression": 0,
            },
        ),
        ("video", {"model": "m", "prompt": "x", "seconds": "8", "size": "720x1280"}),
        (
            "judgment",
            {
                "model": "j",
                "state": {"a": 1},
                "questions": {"q": {**Q, "criteria": {"true": "t", "false": "f"}}},
            },
        ),
        ("web_search", {"route": "simple-search", "q": "x"}),
        (
            "messages",
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
            },
        ),
    ],
)
def test_requests_within_the_rules_pass(kind: str, request_body: dict[str, Any]) -> None:
    assert check_request(kind, request_body) == []

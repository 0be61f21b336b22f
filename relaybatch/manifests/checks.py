"""Per-kind request checks that mirror the gateway's rules, so a bad row fails before it is billed.

Each kind has a pydantic model of its request (extra fields pass through to the gateway). The
rules are those of shared/spec/gateway-interface.md plus public-facts.md for the parts it leaves
out (typed-judgment criteria, V2 video seconds and sizes, generate-content image sizing).
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from relaybatch.manifests.images import REFUSED_MIME_TYPES
from relaybatch.manifests.wording import FieldRule, describe, example, findings

MAX_IMAGE_PROMPT_CHARS = 32_000
IMAGE_SIZES = {"auto", "1024x1024", "1536x1024", "1024x1536"}
IMAGE_QUALITIES = {"low", "medium", "high", "auto", "xhigh", "max"}
VIDEO_SECONDS = {"4", "8", "12"}
VIDEO_SIZES = {"720x1280", "1280x720", "1024x1792", "1792x1024"}
ASPECT_RATIOS = {"1:1", "2:3", "3:2", "3:4", "4:3", "9:16", "16:9", "21:9"}
IMAGE_SIZE_NAMES = {"1K", "2K", "4K"}
WEB_SEARCH_ROUTES = ("search", "simple-search", "search-news", "reader")
_CUSTOM_SIZE = re.compile(r"^(\d+)x(\d+)$")

# Fields whose text from a CSV cell is turned into a number before checking.
INTEGER_FIELDS = {"max_tokens", "max_completion_tokens", "max_output_tokens", "n", "output_compression"}
NUMBER_FIELDS = {"temperature", "top_p"}


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    model: str = Field(min_length=1)


class _Turn(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    role: str = Field(min_length=1)
    content: str | list[dict[str, Any]]


class ChatRequest(_Request):
    messages: list[_Turn] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)


class ResponsesRequest(_Request):
    input: str | list[dict[str, Any]] = Field(min_length=1)
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)


class MessagesRequest(_Request):
    messages: list[_Turn] = Field(min_length=1)
    max_tokens: int = Field(ge=1, description="required by the messages route")
    temperature: float | None = Field(default=None, ge=0, le=1)


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    text: str | None = None
    inlineData: dict[str, str] | None = None

    @model_validator(mode="after")
    def _text_or_inline(self) -> _Part:
        if (self.text is None) == (self.inlineData is None):
            raise ValueError(
                "a part carries exactly one of text or inlineData; write {text: ...} or "
                "{inlineData: {mimeType: image/png, data: BASE64}}"
            )
        if self.inlineData is not None and not {"mimeType", "data"} <= self.inlineData.keys():
            raise ValueError("inlineData needs mimeType and data; e.g. {mimeType: image/png, data: BASE64}")
        if (
            self.inlineData is not None
            and self.inlineData["mimeType"] in REFUSED_MIME_TYPES["generate_content"]
        ):
            raise ValueError(f"mimeType {self.inlineData['mimeType']} is not accepted; use PNG, JPEG or WEBP")
        return self


class _Content(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    role: str | None = None
    parts: list[_Part] = Field(min_length=1)


class _ImageConfig(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    aspectRatio: str | None = None
    imageSize: str | None = None

    @field_validator("aspectRatio")
    @classmethod
    def _ratio(cls, value: str | None) -> str | None:
        if value is not None and value not in ASPECT_RATIOS:
            raise ValueError(
                f"{describe(value)} is not an aspect ratio; use one of {', '.join(sorted(ASPECT_RATIOS))}"
            )
        return value

    @field_validator("imageSize")
    @classmethod
    def _size(cls, value: str | None) -> str | None:
        if value is not None and value not in IMAGE_SIZE_NAMES:
            raise ValueError(f"{describe(value)} is not an image size; use 1K, 2K or 4K")
        return value


class _GenerationConfig(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    temperature: float | None = Field(default=None, ge=0, le=2)
    maxOutputTokens: int | None = Field(default=None, ge=1)
    imageConfig: _ImageConfig | None = None


class GenerateContentRequest(_Request):
    contents: list[_Content] = Field(min_length=1)
    generationConfig: _GenerationConfig | None = None


class ImageRequest(_Request):
    prompt: str = Field(min_length=1, max_length=MAX_IMAGE_PROMPT_CHARS)
    n: int = Field(default=1, ge=1, le=10)
    size: str = "auto"
    quality: str = "auto"
    background: Literal["transparent", "opaque", "auto"] = "auto"
    output_format: Literal["png", "jpeg", "webp"] = "png"
    output_compression: int | None = Field(default=None, ge=0, le=100)
    moderation: Literal["low", "auto"] = "auto"

    @field_validator("size")
    @classmethod
    def _size(cls, value: str) -> str:
        if value in IMAGE_SIZES:
            return value
        match = _CUSTOM_SIZE.match(value)
        if not match:
            raise ValueError(
                f"{describe(value)} is not an image size; use auto, 1024x1024, 1536x1024, 1024x1536 "
                "or a custom WIDTHxHEIGHT (e.g. 2048x1152)"
            )
        width, height = int(match[1]), int(match[2])
        if width % 16 or height % 16 or not width or not height:
            raise ValueError(
                f"custom size {value}: both sides must be positive multiples of 16; e.g. 2048x1152"
            )
        if not (1 / 3 <= width / height <= 3):
            raise ValueError(f"custom size {value}: aspect ratio must be between 1:3 and 3:1; e.g. 2048x1152")
        return value

    @field_validator("quality")
    @classmethod
    def _quality(cls, value: str) -> str:
        if value not in IMAGE_QUALITIES:
            raise ValueError(
                f"{describe(value)} is not an image quality (standard and hd are not accepted); "
                "use low, medium, high, auto, xhigh or max"
            )
        return value

    @model_validator(mode="after")
    def _format_rules(self) -> ImageRequest:
        if self.background == "transparent" and self.output_format == "jpeg":
            raise FieldRule(
                "background",
                "background transparent needs output_format png or webp, not jpeg; "
                "set output_format: png, or background: auto",
            )
        if self.output_compression is not None and self.output_format == "png":
            raise FieldRule(
                "output_compression",
                "output_compression applies only to output_format jpeg or webp; "
                "set output_format: webp, or leave output_compression out",
            )
        return self


class VideoRequest(_Request):
    prompt: str = Field(min_length=1)
    seconds: str | None = None
    size: str | None = None

    @field_validator("seconds", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> Any:
        value = str(value) if isinstance(value, int) else value
        # Not hashed before it is known to be text: `seconds: []` was a TypeError (a traceback).
        if value is not None and (not isinstance(value, str) or value not in VIDEO_SECONDS):
            length = example("seconds")
            raise ValueError(f'{describe(value)} is not a video length; use "4", "8" or "12"{length}')
        return value

    @field_validator("size")
    @classmethod
    def _video_size(cls, value: str | None) -> str | None:
        if value is not None and value not in VIDEO_SIZES:
            raise ValueError(
                f"{describe(value)} is not a video size; use one of {', '.join(sorted(VIDEO_SIZES))}"
            )
        return value


class VideoV1Request(_Request):
    prompt: str = Field(min_length=1)
    seconds: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _no_v2_fields(self) -> VideoV1Request:
        extra = self.model_extra or {}
        for name in ("size", "input_reference"):
            if name in extra:
                raise FieldRule(
                    name,
                    f"{name} is a V2 video field and legacy V1 bodies must not mix in the V2 schema; "
                    "leave it out, or use kind video",
                )
        return self


class _Question(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["noul", "choice", "score"]
    instructions: str | dict[str, Any] | list[Any]
    criteria: Any = None

    @model_validator(mode="after")
    def _criteria_rules(self) -> _Question:
        criteria = self.criteria
        if self.type == "noul":
            if criteria is not None and (
                not isinstance(criteria, dict) or set(criteria) != {"true", "false"}
            ):
                raise FieldRule(
                    "criteria",
                    "noul criteria, when given, is an object with exactly the keys true and false; "
                    "e.g. criteria: {true: It is a complaint, false: It is not}",
                )
        elif self.type == "choice":
            if not isinstance(criteria, dict) or not 1 <= len(criteria) <= 255:
                raise FieldRule(
                    "criteria",
                    "choice needs criteria: a map of option id to description, 1 to 255 options; "
                    "e.g. criteria: {billing: Charges and refunds, technical: Bugs}",
                )
        elif not isinstance(criteria, list) or not 2 <= len(criteria) <= 10:
            raise FieldRule(
                "criteria",
                "score needs criteria: a list of 2 to 10 level descriptions, lowest first; "
                "e.g. criteria: [Calm, Frustrated, Angry]",
            )
        return self


class JudgmentRequest(_Request):
    state: str | dict[str, Any] | list[Any]
    questions: dict[str, _Question] = Field(min_length=1)


class WebSearchRequest(BaseModel):
    """Web search is a GET: `route` picks the path, the other fields are query parameters."""

    model_config = ConfigDict(extra="allow", strict=True)

    route: Literal["search", "simple-search", "search-news", "reader"] = "search"
    q: str | None = Field(default=None, min_length=1)
    url: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _query_or_url(self) -> WebSearchRequest:
        if self.route == "reader" and not self.url:
            raise FieldRule(
                "url", "the reader route needs url: the page to fetch; e.g. url: https://example.com"
            )
        if self.route != "reader" and not self.q:
            raise FieldRule(
                "q", f'the {self.route} route needs q: the search query; e.g. prompt: "{{query}}"'
            )
        return self


REQUEST_MODELS: dict[str, type[BaseModel]] = {
    "chat": ChatRequest,
    "responses": ResponsesRequest,
    "messages": MessagesRequest,
    "generate_content": GenerateContentRequest,
    "image": ImageRequest,
    "video": VideoRequest,
    "video_v1": VideoV1Request,
    "judgment": JudgmentRequest,
    "web_search": WebSearchRequest,
}


def coerce_numbers(request: dict[str, Any]) -> list[tuple[str, str]]:
    """Turn numeric text (CSV cells) into numbers in place; return (field, message) for bad values.

    A whole number written as a float (16.0: pandas writes an integer column with a gap as floats,
    in Parquet and in CSV text) is that integer; NaN and infinities are refused (JSON has none).
    """
    problems: list[tuple[str, str]] = []
    for field, value in list(request.items()):
        if field not in INTEGER_FIELDS | NUMBER_FIELDS or isinstance(value, bool):
            continue
        if isinstance(value, str):
            try:
                number: float = int(value) if field in INTEGER_FIELDS else float(value)
            except ValueError:
                try:
                    number = float(value)
                except ValueError:
                    problems.append((field, f"'{value}' is not a number; write a number{example(field)}"))
                    continue
        elif isinstance(value, int | float):
            number = value
        else:
            continue
        if isinstance(number, float) and not math.isfinite(number):
            problems.append((field, f"'{value}' is not a finite number; write a number{example(field)}"))
        elif field in INTEGER_FIELDS and isinstance(number, float):
            if number.is_integer():
                request[field] = int(number)
            else:
                problems.append((field, f"'{value}' is not a whole number; write one{example(field)}"))
        else:
            request[field] = number
    return problems


def normalize_seconds(kind: str, request: dict[str, Any]) -> list[tuple[str, str]]:
    """V2 video takes seconds as a string ("4"), legacy V1 as an integer: accept either spelling."""
    seconds = request.get("seconds")
    if kind == "video" and isinstance(seconds, int) and not isinstance(seconds, bool):
        request["seconds"] = str(seconds)
    elif kind == "video_v1" and isinstance(seconds, str):
        if not seconds.strip().isdigit():
            return [("seconds", f"'{seconds}' is not a whole number of seconds; write one, e.g. seconds: 5")]
        request["seconds"] = int(seconds)
    return []


def check_request(kind: str, request: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (field, message) the gateway would refuse this request for; empty when it is fine."""
    try:
        REQUEST_MODELS[kind].model_validate(request)
    except ValidationError as error:
        return [
            (".".join(str(part) for part in finding.loc) or "request", finding.words)
            for finding in findings(error, _QUESTION_FIELDS)
        ]
    return []


_QUESTION_FIELDS = ("type", "instructions", "criteria")  # the only model here that refuses other names

"""Where each call goes: native paths, converter bases and the names the interface leaves open.

Parts of the interface are marked LOW confidence in public-facts.md (the responses converter base,
the platform-mapping query parameter); they are fields here so a profile can change them without
a code change.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

WebSearchRoute = Literal["search", "simple-search", "search-news", "reader"]
WEB_SEARCH_ROUTES: tuple[WebSearchRoute, ...] = ("search", "simple-search", "search-news", "reader")


class RouteSettings(BaseModel):
    """Converter bases (prefixes before the native path) and open parameter names."""

    model_config = ConfigDict(frozen=True)

    chat_converter_base: str = "/openai"
    responses_converter_base: str = "/openai"
    messages_converter_base: str = "/anthropic"
    generate_content_converter_base: str = "/gemini"
    pricing_mapping_parameter: str = "mapping_id"

    def chat_completions(self, converter: bool) -> str:
        return (self.chat_converter_base if converter else "") + "/v1/chat/completions"

    def responses(self, converter: bool) -> str:
        return (self.responses_converter_base if converter else "") + "/v1/responses"

    def messages(self, converter: bool) -> str:
        return (self.messages_converter_base if converter else "") + "/v1/messages"

    def generate_content(self, model: str, *, stream: bool, converter: bool) -> str:
        method = "streamGenerateContent" if stream else "generateContent"
        return (
            self.generate_content_converter_base if converter else ""
        ) + f"/v1beta/models/{model}:{method}"

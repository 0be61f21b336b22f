"""Generate-content: request and response models (gemini family; field names as on the wire)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from relaybatch.gateway.wire import WireModel


class InlineData(WireModel):
    mimeType: str
    data: str  # base64


class Part(WireModel):
    """Carries ``text`` or ``inlineData`` (never both); ``thought`` marks reasoning text."""

    text: str | None = None
    inlineData: InlineData | None = None
    functionCall: dict[str, Any] | None = None
    thought: bool | None = None


class Content(WireModel):
    role: str | None = None
    parts: list[Part] = Field(default_factory=list)


class GenerateContentRequest(WireModel):
    contents: list[Content]
    generationConfig: dict[str, Any] | None = None
    systemInstruction: Content | None = None
    tools: list[dict[str, Any]] | None = None


class Candidate(WireModel):
    content: Content = Content()
    finishReason: str | None = None
    index: int = 0


class ModalityTokenCount(WireModel):
    modality: str
    tokenCount: int = 0


class UsageMetadata(WireModel):
    """``promptTokenCount`` includes cached tokens; ``candidatesTokenCount`` excludes thoughts."""

    promptTokenCount: int = 0
    candidatesTokenCount: int = 0
    totalTokenCount: int = 0
    cachedContentTokenCount: int | None = None
    thoughtsTokenCount: int | None = None
    candidatesTokensDetails: list[ModalityTokenCount] | None = None


class GenerateContentResponse(WireModel):
    candidates: list[Candidate] = Field(default_factory=list)
    usageMetadata: UsageMetadata | None = None
    modelVersion: str | None = None
    responseId: str | None = None
    promptFeedback: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        """The first candidate's visible text parts, in order (thoughts left out)."""
        if not self.candidates:
            return ""
        parts = self.candidates[0].content.parts
        return "".join(part.text or "" for part in parts if not part.thought)

"""Typed judgment: request and answer models."""

from __future__ import annotations

from typing import Any, Literal

from relaybatch.gateway.wire import WireModel


class Question(WireModel):
    type: Literal["noul", "choice", "score"]
    instructions: str | dict[str, Any] | list[Any]
    criteria: dict[str, Any] | list[Any] | None = None


class TypedJudgmentRequest(WireModel):
    model: str
    state: str | dict[str, Any] | list[Any]
    questions: dict[str, Question]


class Answer(WireModel):
    """``noul`` is P(true); choice and score add ``probabilities`` and ``confidence``."""

    type: str
    noul: float | None = None
    choice: str | None = None
    score: float | None = None
    legend: dict[str, Any] | None = None
    probabilities: dict[str, float] | None = None
    confidence: float | None = None


class JudgmentUsage(WireModel):
    input_tokens: int = 0
    output_tokens: int = 0


class TypedJudgment(WireModel):
    model: str
    answers: dict[str, Answer]
    usage: JudgmentUsage = JudgmentUsage()

"""POST /v1/typedjudge: validation of questions and deterministic noul, choice and score answers.

Pure functions; ``judgment_route.py`` adds auth and billing. Probabilities come from a hash of the
state and the question, so the same request always gets the same answers. They are rounded to two
decimals (sums may drift slightly, as public-facts.md says the real service's do), and
``confidence`` = (p_max - 1/k) / (1 - 1/k), clipped to [0, 1], from the rounded distribution.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from relaybatch.emulator.problems import InvalidRequest

QUESTION_TYPES = ("noul", "choice", "score")
MAX_CHOICE_OPTIONS = 255
SCORE_LEVELS = (2, 10)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _is_description(value: Any) -> bool:
    return value is None or isinstance(value, str | dict | list)


def _check_criteria(name: str, kind: str, criteria: Any) -> None:
    where = f"questions.{name}.criteria"
    if kind == "noul":
        if criteria is None:
            return
        if not isinstance(criteria, dict) or set(criteria) != {"true", "false"}:
            raise InvalidRequest(f"{where}: a noul criteria object has exactly the keys 'true' and 'false'")
    elif kind == "choice":
        if not isinstance(criteria, dict) or not 1 <= len(criteria) <= MAX_CHOICE_OPTIONS:
            raise InvalidRequest(
                f"{where}: choice needs a map of option id to description "
                f"with 1 to {MAX_CHOICE_OPTIONS} options"
            )
        if any(not option for option in criteria):
            raise InvalidRequest(f"{where}: option ids must be non-empty strings")
    else:
        low, high = SCORE_LEVELS
        if not isinstance(criteria, list) or not low <= len(criteria) <= high:
            raise InvalidRequest(
                f"{where}: score needs an array of {low} to {high} level descriptions, lowest first"
            )
    values = criteria.values() if isinstance(criteria, dict) else criteria
    if not all(_is_description(value) for value in values):
        raise InvalidRequest(f"{where}: descriptions must be strings, objects, arrays or null")


def validate_judgment_request(body: Any, *, judgment_models: set[str]) -> dict[str, dict[str, Any]]:
    """Check model, state and questions; return the questions. Raises InvalidRequest (400)."""
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' is required", param="model")
    if model not in judgment_models:
        raise InvalidRequest(f"unknown judgment model '{model}'", param="model")
    if "state" not in body or not isinstance(body["state"], str | dict | list):
        raise InvalidRequest("'state' is required: a string, object or array", param="state")
    questions = body.get("questions")
    if not isinstance(questions, dict) or not questions:
        raise InvalidRequest("'questions' must be a non-empty object of named questions", param="questions")
    for name, question in questions.items():
        if not name:
            raise InvalidRequest("question names must be non-empty", param="questions")
        if not isinstance(question, dict):
            raise InvalidRequest(f"questions.{name} must be an object", param="questions")
        kind = question.get("type")
        if kind not in QUESTION_TYPES:
            raise InvalidRequest(
                f"questions.{name}.type must be one of {', '.join(QUESTION_TYPES)}", param="questions"
            )
        instructions = question.get("instructions")
        if not isinstance(instructions, str | dict | list) or not instructions:
            raise InvalidRequest(
                f"questions.{name}.instructions is required: a string, object or array", param="questions"
            )
        _check_criteria(name, kind, question.get("criteria"))
    return questions


def _unit_values(seed: str, count: int) -> list[float]:
    """``count`` deterministic numbers in [0, 1) from a seed."""
    values = []
    for index in range(count):
        digest = hashlib.sha256(f"{seed}#{index}".encode()).digest()
        values.append(int.from_bytes(digest[:8], "big") / 2**64)
    return values


def _distribution(seed: str, count: int) -> list[float]:
    """A peaked distribution over ``count`` outcomes, rounded to two decimals."""
    # Scaled exponentials give one clear favourite most of the time, like a confident model.
    weights = [math.exp(6.0 * value) for value in _unit_values(seed, count)]
    total = sum(weights)
    return [round(weight / total, 2) for weight in weights]


def confidence(probabilities: list[float]) -> float:
    count = len(probabilities)
    if count < 2:
        return 1.0
    floor = 1 / count
    value = (max(probabilities) - floor) / (1 - floor)
    return round(min(1.0, max(0.0, value)), 2)


def answer_question(state: Any, name: str, question: dict[str, Any]) -> dict[str, Any]:
    seed = f"{_canonical(state)}\n{name}\n{_canonical(question)}"
    kind = question["type"]
    if kind == "noul":
        return {"type": "noul", "noul": round(_unit_values(seed, 1)[0], 2)}
    if kind == "choice":
        options = list(question["criteria"])
        probabilities = _distribution(seed, len(options))
        best = options[probabilities.index(max(probabilities))]
        return {
            "type": "choice",
            "choice": best,
            "probabilities": dict(zip(options, probabilities, strict=True)),
            "confidence": confidence(probabilities),
        }
    levels = question["criteria"]
    probabilities = _distribution(seed, len(levels))
    return {
        "type": "score",
        "score": round(sum(index * p for index, p in enumerate(probabilities)), 2),
        "legend": {str(index): level for index, level in enumerate(levels)},
        "probabilities": {str(index): p for index, p in enumerate(probabilities)},
        "confidence": confidence(probabilities),
    }


def judgment_usage(state: Any, questions: dict[str, Any]) -> dict[str, int]:
    """Input tokens from the state and questions (about four characters a token); one output token
    per answered question (output is free, but reported)."""
    text = _canonical(state) + _canonical(questions)
    return {"input_tokens": max(1, math.ceil(len(text) / 4)), "output_tokens": len(questions)}


def judge(state: Any, questions: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {name: answer_question(state, name, question) for name, question in questions.items()}

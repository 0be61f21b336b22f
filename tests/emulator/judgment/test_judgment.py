"""POST /v1/typedjudge over raw HTTP: answer shapes, validation, determinism, price."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import httpx
import pytest

from relaybatch.emulator import EmulatorState
from relaybatch.emulator.judgment.rules import confidence
from tests.emulator.emulator_http import EMPTY_KEY, RESTRICTED_KEY, assert_refused_for_free, bearer, charges

ROUTE = "/v1/typedjudge"
MODEL = "relay-judge-1"
QUESTIONS: dict[str, Any] = {
    "is_complaint": {"type": "noul", "instructions": "Is this a complaint?"},
    "polite": {
        "type": "noul",
        "instructions": {"ask": "Is it polite?"},
        "criteria": {"true": "polite", "false": "rude"},
    },
    "topic": {
        "type": "choice",
        "instructions": "Which team handles it?",
        "criteria": {"billing": "money", "technical": ["bugs", "outages"], "other": None},
    },
    "mood": {"type": "score", "instructions": "How upset?", "criteria": ["Calm", "Frustrated", "Angry"]},
}


async def judge(http: httpx.AsyncClient, key: str = "rb-demo-key", **fields: Any) -> httpx.Response:
    body = {"model": MODEL, "state": "I was charged twice!", "questions": QUESTIONS, **fields}
    return await http.post(ROUTE, headers=bearer(key), json=body)


def two_decimals(value: float) -> bool:
    return round(value, 2) == value


async def test_answer_shapes(http: httpx.AsyncClient) -> None:
    response = await judge(http)
    assert response.status_code == 200
    document = response.json()
    assert document["model"] != MODEL and document["model"].startswith(MODEL)  # an exact build
    answers = document["answers"]
    assert set(answers) == set(QUESTIONS)
    noul = answers["is_complaint"]
    assert set(noul) == {"type", "noul"} and noul["type"] == "noul"
    assert 0 <= noul["noul"] <= 1 and two_decimals(noul["noul"])

    choice = answers["topic"]
    assert set(choice) == {"type", "choice", "probabilities", "confidence"}
    assert list(choice["probabilities"]) == ["billing", "technical", "other"]
    assert choice["choice"] == max(choice["probabilities"], key=choice["probabilities"].get)
    assert all(two_decimals(p) for p in choice["probabilities"].values())
    assert abs(sum(choice["probabilities"].values()) - 1) <= 0.02
    assert choice["confidence"] == confidence(list(choice["probabilities"].values()))

    score = answers["mood"]
    assert set(score) == {"type", "score", "legend", "probabilities", "confidence"}
    assert score["legend"] == {"0": "Calm", "1": "Frustrated", "2": "Angry"}
    assert list(score["probabilities"]) == ["0", "1", "2"]
    expected = sum(int(level) * p for level, p in score["probabilities"].items())
    assert score["score"] == round(expected, 2) and 0 <= score["score"] <= 2
    assert 0 <= score["confidence"] <= 1

    usage = document["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] == len(QUESTIONS)


async def test_same_request_same_answers_other_state_other_answers(http: httpx.AsyncClient) -> None:
    first = (await judge(http)).json()["answers"]
    assert (await judge(http)).json()["answers"] == first
    states = ["calm note", {"ticket": 42}, ["a", "b"], "another text", "yet another"]
    others = [(await judge(http, state=state)).json()["answers"] for state in states]
    assert any(other != first for other in others)


def test_confidence_formula() -> None:
    assert confidence([0.88, 0.12]) == 0.76
    assert confidence([0.5, 0.5]) == 0.0
    assert confidence([1.0, 0.0, 0.0]) == 1.0
    assert confidence([0.2, 0.2, 0.2, 0.2, 0.2]) == 0.0


async def test_price_is_input_tokens_only(http: httpx.AsyncClient, state: EmulatorState) -> None:
    usage = (await judge(http)).json()["usage"]
    [charge] = charges(state, ROUTE)
    assert charge.usd == usage["input_tokens"] * Decimal("0.042") / Decimal(1_000_000)
    assert charge.model == MODEL


@pytest.mark.parametrize(
    ("fields", "mentions"),
    [
        ({"model": None}, "model"),
        ({"model": "relay-chat-small"}, "unknown judgment model"),
        ({"state": None}, "state"),
        ({"state": 42}, "state"),
        ({"questions": {}}, "questions"),
        ({"questions": []}, "questions"),
        ({"questions": {"q": "noul"}}, "must be an object"),
        ({"questions": {"q": {"type": "rank", "instructions": "x"}}}, "type"),
        ({"questions": {"q": {"type": "noul"}}}, "instructions"),
        ({"questions": {"q": {"type": "noul", "instructions": ""}}}, "instructions"),
        (
            {"questions": {"q": {"type": "noul", "instructions": "x", "criteria": {"true": "y"}}}},
            "'true' and 'false'",
        ),
        (
            {"questions": {"q": {"type": "noul", "instructions": "x", "criteria": ["y", "n"]}}},
            "'true' and 'false'",
        ),
        ({"questions": {"q": {"type": "choice", "instructions": "x"}}}, "choice"),
        ({"questions": {"q": {"type": "choice", "instructions": "x", "criteria": {}}}}, "1 to 255"),
        (
            {
                "questions": {
                    "q": {
                        "type": "choice",
                        "instructions": "x",
                        "criteria": {str(i): None for i in range(256)},
                    }
                }
            },
            "1 to 255",
        ),
        ({"questions": {"q": {"type": "choice", "instructions": "x", "criteria": {"a": 1}}}}, "descriptions"),
        ({"questions": {"q": {"type": "score", "instructions": "x"}}}, "2 to 10"),
        ({"questions": {"q": {"type": "score", "instructions": "x", "criteria": ["only"]}}}, "2 to 10"),
        ({"questions": {"q": {"type": "score", "instructions": "x", "criteria": ["l"] * 11}}}, "2 to 10"),
        (
            {"questions": {"q": {"type": "score", "instructions": "x", "criteria": {"0": "a", "1": "b"}}}},
            "2 to 10",
        ),
    ],
)
async def test_malformed_requests_are_400_and_free(
    http: httpx.AsyncClient, state: EmulatorState, fields: dict[str, Any], mentions: str
) -> None:
    assert_refused_for_free(await judge(http, **fields), state, ROUTE, mentions)


@pytest.mark.parametrize(
    "question",
    [
        {"type": "choice", "instructions": "x", "criteria": {"only": "one option"}},
        {"type": "choice", "instructions": "x", "criteria": {str(i): None for i in range(255)}},
        {"type": "score", "instructions": "x", "criteria": ["low", "high"]},
        {"type": "score", "instructions": ["x"], "criteria": [{"level": i} for i in range(10)]},
    ],
)
async def test_bounds_are_inclusive(http: httpx.AsyncClient, question: dict[str, Any]) -> None:
    response = await judge(http, questions={"q": question})
    assert response.status_code == 200, response.text


async def test_missing_model_missing_state_and_missing_questions(http: httpx.AsyncClient) -> None:
    for missing in ("model", "state", "questions"):
        body = {"model": MODEL, "state": "s", "questions": QUESTIONS}
        del body[missing]
        response = await http.post(ROUTE, headers=bearer(), json=body)
        assert response.status_code == 400 and missing in response.json()["error"]["message"]


async def test_auth_access_balance_and_method(http: httpx.AsyncClient) -> None:
    assert (await http.post(ROUTE, json={})).status_code == 401
    assert (await http.post(ROUTE, headers={"x-api-key": "rb-demo-key"}, json={})).status_code == 401
    restricted = await judge(http, RESTRICTED_KEY)
    assert restricted.status_code == 403 and restricted.json()["error"]["type"] == "permission_error"
    empty = await judge(http, EMPTY_KEY)
    assert empty.status_code == 402 and empty.json()["error"]["type"] == "insufficient_balance"
    assert (await http.get(ROUTE, headers=bearer())).status_code == 405

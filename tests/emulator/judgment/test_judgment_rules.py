"""The pure rules of typed judgment: answers stay in range for any state."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from relaybatch.emulator.judgment.rules import answer_question


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=50), st.integers(2, 10))
def test_score_answers_stay_in_range(state: str, levels: int) -> None:
    question = {"type": "score", "instructions": "rate", "criteria": [f"level {i}" for i in range(levels)]}
    answer = answer_question(state, "q", question)
    assert 0 <= answer["score"] <= levels - 1
    assert all(0 <= p <= 1 for p in answer["probabilities"].values())
    assert abs(sum(answer["probabilities"].values()) - 1) <= 0.01 * levels
    assert 0 <= answer["confidence"] <= 1

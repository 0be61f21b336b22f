"""The message catalogue: every finding the manifest's models can make is worded by relaybatch.

Each field of the manifest's schema (run settings, jobs) and of every request model the gateway
checks use gets a set of bad values (wrong type, empty, out of range, unknown name, missing); every
message that comes back must be in the project's words, never pydantic's, and say what to do (a
hint after "; "). The catalogue (wording._SAY) has no entry that nothing can reach.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from relaybatch.manifests import wording
from relaybatch.manifests.checks import REQUEST_MODELS, check_request
from relaybatch.manifests.problems import Problem
from relaybatch.manifests.schema import JobSpec, RunSettings

BAD_VALUES: list[Any] = [
    None,
    "",
    "x",
    "5",
    "640x480",
    -1,
    0,
    10**13,
    1.5,
    float("nan"),
    True,
    [],
    [1],
    {},
    {"a": 1},
    "x" * 40_000,
]
PYDANTIC_WORDS = re.compile(
    r"Input should|should be|should have|after validation|Value error|valid dictionary|String should|"
    r"Field required|Extra inputs|instance of|type=",
)
Q = {"type": "noul", "instructions": "Is it spam?"}
TURN = {"role": "user", "content": "hi"}
# A request each kind accepts, and where its nested models sit in it.
VALID = {
    "chat": {"model": "m", "messages": [TURN]},
    "responses": {"model": "m", "input": "hi"},
    "messages": {"model": "m", "max_tokens": 5, "messages": [TURN]},
    "generate_content": {
        "model": "m",
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generationConfig": {"imageConfig": {"aspectRatio": "1:1"}},
    },
    "image": {"model": "m", "prompt": "a cat"},
    "video": {"model": "m", "prompt": "a pan", "seconds": "4", "size": "1280x720"},
    "video_v1": {"model": "m", "prompt": "a pan"},
    "judgment": {"model": "j", "state": "s", "questions": {"q": Q}},
    "web_search": {"route": "search", "q": "rivers"},
}
NESTED: list[tuple[str, tuple[str | int, ...], dict[str, Any]]] = [
    ("chat", ("messages", 0), TURN),
    ("messages", ("messages", 0), TURN),
    ("generate_content", ("contents", 0), {"role": "user", "parts": [{"text": "hi"}]}),
    ("generate_content", ("contents", 0, "parts", 0), {"text": "hi"}),
    ("generate_content", ("generationConfig",), {"imageConfig": {"aspectRatio": "1:1"}}),
    ("generate_content", ("generationConfig", "imageConfig"), {"aspectRatio": "1:1"}),
    ("judgment", ("questions", "q"), Q),
    ("judgment", ("questions", "q"), {"type": "choice", "instructions": "i", "criteria": {"a": "b"}}),
    ("judgment", ("questions", "q"), {"type": "score", "instructions": "i", "criteria": ["a", "b"]}),
]
FIELDS_OF_NESTED = ["role", "content", "parts", "text", "inlineData", "temperature", "maxOutputTokens"]
FIELDS_OF_NESTED += ["imageConfig", "aspectRatio", "imageSize", "type", "instructions", "criteria"]
FIELDS_OF_NESTED += ["colour"]


def _variants(base: dict[str, Any], fields: list[str]) -> list[dict[str, Any]]:
    """``base`` with each field set to each bad value, and without it."""
    variants = []
    for name in fields:
        for value in BAD_VALUES:
            variants.append({**base, name: value})
        variants.append({key: inner for key, inner in base.items() if key != name})
    return variants


def _at(request: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    whole = copy.deepcopy(request)
    inner: Any = whole
    for part in path[:-1]:
        inner = inner[part]
    inner[path[-1]] = value
    return whole


def _request_messages() -> list[str]:
    messages = []
    for kind, model in REQUEST_MODELS.items():
        for request in _variants(VALID[kind], [*model.model_fields, "colour"]):
            messages += [message for _, message in check_request(kind, request)]
    for kind, path, base in NESTED:
        for nested in _variants(base, FIELDS_OF_NESTED):
            messages += [message for _, message in check_request(kind, _at(VALID[kind], path, nested))]
    return messages


def _schema_messages() -> list[str]:
    messages = []
    job = {"name": "a", "kind": "chat", "model": "m", "items": [{}]}
    cases: list[tuple[type[BaseModel], dict[str, Any]]] = [(RunSettings, {}), (JobSpec, job)]
    for model, base in cases:
        for values in _variants(base, [*model.model_fields, "colour"]):
            try:
                model.model_validate(values)
            except ValidationError as error:
                messages += [finding.words for finding in wording.findings(error, list(model.model_fields))]
    return messages


@pytest.fixture(scope="module")
def messages() -> list[str]:
    return _request_messages() + _schema_messages()


def test_every_finding_is_in_our_words_and_says_what_to_do(messages: list[str]) -> None:
    assert len(set(messages)) > 100  # the walk reaches every model's findings
    for message in set(messages):
        assert message != wording.UNWORDED, "a finding the catalogue (wording._SAY) does not word"
        assert not PYDANTIC_WORDS.search(message), message
        assert Problem("m.yaml", 1, "f", message).hint, f"no hint after '; ': {message}"


def test_every_catalogue_entry_is_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    reached: set[str] = set()
    original = wording.explain

    def spy(detail: Any, allowed: Any = ()) -> str:
        reached.add(detail["type"])
        return original(detail, allowed)

    monkeypatch.setattr(wording, "explain", spy)
    _request_messages()
    _schema_messages()
    assert set(wording._SAY) <= reached, set(wording._SAY) - reached

"""The message catalogue: every finding the manifest's models can make is worded by relaybatch.

Each field of the manifest's schema (run settings, jobs) and of every request model the gateway
checks use gets a set of bad values (wrong type, empty, out of range, unknown name, missing); every
message that comes back must be in the project's words, never pydantic's, and say what to do (a
hint after "; "). The catalogue (wording._SAY) has no entry that nothing can reach. The checks
written by hand (YAML, files, rows, batch lines) are walked with a set of bad files the same way.
"""

# The bad files are written out whole, as a user would.
# ruff: noqa: E501

from __future__ import annotations

import copy
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from relaybatch.manifests import ManifestInvalid, open_manifest, wording
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


# Files that each make some hand-written check speak: YAML, structure, files, rows, batch lines.
HAND_WRITTEN: dict[str, str | bytes] = {
    "not_yaml.yaml": "jobs: [\n",
    "list.yaml": "- a\n- b\n",
    "no_jobs.yaml": "run: {name: x}\n",
    "alias.yaml": "a: &a [*a]\njobs: []\n",
    "mixed.yaml": """
        run: {name: "..", colour: red}
        extra: 1
        jobs:
          - {name: a, kind: chat, model: m, prompt: "{q.x}", items: [{q: 1}]}
          - {name: a, kind: image, model: m, prompt: "{q}", system: s, image: p, via: converter, items: [{q: 1}]}
          - {name: c, kind: chat, model: m, prompt: "{nope}", data: rows.csv, carry: [gone]}
          - {name: d, kind: chat, model: m, prompt: x, data: rows.txt}
          - {name: e, kind: chat, model: m, prompt: x, data: none.csv}
          - {name: f, kind: chat, model: m, prompt: x, items: []}
          - {name: g, kind: chat, model: m, prompt: "{q}", image: photo, data: photos.csv}
          - {name: h, kind: responses, model: m, via: converter, prompt: x,
             request: {store: true, previous_response_id: r, tools: [{type: web_search}], text: {format: {type: json_object}}},
             items: [{q: 1}]}
          - {name: i, kind: video_v1, model: m, prompt: x, request: {seconds: "ten", size: 1x1}, items: [{q: 1}]}
          - {name: j, kind: chat, model: m, prompt: "{q}", items: [{q: NO, q: 2}, {z: 1}]}
          - {name: k, kind: chat, model: m, prompt: "{q}", request: {max_tokens: "{n}"}, data: rows.jsonl}
          - {name: l, kind: chat, model: m, prompt: x, output_schema: none.json, items: [{q: 1}]}
        """,
    "rows.csv": "id,q\n1,a\n",
    "photos.csv": "q,photo\na,none.png\nb,bad.png\nc,!!!\nd,\n",
    "bad.png": b"not an image",
    "rows.jsonl": '{"q": "a", "n": "lots"}\n{broken\n[1]\n{"q": "a", "n": 5}\n{"q": "a", "n": 5}\n',
    "table.csv": 'id,kind,model,prompt,max_tokens\n1,essay,m,x,1\n2,chat,m,,1\n3,chat,m,x,1,extra\n4,chat,m,"open\n',
    "empty.csv": "id,q\n",
    "header.csv": "id,id,\n1,2,3\n",
    "latin.csv": "id,prompt\n1,caf\xe9\n".encode("latin-1"),
    "batch.jsonl": "\n".join(
        json.dumps(line)
        for line in [
            {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": "x"},
            {"custom_id": "b", "method": "GET", "url": "/v1/chat/completions", "body": {}},
            {"custom_id": "c", "method": "POST", "url": "/v1/embeddings", "body": {}},
            {"custom_id": "d", "url": "/v1/chat/completions"},
        ]
    )
    + "\n",
}


def test_every_hand_written_message_says_what_to_do(tmp_path: Path) -> None:
    for name, content in HAND_WRITTEN.items():
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content).lstrip("\n"))
    said: list[Problem] = []
    for name in HAND_WRITTEN:
        if name.endswith((".yaml", ".jsonl", ".csv")) and name not in (
            "rows.csv",
            "rows.jsonl",
            "photos.csv",
        ):
            try:
                manifest = open_manifest(tmp_path / name)
                said += manifest.validate().problems
            except ManifestInvalid as invalid:
                said += invalid.problems
    assert len(said) > 40
    for problem in said:
        assert not PYDANTIC_WORDS.search(problem.message), str(problem)
        assert problem.hint, f"no hint after '; ': {problem}"

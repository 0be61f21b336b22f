"""Converter routes in manifests: `via: converter`, the converter's limits, and the family check."""

# ruff: noqa: E501

from __future__ import annotations

from pathlib import Path

import pytest
from manifest_helpers import problems as _problems
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.manifests import load_items
from relaybatch.manifests.converters import Route, family_problems


def test_via_converter_travels_in_the_request_and_changes_the_key(write, tmp_path: Path) -> None:
    manifest = write(
        "m.yaml",
        """
        jobs:
          - {name: a, kind: chat, model: relay-claude-haiku, via: converter, prompt: x, items: [{q: 1}]}
          - {name: b, kind: chat, model: relay-claude-haiku, via: native, prompt: x, items: [{q: 1}]}
        """,
    )
    through, native = load_items(manifest)
    assert through.request["via"] == "converter" and "via" not in native.request
    table = tmp_path / "t.csv"
    table.write_text(
        "id,kind,model,prompt,max_tokens,via\n1,messages,relay-chat-small,hi,8,converter\n2,chat,m,hi,8,native\n"
    )
    first, second = load_items(table)
    assert first.request["via"] == "converter" and "via" not in second.request


def test_the_responses_converters_limits_and_kinds_without_one_are_errors(write, tmp_path: Path) -> None:
    manifest = write(
        "m.yaml",
        """
        jobs:
          - name: r
            kind: responses
            model: relay-claude-haiku
            via: converter
            prompt: x
            request: {store: true, previous_response_id: r1, tools: [{type: function, name: f}, {type: web_search}], text: {format: {type: json_schema}}}
            items: [{q: 1}]
          - {name: i, kind: image, model: relay-image-2, via: converter, prompt: x, items: [{q: 1}]}
        """,
    )
    (tmp_path / "b.jsonl").write_text(
        '{"custom_id": "c", "method": "POST", "url": "/v1/images/generations", "body": {"model": "m", "prompt": "x", "via": "sideways"}}\n'
    )
    assert _problems(manifest) == [
        f"{manifest}:7: jobs[0].request.previous_response_id: the responses converter is stateless; drop it",
        f"{manifest}:7: jobs[0].request.store: the responses converter stores no responses; drop it or set it false",
        f"{manifest}:7: jobs[0].request.tools[1].type: 'web_search' is a hosted tool, which the responses converter does not run; drop it, or call a model of the openai family natively",
        f"{manifest}:7: jobs[0].request.text.format: 'json_schema' is a structured output format, which the responses converter does not support; drop it, or use kind chat through the converter",
        f"{manifest}:9: jobs[1].via: kind image has no converter route; drop `via`, or use one of chat, responses, messages, generate_content",
    ]
    batch = tmp_path / "b.jsonl"
    assert _problems(batch) == [
        f"{batch}:1: via: 'sideways' is not a route; use converter (or leave it out for the native route)"
    ]


def test_family_problems_point_at_the_route_and_pass_what_the_catalog_does_not_list() -> None:
    routes = {
        Route("a", "chat", "relay-claude-haiku", False): ("m.yaml", 3),
        Route("b", "chat", "relay-claude-haiku", True): ("m.yaml", 4),
        Route("c", "messages", "relay-claude-haiku", False): ("m.yaml", 5),
        Route("d", "chat", "relay-chat-preview", False): ("rows.csv", 7),
    }
    families = {"relay-claude-haiku": "anthropic"}
    assert [str(problem) for problem in family_problems(routes, families)] == [
        "m.yaml:3: model: model 'relay-claude-haiku' is in the anthropic family, and kind chat's native route "
        "serves only openai models; add `via: converter` to job 'a' to call it through the chat converter, "
        "or use the kind of its family"
    ]


def test_validate_and_plan_flag_a_family_mismatch_from_the_catalog(write) -> None:
    manifest = write(
        "m.yaml",
        """
        jobs:
          - name: a
            kind: chat
            model: relay-claude-haiku
            prompt: x
            items: [{q: 1}]
          - {name: b, kind: messages, model: relay-chat-small, via: converter, prompt: x, request: {max_tokens: 8}, items: [{q: 1}]}
        """,
    )
    expected = (
        f"{manifest}:4: model: model 'relay-claude-haiku' is in the anthropic family, and kind chat's native "
        "route serves only openai models; add `via: converter` to job 'a'"
    )
    for command in (["validate", str(manifest)], ["plan", str(manifest)]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 1, result.output
        assert expected in result.output and "1 problem in the manifest" in result.output
        assert "Traceback" not in result.output
    offline = CliRunner().invoke(app, ["validate", "--offline", str(manifest)])
    assert offline.exit_code == 0, offline.output


def test_validate_says_when_the_catalog_cannot_be_read(write, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAYBATCH_API_KEY", "sk-test")
    manifest = write(
        "m.yaml", "jobs:\n  - {name: a, kind: chat, model: relay-claude-haiku, prompt: x, items: [{q: 1}]}\n"
    )
    result = CliRunner().invoke(app, ["validate", "--base-url", "http://127.0.0.1:9", str(manifest)])
    assert result.exit_code == 0, result.output
    assert "note: could not read the gateway's model catalog" in result.output
    assert "model families were not checked" in result.output

"""`output_schema:` on a job: each family's request carries it, and a schema that cannot be used is
a located error at the field."""

# Expected messages are written out whole, as a user sees them.
# ruff: noqa: E501

from __future__ import annotations

from manifest_helpers import problems as _problems

from relaybatch.manifests import load_items


def test_a_structured_job_asks_in_its_family_form(write) -> None:
    write("label.json", '{"type": "object", "properties": {"ok": {"type": "boolean"}}}')
    manifest = write(
        "m.yaml",
        """
        jobs:
          - name: a
            kind: messages
            model: relay-claude-haiku
            request: {max_tokens: 64}
            prompt: "{x}"
            output_schema: label.json
            items: [{x: hi}]
        """,
    )
    [item] = load_items(manifest)

    assert item.request["tool_choice"] == {"type": "tool", "name": "answer"}
    assert item.request["tools"][0]["input_schema"]["properties"] == {"ok": {"type": "boolean"}}


def test_unusable_schemas_are_located(write) -> None:
    manifest = write(
        "m.yaml",
        """
        jobs:
          - name: a
            kind: image
            model: relay-image-1
            prompt: "{x}"
            output_schema: {type: object}
            items: [{x: hi}]
          - name: b
            kind: chat
            model: relay-chat-small
            prompt: "{x}"
            output_schema: nowhere.json
            items: [{x: hi}]
          - name: c
            kind: responses
            model: relay-claude-haiku
            via: converter
            prompt: "{x}"
            output_schema: {type: object}
            items: [{x: hi}]
          - name: d
            kind: chat
            model: relay-chat-small
            prompt: "{x}"
            max_reasks: 11
            output_schema: {type: object}
            items: [{x: hi}]
        """,
    )
    problems = _problems(manifest)

    assert (
        f"{manifest}:6: jobs[0].output_schema: kind image has no structured output; use one of chat, responses, messages, generate_content"
        in problems
    )
    assert (
        f"{manifest}:12: jobs[1].output_schema: schema file 'nowhere.json' not found next to the manifest; check the path"
        in problems
    )
    assert any(
        p.startswith(f"{manifest}:19: jobs[2].output_schema: the responses converter does not support")
        for p in problems
    )
    assert any(
        p.startswith(f"{manifest}:25: jobs[3].max_reasks: is 11, above the most allowed (10); use 10 or less")
        for p in problems
    )

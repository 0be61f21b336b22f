"""YAML manifests: run settings, templates, data files of each format, carry columns, item ids."""

# Expected messages and YAML rows are written out whole, as a user sees them.
# ruff: noqa: E501

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from relaybatch.manifests import ManifestInvalid, load_items, open_manifest

CHAT_JOB = """
    run:
      name: nightly
      rate_limit_rpm: 600
      budget_usd: 2.50
      concurrency: 4
      uncertain: resend
    jobs:
      - name: quiz
        kind: chat
        model: m-chat
        request: {max_tokens: 32}
        system: "About {topic}."
        prompt: "Q: {question}"
        data: rows.DATA
        carry: [topic]
"""
ROWS = [
    {"id": "a", "topic": "geo", "question": "Longest river?"},
    {"id": "b", "topic": "sci", "question": "Why?"},
]


def _write_rows(folder: Path, suffix: str) -> None:
    path = folder / f"rows.{suffix}"
    if suffix == "csv":
        path.write_text(
            "id,topic,question\n" + "".join(f"{r['id']},{r['topic']},{r['question']}\n" for r in ROWS)
        )
    elif suffix == "jsonl":
        import json

        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    else:
        pq.write_table(pa.Table.from_pylist(ROWS), path)


@pytest.mark.parametrize("suffix", ["csv", "jsonl", "parquet"])
def test_a_data_file_of_each_format_fills_the_templates(write, tmp_path: Path, suffix: str) -> None:
    _write_rows(tmp_path, suffix)
    manifest = write("m.yaml", CHAT_JOB.replace("DATA", suffix))

    items = load_items(manifest)

    assert [item.item_id for item in items] == ["a", "b"]
    assert items[0].request == {
        "model": "m-chat",
        "max_tokens": 32,
        "messages": [
            {"role": "system", "content": "About geo."},
            {"role": "user", "content": "Q: Longest river?"},
        ],
    }
    assert items[1].carry == {"topic": "sci"}
    assert items[0].job == "quiz" and items[0].kind == "chat"


def test_run_settings_are_read_exactly(write, tmp_path: Path) -> None:
    _write_rows(tmp_path, "csv")
    manifest = open_manifest(write("m.yaml", CHAT_JOB.replace("DATA", "csv")))

    settings = manifest.settings
    assert settings.budget_usd == Decimal("2.50")
    assert (settings.name, settings.rate_limit_rpm, settings.concurrency, settings.uncertain) == (
        "nightly",
        600,
        4,
        "resend",
    )
    assert manifest.run_name == "nightly"


def test_inline_items_get_ids_from_the_id_template_or_their_position(write) -> None:
    manifest = write(
        "m.yaml",
        """
        jobs:
          - name: named
            kind: image
            model: m-image
            prompt: "{thing}"
            id: "pic-{thing}"
            items: [{thing: cat}, {thing: dog}]
          - name: numbered
            kind: video
            model: m-video
            prompt: "{thing}"
            items: [{thing: sea}, {thing: sky}]
        """,
    )
    items = load_items(manifest)
    assert [item.item_id for item in items] == ["pic-cat", "pic-dog", "numbered-1", "numbered-2"]
    assert items[0].request == {"model": "m-image", "prompt": "cat"}


def test_a_whole_value_placeholder_keeps_the_row_value_type(write, tmp_path: Path) -> None:
    pq.write_table(pa.Table.from_pylist([{"n": 3, "p": "kite"}]), tmp_path / "d.parquet")
    manifest = write(
        "m.yaml",
        """
        jobs:
          - {name: pics, kind: image, model: m, request: {n: "{n}", prompt: "a {p}"}, data: d.parquet}
        """,
    )
    assert load_items(manifest)[0].request == {"model": "m", "n": 3, "prompt": "a kite"}


def test_literal_braces_are_written_doubled(write) -> None:
    manifest = write(
        "m.yaml",
        """
        jobs:
          - {name: j, kind: chat, model: m, prompt: "Reply as {{\\"word\\": \\"{w}\\"}}", items: [{w: hi}]}
        """,
    )
    assert load_items(manifest)[0].request["messages"][0]["content"] == 'Reply as {"word": "hi"}'


def test_web_search_takes_no_model_and_routes_the_prompt(write) -> None:
    manifest = write(
        "m.yaml",
        """
        jobs:
          - {name: s, kind: web_search, prompt: "{t} news", items: [{t: tides}]}
          - {name: r, kind: web_search, request: {route: reader}, prompt: "{u}", items: [{u: "https://a.example"}]}
        """,
    )
    search, reader = load_items(manifest)
    assert search.request == {"q": "tides news"}
    assert reader.request == {"route": "reader", "url": "https://a.example"}


def test_judgment_prompt_becomes_the_state(write) -> None:
    manifest = write(
        "m.yaml",
        """
        jobs:
          - name: j
            kind: judgment
            model: judge
            prompt: "{text}"
            request: {questions: {ok: {type: noul, instructions: Is it fine}}}
            items: [{text: all good}]
        """,
    )
    request = load_items(manifest)[0].request
    assert request["state"] == "all good" and request["questions"]["ok"]["type"] == "noul"


def test_iter_items_streams_and_stops_at_the_first_bad_row(write) -> None:
    manifest = write(
        "m.yaml",
        """
        jobs:
          - {name: j, kind: image, model: m, prompt: "{p}", request: {n: "{n}"}, items: [{p: a, n: 1}, {p: b, n: 99}]}
        """,
    )
    items = open_manifest(manifest).iter_items()
    assert next(items).item_id == "j-1"
    with pytest.raises(ManifestInvalid, match=r"m\.yaml:2: n: is 99, above the most allowed \(10\)"):
        next(items)


def test_an_image_column_becomes_each_familys_inline_part(write, tmp_path: Path, png: bytes) -> None:
    import base64

    (tmp_path / "p.png").write_bytes(png)
    data = base64.b64encode(png).decode()
    jobs = "\n".join(
        f"  - {{name: {kind}, kind: {kind}, model: m, prompt: look, image: pic, request: {{max_tokens: 9}}, items: [{{pic: p.png}}]}}"
        for kind in ("chat", "responses", "messages", "generate_content")
    )
    chat, responses, messages, generate = load_items(write("m.yaml", f"jobs:\n{jobs}\n"))
    url = f"data:image/png;base64,{data}"
    assert chat.request["messages"][0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    assert responses.request["input"] == [
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": url}],
        }
    ]
    assert messages.request["messages"][0]["content"][0]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": data,
    }
    assert generate.request["contents"] == [
        {"role": "user", "parts": [{"text": "look"}, {"inlineData": {"mimeType": "image/png", "data": data}}]}
    ]


def test_kinds_without_image_or_system_inputs_say_so(write) -> None:
    manifest = write(
        "m.yaml",
        "jobs:\n  - {name: v, kind: video, model: m, prompt: x, system: be brief, image: pic, items: [{pic: a.png}]}\n",
    )
    with pytest.raises(ManifestInvalid) as caught:
        load_items(manifest)
    assert [str(problem) for problem in caught.value.problems] == [
        f"{manifest}:2: jobs[0].image: kind video takes no image input; use generate_content to edit images",
        f"{manifest}:2: jobs[0].system: kind video has no system instruction; put it in the prompt",
    ]

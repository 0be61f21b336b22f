"""The table shortcut (CSV, JSONL, Parquet) and the OpenAI Batch API input format."""

# Expected messages and YAML rows are written out whole, as a user sees them.
# ruff: noqa: E501

from __future__ import annotations

import base64
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from relaybatch.manifests import ManifestInvalid, load_items, run_name_for

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo.csv"


def test_the_demo_csv_gives_three_chat_items_named_after_the_file() -> None:
    items = load_items(DEMO)
    assert [item.item_id for item in items] == ["q1", "q2", "q3"]
    assert {item.job for item in items} == {"demo"} and run_name_for(DEMO) == "demo"
    assert items[0].request == {
        "model": "relay-chat-small",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Name three rivers in Europe."}],
    }
    assert items[0].carry == {"id": "q1"}


def test_shortcut_rows_choose_their_kind_and_parse_json_cells(write) -> None:
    questions = json.dumps({"spam": {"type": "noul", "instructions": "Spam?"}}).replace('"', '""')
    path = write(
        "mixed.csv",
        f"""
        id,kind,model,prompt,size,n,questions
        a,image,m-img,a red kite,1024x1024,2,
        b,judgment,judge,buy now!!!,,,"{questions}"
        c,,m-chat,hello,,,
        """,
    )
    image, judgment, chat = load_items(path)
    assert image.kind == "image" and image.request == {
        "model": "m-img",
        "prompt": "a red kite",
        "size": "1024x1024",
        "n": 2,
    }
    assert (
        judgment.request["questions"]["spam"]["type"] == "noul" and judgment.request["state"] == "buy now!!!"
    )
    assert chat.kind == "chat"


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_jsonl_and_parquet_tables_work_like_csv(tmp_path: Path, suffix: str) -> None:
    rows = [
        {"id": "x", "model": "m", "prompt": "hi", "max_tokens": 8},
        {"id": "y", "model": "m", "prompt": "yo", "max_tokens": 9},
    ]
    path = tmp_path / f"table.{suffix}"
    if suffix == "jsonl":
        path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    items = load_items(path)
    assert [(item.job, item.item_id, item.request["max_tokens"]) for item in items] == [
        ("table", "x", 8),
        ("table", "y", 9),
    ]


def test_a_shortcut_image_column_becomes_an_inline_part(write, tmp_path: Path, png: bytes) -> None:
    (tmp_path / "a.png").write_bytes(png)
    encoded = base64.b64encode(png).decode()
    path = write(
        "pics.csv",
        f"id,kind,model,prompt,image,max_tokens\n1,messages,m,what is it?,a.png,10\n2,chat,m,and this?,{encoded},10\n",
    )
    messages, chat = load_items(path)
    assert messages.request["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": encoded}},
        {"type": "text", "text": "what is it?"},
    ]
    assert chat.request["messages"][0]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{encoded}"},
    }


def test_shortcut_problems_name_row_and_field(write) -> None:
    path = write("bad.csv", "id,kind,model,prompt,max_tokens\na,chat,m,,5\nb,essay,m,x,5\nc,messages,m,x,\n")
    with pytest.raises(ManifestInvalid) as caught:
        load_items(path)
    assert [str(p) for p in caught.value.problems] == [
        f"{path}:2: prompt: is required; give the user message in a prompt column",
        f"{path}:3: kind: 'essay' is not a kind; use one of chat, responses, messages, generate_content, image, video, video_v1, judgment, web_search",
        f"{path}:4: max_tokens: is required; add `max_tokens:` (e.g. max_tokens: 64)",
    ]


BATCH_LINES = [
    {
        "custom_id": "c1",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    },
    {"custom_id": "r1", "method": "POST", "url": "/v1/responses", "body": {"model": "m", "input": "hi"}},
    {
        "custom_id": "m1",
        "method": "POST",
        "url": "/v1/messages",
        "body": {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
    },
    {
        "custom_id": "i1",
        "method": "POST",
        "url": "/v1/images/generations",
        "body": {"model": "m", "prompt": "kite"},
    },
    {
        "custom_id": "g1",
        "method": "POST",
        "url": "/v1beta/models/gm:generateContent",
        "body": {"contents": [{"parts": [{"text": "hi"}]}]},
    },
    {"custom_id": "v1", "method": "POST", "url": "/v2/videos", "body": {"model": "m", "prompt": "sea"}},
    {
        "custom_id": "l1",
        "method": "POST",
        "url": "/v1/videos/generations",
        "body": {"model": "m", "prompt": "sea"},
    },
    {
        "custom_id": "j1",
        "method": "POST",
        "url": "/v1/typedjudge",
        "body": {"model": "j", "state": "s", "questions": {"q": {"type": "noul", "instructions": "i"}}},
    },
    {"custom_id": "w1", "method": "GET", "url": "/v1/websearch/simple-search", "body": {"q": "tides"}},
]


def test_batch_lines_are_accepted_as_they_are(tmp_path: Path) -> None:
    path = tmp_path / "hosted.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in BATCH_LINES))
    items = load_items(path)
    assert [(item.item_id, item.kind) for item in items] == [
        ("c1", "chat"),
        ("r1", "responses"),
        ("m1", "messages"),
        ("i1", "image"),
        ("g1", "generate_content"),
        ("v1", "video"),
        ("l1", "video_v1"),
        ("j1", "judgment"),
        ("w1", "web_search"),
    ]
    assert items[0].request == BATCH_LINES[0]["body"] and items[0].carry == {"custom_id": "c1"}
    assert items[4].request == {"model": "gm", "contents": [{"parts": [{"text": "hi"}]}]}
    assert items[8].request == {"route": "simple-search", "q": "tides"}
    assert {item.job for item in items} == {"hosted"}


def test_batch_line_mistakes_are_located(tmp_path: Path) -> None:
    path = tmp_path / "hosted.jsonl"
    lines = [
        BATCH_LINES[0],
        {"custom_id": "e1", "method": "POST", "url": "/v1/embeddings", "body": {"model": "m", "input": "x"}},
        {
            "custom_id": "m2",
            "method": "POST",
            "url": "/v1/messages",
            "body": {"model": "m", "messages": [{"role": "user", "content": "x"}]},
        },
        {"custom_id": "c1", "url": "/v1/chat/completions"},
        {**BATCH_LINES[0], "custom_id": "c2"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(ManifestInvalid) as caught:
        load_items(path)
    problems = [str(p) for p in caught.value.problems]
    assert problems[0].startswith(f"{path}:2: url: '/v1/embeddings' is not a route relaybatch runs")
    assert problems[1:] == [
        f"{path}:3: max_tokens: is required; add `max_tokens:` (e.g. max_tokens: 64)",
        f"{path}:4: body: is required in a batch line; give custom_id, method, url and body on every line",
        f"{path}:5: item 'c2' duplicates the item at {path}:1 (same job and request); remove one",
    ]


def test_a_binary_parquet_column_is_text_or_base64_image_bytes(tmp_path: Path, png: bytes) -> None:
    # A binary column's cells became Python's "b'...'" text: the prompt sent was b'h\xc3\xa9llo'.
    table = tmp_path / "t.parquet"
    binary = {"prompt": pa.array(["héllo".encode()], pa.binary()), "image": pa.array([png], pa.binary())}
    pq.write_table(pa.table({"id": ["a"], "model": ["m"], **binary}), table)
    (item,) = load_items(table)
    (message,) = item.request["messages"]
    assert message["content"][0] == {"type": "text", "text": "héllo"}
    assert (
        message["content"][1]["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(png).decode()
    )
